"""How steps wait: the kit's own event loop and thread pool, and operator bodies written as generators of waits.

* :func:`waiting` makes one operator of a generator that yields the model calls it waits on
  (:class:`~modular_rag.trace.Wait`): a sync run makes each call in its thread (:func:`run_blocking`), an async run
  awaits it on the event loop and runs the code between calls in the kit's pool (:meth:`WaitingOperator.acall`).
  :func:`gathered` is several such calls at once.
* :func:`await_sync` runs an async operator to completion from a sync run, on the kit's one event loop thread.
* :class:`PooledNode` (:func:`pooled`) gives node functions of async runs the kit's pool of :data:`NODE_THREADS`
  threads instead of the event loop's default executor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from modular_rag.trace import Wait, current_deadline

__all__ = [
    "NODE_THREADS",
    "PooledNode",
    "WaitingBody",
    "WaitingOperator",
    "WaitingSteps",
    "async_form",
    "await_sync",
    "gathered",
    "in_pool",
    "pooled",
    "run_blocking",
    "settle",
    "settle_call",
    "waiting",
]


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


WaitingBody = Generator[Wait, Any, dict[str, Any]]
"""What a waiting body returns when called: a generator that yields each :class:`~modular_rag.trace.Wait` (a model
call, a :class:`Runner`'s run, :func:`gathered` calls) and is sent its result (or has its exception thrown in); it
returns the update."""


WaitingSteps = Callable[[Mapping[str, Any]], WaitingBody]
"""An operator body written as a generator (see :data:`WaitingBody`)."""


class WaitingOperator:
    """An operator whose body (a generator, see :data:`WaitingSteps`) yields the model calls it waits on: called,
    it makes each call blocking (the sync path, as a plain operator would); ``acall`` awaits each call on the event
    loop and runs the code between them in the kit's thread pool, so no thread is held while the model answers.

    As a node function of its own (a pattern's fan-out node, :meth:`~modular_rag.builder.FlowBuilder.add_node`) it
    is awaited on the loop in async runs, as :class:`PooledNode` does for every ``is_async`` node.

    Args:
        steps: The generator function.
    """

    is_async = True

    def __init__(self, steps: WaitingSteps) -> None:
        self.steps = steps
        functools.update_wrapper(self, steps)

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run the body, making each call it yields in this thread."""
        return run_blocking(self.steps(state))

    def ask(self, state: Mapping[str, Any]) -> Wait:
        """The operator's run as a :class:`~modular_rag.trace.Wait` (a retrieve operator given to a hop as the flow's
        search)."""
        return Wait(functools.partial(self, state), functools.partial(self.acall, state))

    async def acall(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run the body, awaiting each call it yields; the code between runs in the kit's thread pool."""
        body = self.steps(state)
        sent: Any = None
        failed: BaseException | None = None
        while True:
            done, value = await in_pool(_advance, body, sent, failed)
            if done:
                return value
            sent, failed = None, None
            try:
                sent = await value.acall()
            except Exception as exc:
                failed = exc


def run_blocking(body: Generator[Wait, Any, Any]) -> Any:
    """Run a generator that yields :class:`~modular_rag.trace.Wait` calls to its end, making each call in this
    thread (sent its result, or its exception thrown in); returns what the generator returns. A helper written as
    such a generator (``yield from`` in a :func:`waiting` body) is called from sync code through this."""
    sent: Any = None
    failed: BaseException | None = None
    while True:
        done, value = _advance(body, sent, failed)
        if done:
            return value
        sent, failed = None, None
        try:
            sent = value.call()
        except Exception as exc:
            failed = exc


def _advance(body: Generator[Wait, Any, Any], sent: Any, failed: BaseException | None) -> tuple[bool, Any]:
    """Run a body to its next wait: ``(False, wait)``, or ``(True, update)`` when it returned (a StopIteration
    cannot cross a future, so it ends here)."""
    try:
        wait = body.throw(failed) if failed is not None else body.send(sent)
    except StopIteration as stop:
        return True, stop.value
    if not isinstance(wait, Wait):
        raise TypeError(f"a waiting operator yielded {type(wait).__name__}; it yields modular_rag.trace.Wait calls")
    return False, wait


def gathered(waits: Sequence[Wait], *, in_flight: int | None = None) -> Wait:
    """Several calls as one :class:`~modular_rag.trace.Wait`, sent the list of their results in order: a fan-out
    inside one step (one clarification per parent, one judgement per passage). An async run awaits them concurrently
    on the loop, at most ``in_flight`` at once (``None``: all); a sync run makes them one after another in its thread,
    or with ``in_flight`` > 1 in that many threads. Each call runs in a copy of the step's context (its meter,
    deadline and LangChain run). The first failure is raised; an async run cancels the calls still running first.

    Args:
        waits: The calls.
        in_flight: How many run at once (threads in a sync run, awaited calls in an async one); ``None``: every call
            at once in an async run, one after another in a sync one, where each would hold a thread.

    Raises:
        ValueError: If ``in_flight`` is less than 1.
    """
    if in_flight is not None and in_flight < 1:
        raise ValueError(f"in_flight must be >= 1 or None (got {in_flight})")
    calls = list(waits)

    def call() -> list[Any]:
        if in_flight is None or in_flight == 1 or len(calls) <= 1:
            return [wait.call() for wait in calls]
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=min(in_flight, len(calls)), thread_name_prefix="modular-rag-gathered"
        ) as pool:
            futures = [pool.submit(contextvars.copy_context().run, wait.call) for wait in calls]
            return [future.result() for future in futures]

    async def acall() -> list[Any]:
        limit = asyncio.Semaphore(in_flight) if in_flight is not None else None

        async def one(wait: Wait) -> Any:
            if limit is None:
                return await wait.acall()
            async with limit:
                return await wait.acall()

        tasks = [asyncio.ensure_future(one(wait)) for wait in calls]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    return Wait(call, acall)


def waiting(steps: WaitingSteps) -> WaitingOperator:
    """Make an operator of a generator that yields the model calls it waits on (``ChatClient.ask(...)``), each sent
    back its result: one body for sync runs (blocking calls) and async runs (awaited calls, no thread held)::

        def run(state):
            completion = yield providers.llm.ask(prompt, max_tokens=64)
            return {"answer": ...}

        return waiting(run)

    A pattern's node that runs operators itself is written the same way, yielding a :class:`Runner`'s run
    (``update = yield runner.ask(state)``) or several at once (``updates = yield gathered([...])``).
    """
    return WaitingOperator(steps)


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
    :func:`make_node`, a pattern's :func:`waiting` fan-out node, a flow run as a node) is awaited on the event loop
    instead: only its sync work takes a pool thread.

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
    """``fn`` as a :class:`PooledNode`; runnables and coroutine functions are returned as they are."""
    if isinstance(fn, Runnable) or inspect.iscoroutinefunction(fn) or not callable(fn):
        return fn
    return PooledNode(name, fn)
