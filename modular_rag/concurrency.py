"""How steps wait: the kit's own event loop and thread pool, and fan-out inside a step.

One async path. An operator is a plain function or an ``async def`` (or has an async ``acall``): under ``ainvoke``
an async one is awaited on the event loop and a sync one runs in the kit's pool of :data:`NODE_THREADS` threads
(:class:`PooledNode`, :func:`in_pool`); under ``invoke`` a sync one runs in the caller's thread and an async one on
the kit's one loop thread (:func:`await_sync`).

* A pattern's fan-out node is an ``async def`` (:class:`AsyncNode`) that awaits its runs :func:`together`: at once
  in async runs, in turn in sync ones.
* A sync operator that fans out (one judgement per passage) runs its calls :func:`in_threads`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import Runnable, RunnableConfig

from modular_rag.trace import current_deadline

__all__ = [
    "NODE_THREADS",
    "AsyncNode",
    "PooledNode",
    "async_form",
    "await_sync",
    "in_pool",
    "in_threads",
    "pooled",
    "read_ahead",
    "settle",
    "settle_call",
    "together",
]

T = TypeVar("T")
R = TypeVar("R")

_SYNC_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar("modular_rag_sync_run", default=False)
"""Set while :func:`await_sync` runs an awaitable for sync code: :func:`together` then awaits in turn."""


def settle(result: Any) -> Any:
    """An operator's result; an awaitable it returned, run to completion (see :func:`await_sync`)."""
    return await_sync(result) if inspect.isawaitable(result) else result


def settle_call(fn: Callable[[Mapping[str, Any]], Any], state: Mapping[str, Any]) -> Any:
    return settle(fn(state))


_LOOP: asyncio.AbstractEventLoop | None = None


def _kit_loop() -> asyncio.AbstractEventLoop:
    """The kit's own event loop, in a daemon thread, started on first use: where sync runs await async operators.
    One loop for the process, so an async client (an HTTP connection pool) is always used on the loop it was made
    on."""
    global _LOOP
    with _POOL_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="modular-rag-loop", daemon=True).start()
            _LOOP = loop
        return _LOOP


def await_sync(awaitable: Awaitable[Any]) -> Any:
    """Run an awaitable to completion from sync code (an async operator under ``invoke``): on the kit's event loop
    thread, in a copy of the caller's context (its meter, deadline and LangChain run), within the caller's deadline.

    Raises:
        RuntimeError: If called on the kit's loop thread itself (it would wait on itself).
    """
    loop = _kit_loop()
    if threading.current_thread().name == "modular-rag-loop":
        raise RuntimeError("an async operator awaited synchronously on the kit's own event loop; await it instead")
    context = contextvars.copy_context()
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    async def run() -> Any:
        _SYNC_RUN.set(True)  # in the task's own copy of the caller's context
        deadline = current_deadline()
        if deadline is None:
            return await awaitable
        async with asyncio.timeout(deadline.remaining()):
            return await awaitable

    def start() -> None:
        task = loop.create_task(run(), context=context)

        def finished(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                done.set_exception(concurrent.futures.CancelledError())
            elif task.exception() is not None:
                done.set_exception(task.exception())
            else:
                done.set_result(task.result())

        task.add_done_callback(finished)

    loop.call_soon_threadsafe(start)
    return done.result()


async def in_pool(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in the kit's thread pool, in a copy of the caller's context; awaited on the loop."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(_node_pool(), call)


def async_form(fn: Any) -> Callable[[Mapping[str, Any]], Awaitable[Any]] | None:
    """The async form of an operator, or ``None`` for a sync one: ``fn`` itself when it is an ``async def`` (or an
    object whose ``__call__`` is), else its ``acall`` attribute when that is an ``async def``."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        return fn
    acall = getattr(fn, "acall", None)
    return acall if acall is not None and inspect.iscoroutinefunction(acall) else None


def in_threads(calls: Sequence[Callable[[], T]], *, in_flight: int | None = None) -> list[T]:
    """Run calls of a sync operator (one judgement per passage): one after another in this thread, or with
    ``in_flight`` > 1 in that many threads, each in a copy of this context (its meter, deadline and LangChain run).
    The results come back in order; the first failure is raised.

    Args:
        calls: The calls, each taking no argument.
        in_flight: How many run at once; ``None`` or 1: in turn, in this thread.

    Raises:
        ValueError: If ``in_flight`` is less than 1.
    """
    if in_flight is not None and in_flight < 1:
        raise ValueError(f"in_flight must be >= 1 or None (got {in_flight})")
    todo = list(calls)
    if in_flight is None or in_flight == 1 or len(todo) <= 1:
        return [call() for call in todo]
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=min(in_flight, len(todo)), thread_name_prefix="modular-rag-fan-out"
    ) as threads:
        futures = [threads.submit(contextvars.copy_context().run, call) for call in todo]
        return [future.result() for future in futures]


def read_ahead(
    items: Sequence[T], read: Callable[[Sequence[T]], R], *, size: int = 4000
) -> Iterator[tuple[Sequence[T], R]]:
    """``items`` in parts of ``size``, each with ``read(part)``; the next part is read on a background thread while
    the caller works on the current one (texts fetched from a remote store while the last ones are searched).

    Args:
        items: What to read, in order.
        read: Reads one part (it must be safe to call from another thread).
        size: Items per part.

    Raises:
        ValueError: If ``size`` is less than 1.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1 (got {size})")
    parts = [items[i : i + size] for i in range(0, len(items), size)]
    if len(parts) <= 1:
        yield from ((part, read(part)) for part in parts)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="modular-rag-read-ahead") as reader:
        ahead = reader.submit(read, parts[0])
        for i, part in enumerate(parts):
            got = ahead.result()
            if i + 1 < len(parts):
                ahead = reader.submit(read, parts[i + 1])
            yield part, got


async def together(calls: Sequence[Callable[[], Awaitable[T]]], *, in_flight: int | None = None) -> list[T]:
    """Await an async node's fan-out (one clarification per parent, one search per passage): in an async run
    together on the loop, at most ``in_flight`` at once; in a sync run (the node awaited by :func:`await_sync`) one
    after another, as a sync node would make them. The results come back in order; the first failure is raised,
    and the calls still running are cancelled first.

    Args:
        calls: Coroutine functions taking no argument.
        in_flight: How many run at once in an async run; ``None``: all.

    Raises:
        ValueError: If ``in_flight`` is less than 1.
    """
    if in_flight is not None and in_flight < 1:
        raise ValueError(f"in_flight must be >= 1 or None (got {in_flight})")
    if _SYNC_RUN.get():
        return [await call() for call in calls]
    limit = asyncio.Semaphore(in_flight) if in_flight is not None else None

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        if limit is None:
            return await call()
        async with limit:
            return await call()

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class AsyncNode:
    """A pattern's ``async def`` node function (a fan-out: a tree level's clarifications, a hop's searches) in both
    kinds of run: awaited on the event loop under ``ainvoke`` (:meth:`acall`, as :class:`PooledNode` does for every
    ``is_async`` node), run to completion on the kit's loop under ``invoke`` (:func:`await_sync`).

    Args:
        fn: The coroutine function, ``fn(state) -> update``.
    """

    is_async = True

    def __init__(self, fn: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run the node from a sync run."""
        return await_sync(self.fn(state))

    async def acall(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run the node in an async run."""
        return await self.fn(state)


NODE_THREADS = 64
"""Threads of the pool that runs node functions for async runs (``ainvoke``, ``abatch``): how many nodes may wait
on a model at once, whatever ``max_concurrency`` asks for below it."""


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


_POOL_LOCK = threading.Lock()


def _node_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=NODE_THREADS, thread_name_prefix="modular-rag")
        return _POOL


class PooledNode(Runnable[Any, Any]):
    """A synchronous node function as a runnable whose async run uses the kit's own thread pool.

    LangGraph runs a plain function node of an async run (``ainvoke``, ``abatch``) in the event loop's default
    executor, which has ``min(32, cores + 4)`` threads: on 2 cores, ``abatch(..., {"max_concurrency": 16})`` had at
    most 6 nodes waiting on the model at once. Here async runs use a pool of :data:`NODE_THREADS` threads, so
    ``max_concurrency`` is the bound. Sync runs call the function directly. A function with a ``config`` parameter
    gets the node's ``RunnableConfig``. A node with ``is_async`` and an ``acall`` (a node of async operators from
    :func:`~modular_rag.steps.make_node`, a pattern's :class:`AsyncNode`, a flow run as a node) is awaited on the
    event loop instead: only its sync work takes a pool thread.

    Args:
        name: The node name.
        fn: ``fn(state) -> update`` or ``fn(state, config) -> update``.
    """

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn
        self._takes_config = "config" in inspect.signature(fn).parameters

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the function on the state (in the caller's thread)."""
        if self._takes_config:
            return self.fn(input, config=config or {})
        return self.fn(input)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the function in the kit's thread pool, in a copy of the caller's context (its run config); a node of
        async operators on the loop."""
        acall = getattr(self.fn, "acall", None) if getattr(self.fn, "is_async", False) else None
        if acall is not None:
            return await (acall(input, config=config or {}) if self._takes_config else acall(input))
        call = functools.partial(contextvars.copy_context().run, self.invoke, input, config)
        return await asyncio.get_running_loop().run_in_executor(_node_pool(), call)


def pooled(name: str, fn: Callable[..., Any]) -> Any:
    """``fn`` as a :class:`PooledNode` (a coroutine function as an :class:`AsyncNode` in one); runnables are returned
    as they are."""
    if isinstance(fn, Runnable) or not callable(fn):
        return fn
    return PooledNode(name, AsyncNode(fn) if inspect.iscoroutinefunction(fn) else fn)
