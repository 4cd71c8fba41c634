"""Steps: an operator (or a pattern's own function) as a traced, timed graph node.

A :class:`_Step` is one operator with its step controls from the config (``skip_when`` and ``timeout_s``:
:mod:`modular_rag.controls`; ``on_error: skip`` records a failure in the trace and goes on, with the slot's fallback
update, if any). Every run happens inside a cost meter and inside the operator's own LangChain run
(:mod:`modular_rag.runs`), and returns, besides the operator's partial update, one
:class:`~modular_rag.state.TraceEvent` and one :class:`~modular_rag.state.LedgerEntry`.

* :func:`make_node` / :func:`internal_node` turn steps (or a pattern's bookkeeping function) into node functions;
  :func:`run_chain` runs several steps in order on one state.
* :class:`Runner` runs a chain of steps from inside a pattern's own node (a branch, a tree node): ``runner(state)``
  in a sync node, ``await runner.acall(state)`` in an ``async def`` one (several
  :func:`~modular_rag.concurrency.together`).

An operator may be async (an ``async def``, or an object with an async ``acall``): under ``ainvoke`` / ``astream`` /
``abatch`` its node is awaited on the event loop; under ``invoke`` it runs on the kit's own loop thread
(:func:`~modular_rag.concurrency.await_sync`). Both paths share the trace, ledger, ``timeout_s``, ``on_error``,
``skip_when`` and the per-operator LangChain run.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from langgraph.errors import GraphBubbleUp

from modular_rag.concurrency import async_form, await_sync, in_pool
from modular_rag.config import OperatorSpec
from modular_rag.controls import acall_with_timeout, call_with_timeout, evaluate_condition
from modular_rag.errors import OperatorError, OperatorTimeout
from modular_rag.registry import Port
from modular_rag.resolve import resolve_operator
from modular_rag.runs import aoperator_run, jsonable_params, operator_run
from modular_rag.state import APPEND_KEYS, STATE_KEYS, LedgerEntry, RAGState, TraceEvent
from modular_rag.trace import Meter, metered

if TYPE_CHECKING:
    from modular_rag.providers import Providers
    from modular_rag.resolve import ResolvedStep

__all__ = [
    "GraphNode",
    "SlotNode",
    "make_node",
    "run_chain",
    "internal_node",
    "summarise",
    "PORT_READS",
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
            jsonable_params(step.params),
        )

    def run(self, state: Mapping[str, Any]) -> tuple[dict[str, Any], TraceEvent, LedgerEntry]:
        started = time.time()
        t0 = time.perf_counter()
        skipped = self._skipped(state, started)
        if skipped is not None:
            return skipped
        with metered() as meter, operator_run(self, state) as ran:
            try:
                update = ran(call_with_timeout, self.fn, state, self.spec.timeout_s)
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
            async with aoperator_run(self, state) as ran:
                try:
                    if self.afn is None:
                        update = await ran(in_pool, call_with_timeout, self.fn, state, self.spec.timeout_s)
                    else:
                        update = await ran(acall_with_timeout, self.afn, state, self.spec.timeout_s)
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
    updates before it: ``runner(state)`` runs them in this thread (a sync node); ``await runner.acall(state)``
    awaits each async one on the loop and runs each sync one in the kit's pool (an ``async def`` node;
    :func:`arun_chain`). Each operator keeps its step controls (``skip_when``, ``timeout_s``,
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


class GraphNode(Protocol):
    """A node function as LangGraph's ``add_node`` types it: the state (a named parameter) in, an update out."""

    def __call__(self, state: RAGState) -> dict[str, Any]: ...


class SlotNode(Protocol):
    """A slot's node function (:func:`make_node`): called in sync runs; ``acall`` awaited on the event loop in async
    runs when ``is_async`` (one of its operators is async), and by an ``async def`` pattern node. It is a
    :class:`GraphNode`, and a :class:`~modular_rag.registry.Search` when it is the retrieve slot's node given to a
    hop."""

    is_async: bool

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]: ...

    async def acall(self, state: Mapping[str, Any]) -> dict[str, Any]: ...


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


def _one(update: dict[str, Any], event: TraceEvent, entry: LedgerEntry) -> dict[str, Any]:
    # a step that runs operators itself (a pattern's bookkeeping node) returns their entries first
    update["trace"] = [*update.get("trace", ()), event]
    update["ledger"] = [*update.get("ledger", ()), entry]
    return update


def _call_async_only(fn: Callable[[Mapping[str, Any]], Awaitable[Any]], state: Mapping[str, Any]) -> Any:
    """An async-only operator in a sync run: awaited to completion on the kit's loop (see :func:`await_sync`)."""
    return await_sync(fn(state))


def internal_node(
    name: str,
    fn: Callable[[Mapping[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]],
    operator: str = "pattern",
) -> GraphNode:
    """Instrument a pattern's own function (a loop counter, a fan-out, a hop; sync or ``async def``) like an operator
    node; the trace and ledger name it ``operator``."""
    return make_node([_Step(name, operator, fn, OperatorSpec(name=operator))])  # type: ignore[arg-type]
