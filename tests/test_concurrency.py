"""The step mechanism's fan-out: :func:`~modular_rag.concurrency.gathered` calls, awaited together on the loop in
async runs (at most ``in_flight`` at once), made in order in a sync run's thread unless threads are asked for; the
first failure raised, and an async run's other calls cancelled; a :func:`~modular_rag.concurrency.waiting` body sent
their results."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from modular_rag.concurrency import gathered, waiting
from modular_rag.trace import Wait


class Calls:
    """Calls that take ``seconds`` each and record how many ran at once, in which threads, and which were cancelled."""

    def __init__(self, seconds: float = 0.1) -> None:
        self.seconds, self.now, self.most = seconds, 0, 0
        self.threads: set[str] = set()
        self.cancelled: list[int] = []
        self._lock = threading.Lock()

    def _enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)

    def _leave(self) -> None:
        with self._lock:
            self.now -= 1

    def wait(self, i: int, *, fails: bool = False, seconds: float | None = None) -> Wait:
        pause = self.seconds if seconds is None else seconds

        def call() -> int:
            self._enter()
            try:
                time.sleep(pause)
                if fails:
                    raise ValueError(f"call {i} failed")
                return i * 10
            finally:
                self._leave()

        async def acall() -> int:
            self._enter()
            try:
                await asyncio.sleep(pause)
                if fails:
                    raise ValueError(f"call {i} failed")
                return i * 10
            except asyncio.CancelledError:
                self.cancelled.append(i)
                raise
            finally:
                self._leave()

        return Wait(call, acall)


@pytest.mark.unit
def test_an_async_run_awaits_gathered_calls_together_and_a_sync_run_makes_them_in_its_thread() -> None:
    calls = Calls()
    assert asyncio.run(gathered([calls.wait(i) for i in range(4)]).acall()) == [0, 10, 20, 30]
    assert calls.most == 4 and len(calls.threads) == 1  # all four at once, on the loop's thread

    calls = Calls()
    assert asyncio.run(gathered([calls.wait(i) for i in range(5)], in_flight=2).acall()) == [0, 10, 20, 30, 40]
    assert calls.most == 2

    calls = Calls()
    assert gathered([calls.wait(i) for i in range(3)]).call() == [0, 10, 20]
    assert calls.most == 1 and calls.threads == {threading.current_thread().name}  # in order, in this thread

    calls = Calls()
    assert gathered([calls.wait(i) for i in range(4)], in_flight=2).call() == [0, 10, 20, 30]
    assert calls.most == 2 and len(calls.threads) == 2  # threads, as many as asked


@pytest.mark.unit
def test_the_first_failure_is_raised_and_an_async_run_cancels_the_calls_still_running() -> None:
    calls = Calls()
    waits = [calls.wait(0, seconds=5.0), calls.wait(1, fails=True, seconds=0.05), calls.wait(2, seconds=5.0)]
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="call 1 failed"):
        asyncio.run(gathered(waits).acall())
    assert time.perf_counter() - t0 < 2.0 and sorted(calls.cancelled) == [0, 2] and calls.now == 0
    with pytest.raises(ValueError, match="call 1 failed"):
        gathered([Calls(0.0).wait(0), Calls(0.0).wait(1, fails=True)]).call()
    with pytest.raises(ValueError, match=r"in_flight must be >= 1 or None \(got 0\)"):
        gathered([], in_flight=0)


@pytest.mark.unit
def test_a_waiting_body_is_sent_the_gathered_results_in_sync_and_async_runs() -> None:
    calls = Calls(0.01)

    def body(state: dict[str, Any]) -> Any:
        results = yield gathered([calls.wait(i) for i in range(state["n"])])
        try:
            yield gathered([calls.wait(9, fails=True)])
        except ValueError as exc:
            return {"answer": {"text": f"{sum(results)}; {exc}"}}
        return {}

    node = waiting(body)
    assert node({"n": 3}) == asyncio.run(node.acall({"n": 3})) == {"answer": {"text": "30; call 9 failed"}}
