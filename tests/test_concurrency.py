"""Fan-out inside a step, on the one async path: :func:`~modular_rag.concurrency.together` awaits an ``async def``
node's runs at once in async runs (at most ``in_flight``) and in turn in sync ones (the node run by
:func:`~modular_rag.concurrency.await_sync`), the first failure raised and the other runs cancelled;
:func:`~modular_rag.concurrency.in_threads` runs a sync operator's calls in turn or in threads;
:class:`~modular_rag.concurrency.AsyncNode` is one ``async def`` body for both kinds of run."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from modular_rag.concurrency import AsyncNode, await_sync, in_threads, pooled, read_ahead, together


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

    def call(self, i: int, *, fails: bool = False, seconds: float | None = None) -> int:
        self._enter()
        try:
            time.sleep(self.seconds if seconds is None else seconds)
            if fails:
                raise ValueError(f"call {i} failed")
            return i * 10
        finally:
            self._leave()

    async def acall(self, i: int, *, fails: bool = False, seconds: float | None = None) -> int:
        self._enter()
        try:
            await asyncio.sleep(self.seconds if seconds is None else seconds)
            if fails:
                raise ValueError(f"call {i} failed")
            return i * 10
        except asyncio.CancelledError:
            self.cancelled.append(i)
            raise
        finally:
            self._leave()


@pytest.mark.unit
def test_an_async_run_awaits_its_runs_together_and_a_sync_run_in_turn() -> None:
    calls = Calls()
    runs = [functools.partial(calls.acall, i) for i in range(4)]
    assert asyncio.run(together(runs)) == [0, 10, 20, 30]
    assert calls.most == 4 and len(calls.threads) == 1  # all four at once, on the loop's thread

    calls = Calls()
    assert asyncio.run(together([functools.partial(calls.acall, i) for i in range(5)], in_flight=2)) == [
        0,
        10,
        20,
        30,
        40,
    ]
    assert calls.most == 2

    calls = Calls()
    assert await_sync(together([functools.partial(calls.acall, i) for i in range(3)])) == [0, 10, 20]
    assert calls.most == 1  # a sync run (the node on the kit's loop) makes them one after another


@pytest.mark.unit
def test_the_first_failure_is_raised_and_an_async_run_cancels_the_runs_still_going() -> None:
    calls = Calls()
    runs = [
        functools.partial(calls.acall, 0, seconds=5.0),
        functools.partial(calls.acall, 1, fails=True, seconds=0.05),
        functools.partial(calls.acall, 2, seconds=5.0),
    ]
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="call 1 failed"):
        asyncio.run(together(runs))
    assert time.perf_counter() - t0 < 2.0 and sorted(calls.cancelled) == [0, 2] and calls.now == 0
    with pytest.raises(ValueError, match=r"in_flight must be >= 1 or None \(got 0\)"):
        asyncio.run(together([], in_flight=0))


@pytest.mark.unit
def test_a_sync_operator_makes_its_calls_in_turn_or_in_as_many_threads_as_asked() -> None:
    calls = Calls()
    assert in_threads([functools.partial(calls.call, i) for i in range(3)]) == [0, 10, 20]
    assert calls.most == 1 and calls.threads == {threading.current_thread().name}  # in order, in this thread

    calls = Calls()
    assert in_threads([functools.partial(calls.call, i) for i in range(4)], in_flight=2) == [0, 10, 20, 30]
    assert calls.most == 2 and len(calls.threads) == 2  # threads, as many as asked
    with pytest.raises(ValueError, match="call 1 failed"):
        in_threads(
            [functools.partial(Calls(0.0).call, 0), functools.partial(Calls(0.0).call, 1, fails=True)], in_flight=2
        )
    with pytest.raises(ValueError, match=r"in_flight must be >= 1 or None \(got 0\)"):
        in_threads([], in_flight=0)


@pytest.mark.unit
def test_one_async_def_node_serves_sync_and_async_runs() -> None:
    calls = Calls(0.01)

    async def node(state: Mapping[str, Any]) -> dict[str, Any]:
        results = await together([functools.partial(calls.acall, i) for i in range(state["n"])])
        try:
            await calls.acall(9, fails=True)
        except ValueError as exc:
            return {"answer": {"text": f"{sum(results)}; {exc}"}}
        return {}

    wrapped = pooled("node", node)  # what add_node gives LangGraph
    expected = {"answer": {"text": "30; call 9 failed"}}
    assert wrapped.invoke({"n": 3}) == expected and calls.most == 1  # invoke: on the kit's loop, in turn
    assert asyncio.run(wrapped.ainvoke({"n": 3})) == expected and calls.most == 3  # ainvoke: on the run's loop
    assert isinstance(wrapped.fn, AsyncNode)


@pytest.mark.unit
def test_read_ahead_gives_every_part_in_order_reading_the_next_while_the_caller_works() -> None:
    # an add reads tens of thousands of older texts from Milvus to search them for new titles: the next part's read
    # runs while the current part is searched, so the two overlap instead of adding up
    started: dict[int, float] = {}
    done: dict[int, float] = {}

    def read(part: Any) -> list[int]:
        started[part[0]] = time.perf_counter()
        time.sleep(0.05)
        return [x * 10 for x in part]

    got = []
    for part, values in read_ahead(list(range(7)), read, size=3):
        time.sleep(0.1)  # the caller's work on this part
        done[part[0]] = time.perf_counter()
        got.append((list(part), values))
    assert got == [([0, 1, 2], [0, 10, 20]), ([3, 4, 5], [30, 40, 50]), ([6], [60])]
    assert started[3] < done[0] and started[6] < done[3]  # each next part was read during the caller's work
    assert list(read_ahead([], read)) == []
    with pytest.raises(ValueError, match="size must be >= 1"):
        list(read_ahead([1], read, size=0))
