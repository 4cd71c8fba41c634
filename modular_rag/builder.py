"""Shared wiring for the patterns: resolve slots from the registry, instrument nodes, add edges, compile.

Every node the builder makes runs its operator(s) inside a cost meter and returns, besides the operator's own
partial update, one :class:`~modular_rag.state.TraceEvent` and one :class:`~modular_rag.state.LedgerEntry` per
operator. Step controls from the config apply to every slot without code changes: ``enabled: false`` or
``name: none`` leaves the slot out of the graph; ``skip_when`` skips it for a run when a condition on the state
holds; ``timeout_s`` bounds it; ``on_error: skip`` records a failure in the trace and goes on.

A pattern factory reads like this::

    def build_linear(config, *, checkpointer=None, providers=None):
        flow = FlowBuilder(config, "linear", providers=providers)
        flow.chain([REWRITE, RETRIEVE, RERANK, CONTEXT, GENERATE])
        return flow.compile(checkpointer=checkpointer, max_steps=5)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import importlib
import inspect
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph

from modular_rag import registry
from modular_rag.config import Condition, FlowConfig, OperatorSpec, load_config, validate_params
from modular_rag.errors import ConfigError, OperatorError, OperatorTimeout
from modular_rag.providers import Providers
from modular_rag.registry import Port
from modular_rag.state import (
    APPEND_KEYS,
    STATE_KEYS,
    FlowInput,
    LedgerEntry,
    RAGState,
    TraceEvent,
    fresh_question,
    history,
    pending_question,
)
from modular_rag.trace import Deadline, Meter, metered, run_with_deadline

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

__all__ = [
    "FlowBuilder",
    "build_flow",
    "BEGIN",
    "REPLY",
    "GraphNode",
    "make_node",
    "PooledNode",
    "NODE_THREADS",
    "run_chain",
    "internal_node",
    "resolve_operator",
    "evaluate_condition",
    "summarise",
    "PORT_READS",
]

PORT_READS: dict[Port, tuple[str, ...]] = {
    Port.QUERY: ("query",),
    Port.RETRIEVE: ("queries", "query"),
    Port.RERANK: ("candidates",),
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
        node=slot, operator=name, llm_calls=meter.llm_calls, prompt_tokens=meter.prompt_tokens,
        completion_tokens=meter.completion_tokens, retrievals=meter.retrievals, embed_calls=meter.embed_calls,
        cache_hits=meter.cache_hits, ms=round(ms, 3),
    )  # fmt: skip
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
        return fn(state)
    limit = Deadline(timeout_s)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="op-timeout")
    future = pool.submit(run_with_deadline, contextvars.copy_context(), limit, fn, state)
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
    ) -> None:
        self.slot, self.name, self.fn, self.spec, self.reads = slot, name, fn, spec, tuple(reads)
        self.fallback = dict(fallback or {})

    def _instead(self) -> tuple[dict[str, Any], str]:
        """The update a skipped or failed step gives (the slot's fallback), and how the trace says it."""
        if not self.fallback:
            return {}, ""
        return dict(self.fallback), "; falls back to " + ", ".join(f"{k}={v!r}" for k, v in self.fallback.items())

    @classmethod
    def configured(
        cls, slot: str, spec: OperatorSpec, port: Port, env: Providers, path: str, allow_imports: bool,
        fallback: Mapping[str, Any] | None = None,
    ) -> _Step:  # fmt: skip
        """Resolve a configured operator for a slot of the given port."""
        name, fn = resolve_operator(spec, port, env, path=path, allow_imports=allow_imports)
        return cls(slot, name, fn, spec, PORT_READS.get(port, ()), fallback)

    def run(self, state: Mapping[str, Any]) -> tuple[dict[str, Any], TraceEvent, LedgerEntry]:
        started = time.time()
        t0 = time.perf_counter()
        if self.spec.skip_when is not None and evaluate_condition(self.spec.skip_when, state):
            instead, said = self._instead()
            event, entry = _events(self.slot, self.name, "skipped", started, 0.0, "skip_when held" + said, Meter())
            return instead, event, entry
        with metered() as meter:
            try:
                update = _call(self.fn, state, self.spec.timeout_s)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                ms = (time.perf_counter() - t0) * 1000
                timed_out = isinstance(exc, concurrent.futures.TimeoutError)
                message = f"timed out after {self.spec.timeout_s}s" if timed_out else f"{type(exc).__name__}: {exc}"
                if timed_out and meter.llm_calls:
                    calls = f"{meter.llm_calls} LLM call{'s' if meter.llm_calls != 1 else ''}"
                    message += f" ({calls} spent, then cancelled)"
                if self.spec.on_error == "skip":
                    instead, said = self._instead()
                    event, entry = _events(self.slot, self.name, "error", started, ms, "on_error=skip" + said, meter,
                                           message)  # fmt: skip
                    return instead, event, entry
                if timed_out:
                    raise OperatorTimeout(self.slot, self.name, message) from exc
                if isinstance(exc, OperatorError):
                    raise
                raise OperatorError(self.slot, self.name, message) from exc
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
    merged: dict[str, Any] = {}
    events: list[TraceEvent] = []
    entries: list[LedgerEntry] = []
    view: dict[str, Any] = dict(state)
    for step in steps:
        update, event, entry = step.run(view)
        events.extend(update.get("trace", []))  # a step that runs operators itself returns their entries
        entries.extend(update.get("ledger", []))
        events.append(event)
        entries.append(entry)
        for key, value in update.items():
            if key in ("trace", "ledger"):
                continue
            if key in APPEND_KEYS:
                merged[key] = merged.get(key, []) + list(value)
                view[key] = list(view.get(key, [])) + list(value)
            else:
                merged[key] = value
                view[key] = value
    merged["trace"] = events
    merged["ledger"] = entries
    return merged


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
    gets the node's ``RunnableConfig``.

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
        """Run the function in the kit's thread pool, in a copy of the caller's context (its run config)."""
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


def make_node(steps: Sequence[_Step]) -> GraphNode:
    """A graph node that runs one operator, or a chain of same-port operators in order, with trace and ledger."""
    if len(steps) == 1:
        step = steps[0]

        def node(state: RAGState) -> dict[str, Any]:
            update, event, entry = step.run(state)
            # a step that runs operators itself (a pattern's bookkeeping node) returns their entries first
            update["trace"] = [*update.get("trace", ()), event]
            update["ledger"] = [*update.get("ledger", ()), entry]
            return update

        return node

    def chain_node(state: RAGState) -> dict[str, Any]:
        return run_chain(steps, state)

    return chain_node


def internal_node(name: str, fn: Callable[[Mapping[str, Any]], dict[str, Any]], operator: str = "pattern") -> GraphNode:
    """Instrument a pattern's own function (a loop counter, a fan-out, a hop) like an operator node; the trace and
    ledger name it ``operator``."""
    return make_node([_Step(name, operator, fn, OperatorSpec(name=operator))])


_SUBFLOW_KEYS = frozenset(
    {"queries", "candidates", "evidence", "answer", "rounds", "branches", "tree", "verdicts", "step"}
)


class FlowBuilder:
    """Wiring shared by all patterns: holds the config, the providers and the graph under construction.

    Args:
        config: A config object, dict or YAML path.
        pattern: The pattern being built; the config's ``pattern`` must match it.
        providers: Reuse these providers instead of building them from ``config.providers``.

    Raises:
        ConfigError: If the config is invalid or names another pattern.
    """

    def __init__(
        self,
        config: FlowConfig | Mapping[str, Any] | str | os.PathLike[str],
        pattern: str,
        *,
        providers: Providers | None = None,
    ) -> None:
        self.config = load_config(config)
        if self.config.pattern != pattern:
            raise ConfigError("pattern", f"this factory builds {pattern!r}, the config says {self.config.pattern!r}")
        self.info = registry.get_pattern(pattern)
        self.params: Any = validate_params(self.info.params, self.config.params, "params")
        self.env = providers or Providers(self.config.providers)
        self.graph: StateGraph = StateGraph(RAGState, input_schema=FlowInput)
        self._built: dict[str, bool] = {}

    def steps(
        self, slot: str, *, inject: Mapping[str, Any] | None = None, default: str | OperatorSpec | None = None,
        fallback: Mapping[str, Any] | None = None,
    ) -> list[_Step]:  # fmt: skip
        """The active operators of a slot (configured, or the slot's default), built; empty when disabled.

        Args:
            slot: The slot name.
            inject: Parameters the pattern adds to every operator of the slot (the config is not changed).
            default: Overrides the slot's registered default (a pattern mode may need another one): a name, or a
                spec with parameters.
            fallback: The update a step of the slot gives when it is skipped (``skip_when``) or fails under
                ``on_error: skip`` (a router's fallback route); the trace says so.
        """
        spec_info = self.info.slots[slot]
        specs = self.config.slot(slot)
        if slot not in self.config.operators:
            if isinstance(default, OperatorSpec):
                specs = [default] if default.active else []
            elif default not in (None, "none"):
                specs = [OperatorSpec(name=default)]
            elif default is None and spec_info.default not in (None, "none"):
                specs = [OperatorSpec(name=spec_info.default, params=dict(spec_info.default_params))]
        raw = self.config.operators.get(slot)
        out = []
        for i, spec in enumerate(specs):
            if not spec.active:
                continue
            if inject and spec.object is None:
                spec = spec.model_copy(update={"params": {**spec.params, **inject}})
            path = f"operators.{slot}" + (f".{i}" if isinstance(raw, list) else "")
            out.append(_Step.configured(slot, spec, spec_info.port, self.env, path, self.config.allow_imports,
                                        fallback))  # fmt: skip
        return out

    def operator(
        self, slot: str, *, inject: Mapping[str, Any] | None = None, default: str | OperatorSpec | None = None,
        fallback: Mapping[str, Any] | None = None,
    ) -> Callable[[RAGState], dict[str, Any]] | None:  # fmt: skip
        """The slot's node function (instrumented), or ``None`` when the slot is disabled."""
        steps = self.steps(slot, inject=inject, default=default, fallback=fallback)
        return make_node(steps) if steps else None

    def add(
        self, slot: str, node: Callable[..., Any] | None = None, *, inject: Mapping[str, Any] | None = None,
        default: str | OperatorSpec | None = None, fallback: Mapping[str, Any] | None = None, **kwargs: Any,
    ) -> bool:
        """Add a slot as a node (or ``node`` under the slot's name). Returns whether a node was added.

        LangSmith and other LangChain tracers show one run per node, named after the slot; which operator ran is in
        the flow's own trace. ``fallback`` is what the slot gives when skipped or failed (see :meth:`steps`).
        """
        fn = node if node is not None else self.operator(slot, inject=inject, default=default, fallback=fallback)
        self._built[slot] = fn is not None
        if fn is None:
            return False
        self.graph.add_node(slot, _pooled(slot, fn), **kwargs)
        return True

    def node(self, name: str, fn: Callable[..., Any], **kwargs: Any) -> str:
        """Add a pattern's own node function (a fan-out target, a tree step) as it is, not traced as an operator;
        async runs give it the kit's thread pool (:class:`PooledNode`). ``kwargs`` go to ``StateGraph.add_node``."""
        self.graph.add_node(name, _pooled(name, fn), **kwargs)
        return name

    def chain(
        self,
        slots: Sequence[str],
        *,
        start: str | None = START,
        end: str | None = END,
        defaults: Mapping[str, str | OperatorSpec] | None = None,
    ) -> list[str]:
        """Add the active slots in order and connect ``start -> ... -> end``; disabled slots are skipped.

        Args:
            slots: Slot names in flow order.
            start: The node the chain follows (``None``: the pattern connects the first node itself).
            end: The node the chain leads to (``None``: leave the last node open).
            defaults: Per-slot default overrides (see :meth:`steps`).

        Returns:
            The node names added, in order.
        """
        added = [s for s in slots if self.add(s, default=(defaults or {}).get(s))]
        previous: str | None = start
        for name in added:
            if previous is not None:
                self.graph.add_edge(previous, name)
            previous = name
        if end is not None and previous is not None:
            self.graph.add_edge(previous, end)
        return added

    def runner(
        self, slots: Sequence[str], *, label: str, defaults: Mapping[str, str | OperatorSpec] | None = None
    ) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        """A function running the given slots' operators in order on a sub-state (a branch, a tree node), returning
        the merged update with trace and ledger entries named ``label`` (``{branch}`` is filled from the state).

        Raises:
            ConfigError: If none of the slots is active.
        """
        steps = [step for slot in slots for step in self.steps(slot, default=(defaults or {}).get(slot))]
        if not steps:
            raise ConfigError(f"operators.{slots[0]}", f"the pattern needs an operator in one of: {', '.join(slots)}")

        def run(state: Mapping[str, Any]) -> dict[str, Any]:
            update = run_chain(steps, state)
            name = label.format(branch=state.get("branch", ""))
            for key in ("trace", "ledger"):
                update[key] = [{**item, "node": f"{name}/{item['node']}"} for item in update[key]]
            return update

        return run

    def subflow(self, name: str, config: FlowConfig) -> Callable[..., dict[str, Any]]:
        """A node running a whole flow (another pattern's graph) on the query; it shares this flow's providers
        unless its config names its own. Its trace and ledger come back with node names prefixed ``name/``."""
        env = self.env if "providers" not in config.model_fields_set else None
        sub = build_flow(config, providers=env)
        limit = sub.config.get("recursion_limit", 25)  # type: ignore[union-attr]

        def node(state: RAGState, config: RunnableConfig) -> dict[str, Any]:
            inputs = {key: state[key] for key in ("query", "filter", "messages") if key in state}
            out = sub.invoke(inputs, {**config, "recursion_limit": limit})
            update = {k: v for k, v in out.items() if k in _SUBFLOW_KEYS}
            for key in ("trace", "ledger"):
                update[key] = [{**item, "node": f"{name}/{item['node']}"} for item in out.get(key, [])]
            return update

        return node

    def internal(self, name: str, fn: Callable[[Mapping[str, Any]], dict[str, Any]], *,
                 operator: str = "pattern") -> str:  # fmt: skip
        """Add a pattern-internal node (bookkeeping, fan-out preparation, a hop), traced like an operator named
        ``operator``."""
        self.graph.add_node(name, _pooled(name, internal_node(name, fn, operator)))
        return name

    def branch(
        self, source: str, decide: Callable[..., Hashable], path_map: Mapping[Hashable, str] | Sequence[str]
    ) -> None:
        """A conditional edge with an explicit ``path_map`` (so drawings and checks know every edge)."""
        self.graph.add_conditional_edges(source, decide, path_map)  # type: ignore[arg-type]

    def compile(self, *, checkpointer: Any = None, max_steps: int, threads: bool | None = None) -> CompiledStateGraph:
        """Compile with an optional checkpointer; ``recursion_limit`` is derived from the pattern's bound.

        Args:
            checkpointer: Any LangGraph checkpointer (for example ``SqliteSaver``).
            max_steps: The most supersteps one run can take under the config's loop bounds.
            threads: Whether runs share state through threads (``thread_id``): then every new question first
                passes a ``begin`` step that clears what an earlier question on the thread left and takes the
                question from a new human message (a resume with input ``None`` does not pass it), and every run
                ends with a ``reply`` step that adds the turn to ``messages``. Default: when a checkpointer is
                given; a server that attaches its own checkpointer (LangGraph Server) asks for it explicitly.
        """
        name = self.config.name or self.info.name
        threaded = checkpointer is not None if threads is None else threads
        if self.config.answer_cache is not None:
            return self._with_answer_cache(self.graph.compile(name=name).with_config(recursion_limit=max_steps + 4),
                                           checkpointer, name, threaded)  # fmt: skip
        compiled = _compile(self.graph, checkpointer, name, threaded)
        return compiled.with_config(recursion_limit=max_steps + 4 + 2 * threaded, **self._run_labels(name))

    def _run_labels(self, name: str) -> dict[str, Any]:
        """Tags and metadata every run of the flow carries (shown by LangSmith and other tracers)."""
        return {"tags": ["modular_rag", f"pattern:{self.info.name}"],
                "metadata": {"modular_rag_pattern": self.info.name, "modular_rag_flow": name}}  # fmt: skip

    def _with_answer_cache(self, inner: CompiledStateGraph, checkpointer: Any, name: str,
                           threaded: bool) -> CompiledStateGraph:  # fmt: skip
        """Put a semantic answer cache in front of the compiled flow: a hit answers at once; a miss runs the flow
        and stores its answer."""
        from modular_rag.cache import SemanticCache, content_key

        cfg = self.config.answer_cache
        assert cfg is not None
        try:
            data = self.config.to_dict()
            namespace = content_key({k: v for k, v in data.items() if k not in ("answer_cache", "name")})
        except ConfigError:  # a Python object in the config: scope the cache to this process's objects
            namespace = f"objects:{id(self.config)}"
        cache = SemanticCache(cfg.path, threshold=cfg.threshold, max_entries=cfg.max_entries, namespace=namespace)
        env = self.env

        def lookup(state: Mapping[str, Any]) -> dict[str, Any]:
            from modular_rag.trace import note, record

            if history(state):  # a follow-up means what its conversation makes it mean
                return {}
            query = str(state.get("query", ""))
            found = cache.lookup(env.encoder.encode_query(query), query=query, scope=content_key(state.get("filter")))
            if found is None:
                return {}
            value, query, similarity = found
            record(cache_hits=1)
            note(f"cached answer of {query!r} (cosine {similarity:.3f})")
            return {"answer": value["answer"], "evidence": value.get("evidence", [])}

        def store(state: Mapping[str, Any]) -> dict[str, Any]:
            answer = state.get("answer")
            if answer and not answer.get("refused") and not history(state):
                query = str(state.get("query", ""))
                cache.store(query, env.encoder.encode_query(query), {"answer": answer, "evidence": list(
                    state.get("evidence") or [])}, scope=content_key(state.get("filter")))  # fmt: skip
            return {}

        limit = inner.config.get("recursion_limit", 25)  # type: ignore[union-attr]

        def run_flow(state: RAGState, config: RunnableConfig) -> dict[str, Any]:
            inputs = {key: state[key] for key in ("query", "filter", "messages") if key in state}
            out = inner.invoke(inputs, {**config, "recursion_limit": limit})
            return {key: value for key, value in out.items() if key != "messages"}

        def hit(state: RAGState) -> Literal["hit", "miss"]:
            return "hit" if state.get("answer") else "miss"

        outer = StateGraph(RAGState, input_schema=FlowInput)
        outer.add_node("cache_lookup", _pooled("cache_lookup", internal_node("cache_lookup", lookup)))
        outer.add_node("flow", _pooled("flow", run_flow))
        outer.add_node("cache_store", _pooled("cache_store", internal_node("cache_store", store)))
        outer.add_edge(START, "cache_lookup")
        outer.add_conditional_edges("cache_lookup", hit, {"hit": END, "miss": "flow"})
        outer.add_edge("flow", "cache_store")
        outer.add_edge("cache_store", END)
        return _compile(outer, checkpointer, name, threaded).with_config(recursion_limit=limit + 4 + 2 * threaded,
                                                                         **self._run_labels(name))


BEGIN = "begin"
"""The step a flow on threads starts every new question with (see :meth:`FlowBuilder.compile`)."""

REPLY = "reply"
"""The step a flow on threads ends every run with: the turn is added to ``messages``."""


def _begin(state: RAGState) -> dict[str, Any]:
    """Clear the previous question's state; a new human message is the question (``query``)."""
    update = fresh_question(state)
    question = pending_question(state)
    if question is not None and question != state.get("query"):
        update["query"] = question
    return update


def _reply(state: RAGState) -> dict[str, Any]:
    """Add the turn to the conversation: the question, unless the caller sent it as a message, and the answer as an
    ``AIMessage`` whose ``additional_kwargs["citations"]`` name each reference's chunk and title."""
    from langchain_core.messages import AIMessage, HumanMessage

    answer = state.get("answer")
    if not answer:
        return {}
    titles = {e["ref"]: e["metadata"].get("title") for e in state.get("evidence") or []}
    citations = [{"ref": c["ref"], "chunk_id": c["chunk_id"], "title": titles.get(c["ref"])}
                 for c in answer.get("citations") or []]  # fmt: skip
    turn = [] if pending_question(state) is not None else [HumanMessage(str(state.get("query", "")))]
    return {"messages": [*turn, AIMessage(answer["text"], additional_kwargs={"citations": citations})]}


def _compile(graph: StateGraph, checkpointer: Any, name: str, threaded: bool) -> CompiledStateGraph:
    """Compile ``graph``; on threads, route START through :data:`BEGIN` and every way to END through
    :data:`REPLY` (their edges and branches move there)."""
    if threaded:
        for edge in [e for e in graph.edges if START in e or END in e]:
            graph.edges.discard(edge)
            graph.edges.add((BEGIN if edge[0] == START else edge[0], REPLY if edge[1] == END else edge[1]))
        if START in graph.branches:
            graph.branches[BEGIN] = graph.branches.pop(START)
        for branches in graph.branches.values():
            for key, spec in branches.items():
                if spec.ends is not None and END in spec.ends.values():
                    ends = {k: REPLY if v == END else v for k, v in spec.ends.items()}
                    branches[key] = spec._replace(ends=ends)
        graph.add_node(BEGIN, _begin)
        graph.add_node(REPLY, _reply)
        graph.add_edge(START, BEGIN)
        graph.add_edge(REPLY, END)
    return graph.compile(checkpointer=checkpointer, name=name)


def build_flow(
    config: FlowConfig | Mapping[str, Any] | str | os.PathLike[str],
    *,
    checkpointer: Any = None,
    providers: Providers | None = None,
    threads: bool | None = None,
) -> CompiledStateGraph:
    """Build the graph of whatever pattern the config names.

    Args:
        config: A config object, dict or YAML path.
        checkpointer: Optional LangGraph checkpointer.
        providers: Optional shared providers.
        threads: Whether runs share state through threads; default: when a checkpointer is given (see
            :meth:`FlowBuilder.compile`).

    Returns:
        The compiled LangGraph ``StateGraph``; call ``.invoke({"query": ...})``.

    Raises:
        ConfigError: If the config is invalid.
    """
    cfg = load_config(config)
    info = registry.get_pattern(cfg.pattern)
    return info.factory(cfg, checkpointer=checkpointer, providers=providers, threads=threads)

