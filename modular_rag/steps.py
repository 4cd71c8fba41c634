"""Step instrumentation: an operator (or a pattern's own function) as a traced, timed, deadline-bounded graph node.

A :class:`_Step` is one operator with its step controls from the config: ``skip_when`` skips it for a run when a
condition on the state holds (:func:`evaluate_condition`); ``timeout_s`` runs it under a
:class:`~modular_rag.trace.Deadline` that model clients honour (:func:`_call`); ``on_error: skip`` records a failure
in the trace and goes on (with the slot's fallback update, if any). Every run happens inside a cost meter and
returns, besides the operator's own partial update, one :class:`~modular_rag.state.TraceEvent` and one
:class:`~modular_rag.state.LedgerEntry`.

* :func:`make_node` / :func:`internal_node` turn steps (or a pattern's bookkeeping function) into node functions;
  :func:`run_chain` runs several steps in order on one state.
* :class:`Runner` runs a chain of steps from inside a pattern's own node (a branch, a tree node); a node body that
  runs several written as a :func:`waiting` generator yields ``runner.ask(state)``, or :func:`gathered` calls
  together, so one body serves sync runs (in its thread) and async ones (awaited on the loop, concurrently).
* :class:`PooledNode` / :func:`_pooled` give node functions the kit's own thread pool (:data:`NODE_THREADS`
  threads) for async runs.

An operator may be async: an ``async def op(state)``, an object with an async ``acall(state)`` beside its
``__call__`` (what :func:`waiting` makes of a generator that yields the model calls it waits on), or a function that
returns an awaitable. Under ``ainvoke`` / ``astream`` / ``abatch`` such a node runs on the event loop, so a step
waiting on a model holds no thread; its sync work runs in the pool. Under ``invoke`` an async-only operator runs to
completion on the kit's own event loop thread (:func:`_await_sync`), so every config works both ways. Both paths
share the trace, ledger, ``timeout_s`` (an asyncio deadline on the loop), ``on_error``, ``skip_when`` and the
per-operator LangChain run.

:class:`~modular_rag.builder.FlowBuilder` uses these to assemble the patterns' graphs; they are re-exported from
:mod:`modular_rag.builder`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import importlib
import inspect
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import (
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    patch_config,
    set_config_context,
    var_child_runnable_config,
)
from langgraph.errors import GraphBubbleUp

from modular_rag import registry
from modular_rag.config import Condition, OperatorSpec, validate_params
from modular_rag.errors import ConfigError, OperatorError, OperatorTimeout
from modular_rag.registry import Port
from modular_rag.state import APPEND_KEYS, STATE_KEYS, LedgerEntry, RAGState, TraceEvent
from modular_rag.trace import Deadline, Meter, Wait, current_deadline, metered, run_with_deadline, under_deadline

if TYPE_CHECKING:
    from modular_rag.providers import Providers
    from modular_rag.resolve import ResolvedStep

__all__ = [
    "GraphNode",
    "SlotNode",
    "make_node",
    "PooledNode",
    "NODE_THREADS",
    "run_chain",
    "internal_node",
    "resolve_operator",
    "evaluate_condition",
    "summarise",
    "PORT_READS",
    "node_metadata",
    "waiting",
    "WaitingOperator",
    "WaitingBody",
    "run_blocking",
    "async_form",
    "gathered",
    "Runner",
]

PORT_READS: dict[Port, tuple[str, ...]] = {
    Port.QUERY: ("query",),
    Port.RETRIEVE: ("queries", "query"),
    Port.REFINE: ("candidates",),
    Port.HOP: ("query", "candidates", "answer"),
    Port.CONTEXT: ("candidates",),
    Port.GENERATE: ("evidence", "query"),
    Port.VERIFY: ("answer", "evidence"),
    Port.ROUTE: ("query",),
    Port.JUDGE: ("answer", "step"),
    Port.FUSE: ("branches",),
    Port.LOAD: (),
    Port.CHUNK: (),
}
"""The state keys each port reads (for trace summaries)."""

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


def summarise(update: Mapping[str, Any], keys: Sequence[str] | None = None) -> str:
    """A short description of state values: ``candidates[10] answer('Paris is...')``."""
    parts = []
    for key in keys if keys is not None else update:
        if key in ("trace", "ledger") or key not in update:
            continue
        value = update[key]
        if isinstance(value, str):
            text = value if len(value) <= 40 else value[:37] + "..."
            parts.append(f"{key}({text!r})")
        elif isinstance(value, Mapping) and "text" in value:
            text = str(value["text"])
            parts.append(f"{key}({(text if len(text) <= 40 else text[:37] + '...')!r})")
        elif isinstance(value, Sequence):
            parts.append(f"{key}[{len(value)}]")
        else:
            parts.append(f"{key}={value!r}"[:60])
    return " ".join(parts)


def resolve_operator(
    spec: OperatorSpec, port: Port, env: Providers, *, path: str, allow_imports: bool = False
) -> tuple[str, Callable[[Mapping[str, Any]], dict[str, Any]]]:
    """Build the operator a spec names for a port: look it up, validate its params, call its factory.

    Returns:
        ``(operator name, operator callable)``.

    Raises:
        ConfigError: If the name is unknown, fits another port, its params are invalid, or an import path is
            used without ``allow_imports``.
    """
    obj = spec.object
    if obj is not None:
        return spec.name, registry.adapt(obj, port, env, path=path)
    if ":" in spec.name:
        if not allow_imports:
            raise ConfigError(f"{path}.name", f"{spec.name!r} is an import path; set allow_imports: true to allow it")
        module_name, _, attr = spec.name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{path}.name", f"cannot import {spec.name!r}: {exc}") from None
        info = registry.info_of(factory)
        if info is not None and info.port is not port:
            raise ConfigError(f"{path}.name", f"{spec.name!r} fits port {info.port.value}, not {port.value}")
        params: Any = validate_params(info.params, spec.params, f"{path}.params") if info else dict(spec.params)
        return spec.name, factory(params, env)
    try:
        info = registry.get_operator(port, spec.name)
    except registry.RegistryError as exc:
        raise ConfigError(f"{path}.name", str(exc)) from None
    params = validate_params(info.params, spec.params, f"{path}.params")
    return info.name, info.factory(params, env)


def _events(
    slot: str, name: str, status: str, start: float, ms: float, summary: str, meter: Meter, error: str | None = None
) -> tuple[TraceEvent, LedgerEntry]:
    event = TraceEvent(node=slot, operator=name, status=status, start=start, ms=round(ms, 3), summary=summary)  # type: ignore[typeddict-item]
    if error:
        event["error"] = error
    entry = LedgerEntry(
        node=slot,
        operator=name,
        llm_calls=meter.llm_calls,
        prompt_tokens=meter.prompt_tokens,
        completion_tokens=meter.completion_tokens,
        retrievals=meter.retrievals,
        embed_calls=meter.embed_calls,
        cache_hits=meter.cache_hits,
        ms=round(ms, 3),
    )
    return event, entry


TIMEOUT_GRACE_S = 2.0
"""After a step times out, how long to wait for its model calls in flight to end (they end at the deadline, their
HTTP timeout), so what they spent reaches the ledger. Other work of the step is not waited for."""


_DEADLINE_SLACK_S = 0.05
"""A failure this close to a step's deadline counts as the step timing out (see :func:`_call`)."""


def _call(fn: Callable[[Mapping[str, Any]], dict[str, Any]], state: Mapping[str, Any], timeout_s: float | None) -> Any:
    """Call the operator; with a timeout, in a worker thread under a :class:`~modular_rag.trace.Deadline` that
    model clients honour. On timeout the deadline is cancelled (no new model call starts) and the calls in flight
    are given :data:`TIMEOUT_GRACE_S` to end, so their spending is in the step's meter when the step records it."""
    if timeout_s is None:
        return _settled(fn(state))
    limit = Deadline(timeout_s)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="op-timeout")
    future = pool.submit(run_with_deadline, contextvars.copy_context(), limit, _settled_call, fn, state)
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


def _settled(result: Any) -> Any:
    """An operator's result; an awaitable it returned, run to completion (see :func:`_await_sync`)."""
    return _await_sync(result) if inspect.isawaitable(result) else result


def _settled_call(fn: Callable[[Mapping[str, Any]], Any], state: Mapping[str, Any]) -> Any:
    return _settled(fn(state))


async def _acall(
    fn: Callable[[Mapping[str, Any]], Awaitable[Any]], state: Mapping[str, Any], timeout_s: float | None
) -> Any:
    """Await an async operator; with a timeout, under an asyncio deadline and a :class:`~modular_rag.trace.Deadline`
    that model clients honour, as :func:`_call` does for a sync one. Cancelled at the deadline, a model call in
    flight records what it sent, so the step's meter has it."""
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


def _await_sync(awaitable: Awaitable[Any]) -> Any:
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


async def _in_pool(fn: Callable[..., Any], *args: Any) -> Any:
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
            done, value = await _in_pool(_advance, body, sent, failed)
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


def _jsonable(params: Any) -> dict[str, Any]:
    """A params model as JSON values (for run metadata); what JSON cannot hold is shown as its ``repr``."""
    try:
        return dict(params.model_dump(mode="json"))
    except Exception:  # a param holding a Python object (a model, a function) that pydantic cannot serialise
        return {
            key: value if isinstance(value, str | int | float | bool | None) else repr(value)
            for key, value in dict(params).items()
        }


@contextmanager
def _operator_run(step: _Step, state: Mapping[str, Any]) -> Iterator[Callable[..., Any]]:
    """One LangChain run for one operator, a child of LangGraph's run of its node: named after the operator, tagged
    ``operator:<name>`` and ``slot:<slot>``, with its params in the metadata, the state keys its port reads as
    inputs and its update as outputs, so LangSmith and any callback handler show which operator ran with what.
    Model calls the operator makes are the run's children. Yields a function that calls ``fn(*args)`` inside the run.
    Outside a LangChain run (an operator called directly) nothing is reported."""
    config = var_child_runnable_config.get()
    if config is None:
        yield lambda fn, *args: fn(*args)
        return
    manager = get_callback_manager_for_config(config)
    name = _label_run(step, manager)
    run = manager.on_chain_start(None, {key: state[key] for key in step.reads if key in state}, name=name)
    outputs: dict[str, Any] = {}

    def call(fn: Callable[..., Any], *args: Any) -> Any:
        with set_config_context(patch_config(config, callbacks=run.get_child())) as context:
            result = context.run(fn, *args)
        outputs.update(result if isinstance(result, Mapping) else {"output": result})
        return result

    try:
        yield call
    except BaseException as exc:
        run.on_chain_error(exc)
        raise
    run.on_chain_end({key: value for key, value in outputs.items() if key not in ("trace", "ledger")})


def _label_run(step: _Step, manager: Any) -> str:
    """Tag a callback manager with the step's operator, slot and params; returns the run's name."""
    name = step.name if step.name != "pattern" else step.slot
    manager.add_tags([f"operator:{name}", f"slot:{step.slot}"], inherit=False)
    manager.add_metadata(
        {"modular_rag_slot": step.slot, "modular_rag_operator": name, "modular_rag_params": step.params}, inherit=False
    )
    return name


@asynccontextmanager
async def _aoperator_run(step: _Step, state: Mapping[str, Any]) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """:func:`_operator_run` for an async run: the same LangChain run, through the async callback manager. Yields a
    function that awaits ``fn(*args)`` (a coroutine function) inside the run."""
    config = var_child_runnable_config.get()
    if config is None:

        async def bare(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
            return await fn(*args)

        yield bare
        return
    manager = get_async_callback_manager_for_config(config)
    name = _label_run(step, manager)
    run = await manager.on_chain_start(None, {key: state[key] for key in step.reads if key in state}, name=name)
    outputs: dict[str, Any] = {}

    async def call(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        with set_config_context(patch_config(config, callbacks=run.get_child())) as context:
            result: Any = await asyncio.create_task(fn(*args), context=context)  # type: ignore[arg-type]
        outputs.update(result if isinstance(result, Mapping) else {"output": result})
        return result

    try:
        yield call
    except BaseException as exc:
        await run.on_chain_error(exc)
        raise
    await run.on_chain_end({key: value for key, value in outputs.items() if key not in ("trace", "ledger")})


def node_metadata(steps: Sequence[_Step]) -> dict[str, Any]:
    """The metadata of a slot's node (LangGraph ``add_node(metadata=...)``): its operators with their params."""
    return {"modular_rag_operators": [{"name": step.name, "params": step.params} for step in steps]}


class _Step:
    """One operator in a node, with its step controls (from its spec) and the keys it reads (for the trace)."""

    def __init__(
        self,
        slot: str,
        name: str,
        fn: Callable[[Mapping[str, Any]], dict[str, Any]],
        spec: OperatorSpec,
        reads: Sequence[str] = (),
        fallback: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.slot, self.name, self.fn, self.spec, self.reads = slot, name, fn, spec, tuple(reads)
        self.afn = async_form(fn)
        """The operator's async form (``None``: a sync operator)."""
        if self.afn is fn:  # async only: a sync run awaits it on the kit's loop
            self.fn = functools.partial(_call_async_only, fn)  # type: ignore[arg-type]
        self.fallback = dict(fallback or {})
        self.params = dict(spec.params if params is None else params)
        """The operator's params as it runs with them (validated, defaults included, when it is registered)."""

    def _instead(self) -> tuple[dict[str, Any], str]:
        """The update a skipped or failed step gives (the slot's fallback), and how the trace says it."""
        if not self.fallback:
            return {}, ""
        return dict(self.fallback), "; falls back to " + ", ".join(f"{k}={v!r}" for k, v in self.fallback.items())

    @classmethod
    def configured(
        cls,
        slot: str,
        spec: OperatorSpec,
        port: Port,
        env: Providers,
        path: str,
        allow_imports: bool,
        fallback: Mapping[str, Any] | None = None,
    ) -> _Step:
        """Resolve a configured operator for a slot of the given port."""
        name, fn = resolve_operator(spec, port, env, path=path, allow_imports=allow_imports)
        return cls(slot, name, fn, spec, PORT_READS.get(port, ()), fallback)

    @classmethod
    def built(
        cls, step: ResolvedStep, providers: Providers, allow_imports: bool, fallback: Mapping[str, Any] | None = None
    ) -> _Step:
        """Build a resolved operator (its params are validated already); a Python object or an import path is
        resolved here."""
        if step.operator is None:
            return cls.configured(step.slot, step.spec, step.port, providers, step.path, allow_imports, fallback)
        fn = step.operator.factory(step.params, providers)
        return cls(
            step.slot,
            step.operator.name,
            fn,
            step.spec,
            PORT_READS.get(step.port, ()),
            fallback,
            _jsonable(step.params),
        )

    def run(self, state: Mapping[str, Any]) -> tuple[dict[str, Any], TraceEvent, LedgerEntry]:
        started = time.time()
        t0 = time.perf_counter()
        skipped = self._skipped(state, started)
        if skipped is not None:
            return skipped
        with metered() as meter, _operator_run(self, state) as ran:
            try:
                update = ran(_call, self.fn, state, self.spec.timeout_s)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                return self._failed(exc, meter, started, t0)
        return self._finished(state, update, meter, started, t0)

    async def arun(self, state: Mapping[str, Any]) -> tuple[dict[str, Any], TraceEvent, LedgerEntry]:
        """:meth:`run` for an async run: an async operator is awaited on the loop (under ``timeout_s`` as an asyncio
        deadline), a sync one runs in the kit's thread pool; the same trace, ledger, errors and LangChain run."""
        started = time.time()
        t0 = time.perf_counter()
        skipped = self._skipped(state, started)
        if skipped is not None:
            return skipped
        with metered() as meter:
            async with _aoperator_run(self, state) as ran:
                try:
                    if self.afn is None:
                        update = await ran(_in_pool, _call, self.fn, state, self.spec.timeout_s)
                    else:
                        update = await ran(_acall, self.afn, state, self.spec.timeout_s)
                except GraphBubbleUp:
                    raise
                except Exception as exc:
                    return self._failed(exc, meter, started, t0)
        return self._finished(state, update, meter, started, t0)

    def _skipped(
        self, state: Mapping[str, Any], started: float
    ) -> tuple[dict[str, Any], TraceEvent, LedgerEntry] | None:
        """The fallback and a skipped event when the step's ``skip_when`` holds for the state, else ``None``."""
        if self.spec.skip_when is None or not evaluate_condition(self.spec.skip_when, state):
            return None
        instead, said = self._instead()
        event, entry = _events(self.slot, self.name, "skipped", started, 0.0, "skip_when held" + said, Meter())
        return instead, event, entry

    def _failed(
        self, exc: Exception, meter: Meter, started: float, t0: float
    ) -> tuple[dict[str, Any], TraceEvent, LedgerEntry]:
        """A failed run: the fallback with an error event under ``on_error: skip``, else the error raised."""
        ms = (time.perf_counter() - t0) * 1000
        timed_out = isinstance(exc, concurrent.futures.TimeoutError)
        message = f"timed out after {self.spec.timeout_s}s" if timed_out else f"{type(exc).__name__}: {exc}"
        if timed_out and meter.llm_calls:
            calls = f"{meter.llm_calls} LLM call{'s' if meter.llm_calls != 1 else ''}"
            message += f" ({calls} spent, then cancelled)"
        if self.spec.on_error == "skip":
            instead, said = self._instead()
            event, entry = _events(self.slot, self.name, "error", started, ms, "on_error=skip" + said, meter, message)
            return instead, event, entry
        if timed_out:
            raise OperatorTimeout(self.slot, self.name, message) from exc
        if isinstance(exc, OperatorError):
            raise exc
        raise OperatorError(self.slot, self.name, message) from exc

    def _finished(
        self, state: Mapping[str, Any], update: Any, meter: Meter, started: float, t0: float
    ) -> tuple[dict[str, Any], TraceEvent, LedgerEntry]:
        """A run that returned: its update checked, with its trace event and ledger entry."""
        ms = (time.perf_counter() - t0) * 1000
        if not isinstance(update, Mapping):
            raise OperatorError(self.slot, self.name, f"returned {type(update).__name__}, expected a dict update")
        unknown = [key for key in update if key not in STATE_KEYS]
        if unknown:
            raise OperatorError(
                self.slot, self.name, f"wrote unknown state keys {unknown}; state keys: {', '.join(sorted(STATE_KEYS))}"
            )
        summary = f"{summarise(state, self.reads)} -> {summarise(update)}".strip()
        if meter.notes:
            summary += " | " + "; ".join(meter.notes)
        event, entry = _events(self.slot, self.name, "ok", started, ms, summary, meter)
        return dict(update), event, entry


def run_chain(steps: Sequence[_Step], state: Mapping[str, Any]) -> dict[str, Any]:
    """Run operators in order on ``state``, each seeing the previous ones' updates; returns the merged update
    with one trace event and one ledger entry per operator. Append keys accumulate; other keys: last write wins."""
    chain = _Chain(state)
    for step in steps:
        chain.add(*step.run(chain.view))
    return chain.merged()


async def arun_chain(steps: Sequence[_Step], state: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_chain` for an async run (each step's :meth:`_Step.arun`)."""
    chain = _Chain(state)
    for step in steps:
        chain.add(*await step.arun(chain.view))
    return chain.merged()


class Runner:
    """Operators that a pattern's own node runs on a sub-state (a branch, a tree node), in order, each seeing the
    updates before it: ``runner(state)`` runs them in this thread (sync runs); ``await runner.acall(state)`` awaits
    each async one on the loop (async runs; :func:`arun_chain`); a :func:`waiting` body yields ``runner.ask(state)``
    and gets whichever its run calls for. Each operator keeps its step controls (``skip_when``, ``timeout_s``,
    ``on_error``) and its LangChain run; the update carries their trace events and ledger entries, their node named
    ``label`` (``{branch}`` filled from the state's ``branch``).

    Args:
        steps: The operators, in order.
        label: The node name of their trace and ledger entries.
    """

    def __init__(self, steps: Sequence[_Step], label: str) -> None:
        self.steps, self.label = list(steps), label

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run the operators in this thread."""
        return self._labelled(state, run_chain(self.steps, state))

    async def acall(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run the operators, awaiting each async one on the loop; a sync one runs in the kit's thread pool."""
        return self._labelled(state, await arun_chain(self.steps, state))

    def ask(self, state: Mapping[str, Any]) -> Wait:
        """The run as a :class:`~modular_rag.trace.Wait` for a :func:`waiting` body to yield."""
        return Wait(functools.partial(self, state), functools.partial(self.acall, state))

    def _labelled(self, state: Mapping[str, Any], update: dict[str, Any]) -> dict[str, Any]:
        return {**update, **_prefixed(self.label.format(branch=state.get("branch", "")), update)}


def _prefixed(name: str, update: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A sub-run's trace and ledger entries as the flow records them: node names prefixed ``name/``."""
    return {
        key: [{**item, "node": f"{name}/{item['node']}"} for item in update.get(key, [])] for key in ("trace", "ledger")
    }


class _Chain:
    """The merged update of operators run in order, and the state the next one sees."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        self.update: dict[str, Any] = {}
        self.events: list[TraceEvent] = []
        self.entries: list[LedgerEntry] = []
        self.view: dict[str, Any] = dict(state)

    def add(self, update: Mapping[str, Any], event: TraceEvent, entry: LedgerEntry) -> None:
        self.events.extend(update.get("trace", []))  # a step that runs operators itself returns their entries
        self.entries.extend(update.get("ledger", []))
        self.events.append(event)
        self.entries.append(entry)
        for key, value in update.items():
            if key in ("trace", "ledger"):
                continue
            if key in APPEND_KEYS:
                self.update[key] = self.update.get(key, []) + list(value)
                self.view[key] = list(self.view.get(key, [])) + list(value)
            else:
                self.update[key] = value
                self.view[key] = value

    def merged(self) -> dict[str, Any]:
        return {**self.update, "trace": self.events, "ledger": self.entries}


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


def _pooled(name: str, fn: Callable[..., Any]) -> Any:
    """``fn`` as a :class:`PooledNode`; runnables and coroutine functions are returned as they are."""
    if isinstance(fn, Runnable) or inspect.iscoroutinefunction(fn) or not callable(fn):
        return fn
    return PooledNode(name, fn)


class GraphNode(Protocol):
    """A node function as LangGraph's ``add_node`` types it: the state (a named parameter) in, an update out."""

    def __call__(self, state: RAGState) -> dict[str, Any]: ...


class SlotNode(Protocol):
    """A slot's node function (:func:`make_node`): called in sync runs; ``acall`` awaited on the event loop in async
    runs when ``is_async`` (one of its operators is async); ``ask(state)`` its run as a
    :class:`~modular_rag.trace.Wait`. It is a :class:`GraphNode`, and a :class:`~modular_rag.registry.Search` when it
    is the retrieve slot's node given to a hop."""

    is_async: bool

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]: ...

    async def acall(self, state: Mapping[str, Any]) -> dict[str, Any]: ...

    def ask(self, state: Mapping[str, Any]) -> Wait: ...


def make_node(steps: Sequence[_Step]) -> SlotNode:
    """A graph node that runs one operator, or a chain of same-port operators in order, with trace and ledger.

    The node is called as a function (sync runs); its ``acall`` is awaited on the event loop in async runs
    (:class:`PooledNode`) when one of its operators is async."""
    return _StepsNode(steps)


class _StepsNode:
    """The node function of :func:`make_node`: ``node(state)`` for sync runs, ``await node.acall(state)`` for async
    ones; ``is_async`` says whether any of its operators is async (else an async run calls it in the pool)."""

    def __init__(self, steps: Sequence[_Step]) -> None:
        self.steps = list(steps)
        self.is_async = any(step.afn is not None for step in self.steps)
        self.__name__ = "node" if len(self.steps) == 1 else "chain_node"

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        if len(self.steps) == 1:
            return _one(*self.steps[0].run(state))
        return run_chain(self.steps, state)

    async def acall(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The node's async run."""
        if len(self.steps) == 1:
            return _one(*await self.steps[0].arun(state))
        return await arun_chain(self.steps, state)

    def ask(self, state: Mapping[str, Any]) -> Wait:
        """The node's run as a :class:`~modular_rag.trace.Wait` (a slot's node given to a hop as the flow's search)."""
        return Wait(functools.partial(self, state), functools.partial(self.acall, state))


def _one(update: dict[str, Any], event: TraceEvent, entry: LedgerEntry) -> dict[str, Any]:
    # a step that runs operators itself (a pattern's bookkeeping node) returns their entries first
    update["trace"] = [*update.get("trace", ()), event]
    update["ledger"] = [*update.get("ledger", ()), entry]
    return update


def _call_async_only(fn: Callable[[Mapping[str, Any]], Awaitable[Any]], state: Mapping[str, Any]) -> Any:
    """An async-only operator in a sync run: awaited to completion on the kit's loop (see :func:`_await_sync`)."""
    return _await_sync(fn(state))


def internal_node(name: str, fn: Callable[[Mapping[str, Any]], dict[str, Any]], operator: str = "pattern") -> GraphNode:
    """Instrument a pattern's own function (a loop counter, a fan-out, a hop) like an operator node; the trace and
    ledger name it ``operator``."""
    return make_node([_Step(name, operator, fn, OperatorSpec(name=operator))])
