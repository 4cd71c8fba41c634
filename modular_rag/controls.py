"""The step controls a config gives any slot, besides ``enabled`` and ``on_error``: ``skip_when`` conditions on the
state (:func:`evaluate_condition`) and ``timeout_s`` (:func:`call_with_timeout`, :func:`acall_with_timeout`: the
operator runs under a :class:`~modular_rag.trace.Deadline` that model clients honour, and what its calls in flight
spent still reaches the ledger)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from modular_rag.concurrency import settle, settle_call
from modular_rag.config import Condition
from modular_rag.trace import Deadline, run_with_deadline, under_deadline

__all__ = ["TIMEOUT_GRACE_S", "acall_with_timeout", "call_with_timeout", "evaluate_condition"]

_MISSING = object()


def _lookup(state: Mapping[str, Any], key: str) -> Any:
    value: Any = state
    for part in key.split("."):
        if isinstance(value, Mapping):
            value = value.get(part, _MISSING)
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def evaluate_condition(condition: Condition, state: Mapping[str, Any]) -> bool:
    """Whether a ``skip_when`` condition holds for ``state``. Missing keys count as empty / not equal."""
    key = condition.key
    use_len = key.startswith("len:")
    value = _lookup(state, key[4:] if use_len else key)
    if use_len:
        value = len(value) if value is not _MISSING and hasattr(value, "__len__") else 0
    op, target = condition.op, condition.value
    if op == "empty":
        return value is _MISSING or value is None or (hasattr(value, "__len__") and len(value) == 0)
    if op == "nonempty":
        return not (value is _MISSING or value is None or (hasattr(value, "__len__") and len(value) == 0))
    if value is _MISSING:
        return op == "ne"
    try:
        return {
            "eq": lambda: value == target,
            "ne": lambda: value != target,
            "gt": lambda: value > target,
            "ge": lambda: value >= target,
            "lt": lambda: value < target,
            "le": lambda: value <= target,
            "in": lambda: value in target,
            "contains": lambda: target in value,
        }[op]()
    except TypeError:
        return False


TIMEOUT_GRACE_S = 2.0
"""After a step times out, how long to wait for its model calls in flight to end (they end at the deadline, their
HTTP timeout), so what they spent reaches the ledger. Other work of the step is not waited for."""


_DEADLINE_SLACK_S = 0.05
"""A failure this close to a step's deadline counts as the step timing out (see :func:`call_with_timeout`)."""


def call_with_timeout(
    fn: Callable[[Mapping[str, Any]], dict[str, Any]], state: Mapping[str, Any], timeout_s: float | None
) -> Any:
    """Call the operator; with a timeout, in a worker thread under a :class:`~modular_rag.trace.Deadline` that
    model clients honour. On timeout the deadline is cancelled (no new model call starts) and the calls in flight
    are given :data:`TIMEOUT_GRACE_S` to end, so their spending is in the step's meter when the step records it."""
    if timeout_s is None:
        return settle(fn(state))
    limit = Deadline(timeout_s)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="op-timeout")
    future = pool.submit(run_with_deadline, contextvars.copy_context(), limit, settle_call, fn, state)
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        limit.cancel()
        limit.wait_idle(TIMEOUT_GRACE_S)  # model calls in flight end at the deadline; count what they spent
        raise
    except Exception as exc:
        # a model call cut by its HTTP timeout (the time left) can fail a moment before the wait above gives up:
        # that is the step timing out too, and is reported as such
        if limit.remaining() <= _DEADLINE_SLACK_S:
            limit.cancel()
            limit.wait_idle(TIMEOUT_GRACE_S)
            raise concurrent.futures.TimeoutError(f"timed out after {timeout_s}s") from exc
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


async def acall_with_timeout(
    fn: Callable[[Mapping[str, Any]], Awaitable[Any]], state: Mapping[str, Any], timeout_s: float | None
) -> Any:
    """Await an async operator; with a timeout, under an asyncio deadline and a :class:`~modular_rag.trace.Deadline`
    that model clients honour, as :func:`call_with_timeout` does for a sync one. Cancelled at the deadline, a model
    call in flight records what it sent, so the step's meter has it."""
    if timeout_s is None:
        return await fn(state)
    with under_deadline(Deadline(timeout_s)) as limit:
        try:
            async with asyncio.timeout(timeout_s):
                return await fn(state)
        except TimeoutError:
            limit.cancel()
            raise
        except Exception as exc:  # a model call cut by its HTTP timeout just before the deadline: a timeout too
            if limit.remaining() <= _DEADLINE_SLACK_S:
                limit.cancel()
                raise TimeoutError(f"timed out after {timeout_s}s") from exc
            raise
