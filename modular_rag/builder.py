"""Shared wiring for the patterns: resolve slots from the registry, instrument nodes, add edges, compile.

Every node the builder makes runs its operator(s) inside a cost meter and returns, besides the operator's own
partial update, one :class:`~modular_rag.state.TraceEvent` and one :class:`~modular_rag.state.LedgerEntry` per
operator. Step controls from the config apply to every slot without code changes: ``enabled: false`` or
``name: none`` leaves the slot out of the graph; ``skip_when`` skips it for a run when a condition on the state
holds; ``timeout_s`` bounds it; ``on_error: skip`` records a failure in the trace and goes on.

The step instrumentation is split by idea, and re-exported here: traced, timed nodes in :mod:`modular_rag.steps`,
``skip_when`` and ``timeout_s`` in :mod:`modular_rag.controls`, the event loop, the node thread pool and the
fan-out of ``async def`` nodes in :mod:`modular_rag.concurrency`, the per-operator LangChain runs in
:mod:`modular_rag.runs`;
the answer cache's lookup and store steps are in :mod:`modular_rag.cache`.

A pattern factory adds its nodes, then connects them, as LangGraph's own tutorials do::

    def build_iterative(config, **options):
        flow = FlowBuilder[IterativeParams](config, "iterative", **options)    # flow.params: IterativeParams
        body = flow.chain([RETRIEVE, RERANK, CONTEXT, GENERATE], end=None)     # START -> retrieve -> ... -> generate
        flow.add_step(ADVANCE, advance)                                        # a traced pattern step
        flow.edge(body[-1], ADVANCE)
        tail = flow.optional(JUDGE, after=ADVANCE)                             # judge, or advance when it is off
        flow.branch(tail, again, {"again": body[0], "done": END})              # again() -> Literal["again", "done"]
        return flow.compile(loop_bound=flow.params.rounds)                      # the recursion limit follows
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic

from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel
from typing_extensions import TypedDict, TypeVar, Unpack

from modular_rag.bound_hops import BoundHop, bind_hop
from modular_rag.concurrency import NODE_THREADS, AsyncNode, PooledNode, pooled, together
from modular_rag.config import FlowConfig, OperatorSpec, load_config
from modular_rag.controls import evaluate_condition
from modular_rag.errors import ConfigError
from modular_rag.graphs import BEGIN, REPLY, compile_graph, output_schema, state_graph, supersteps
from modular_rag.providers import Providers
from modular_rag.registry import Port, Search
from modular_rag.resolve import ResolvedFlow, resolve, resolve_operator
from modular_rag.runs import node_metadata
from modular_rag.state import trace_and_ledger
from modular_rag.steps import (
    PORT_READS,
    GraphNode,
    Runner,
    SlotNode,
    _prefixed,
    _Step,
    internal_node,
    make_node,
    run_chain,
    summarise,
)
from modular_rag.subflows import SUBFLOW_KEYS, GraphCall, answer_cached

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

__all__ = [
    "FlowBuilder",
    "BoundHop",
    "BuildOptions",
    "FlowSource",
    "supersteps",
    "trace_and_ledger",
    "build_flow",
    "resolution",
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
    "Runner",
    "AsyncNode",
    "together",
]


FlowSource = FlowConfig | ResolvedFlow[Any] | Mapping[str, Any] | str | os.PathLike[str]
"""What a pattern factory builds from: a config object, a dict, a YAML path, or a config resolved already."""


class BuildOptions(TypedDict, total=False):
    """How a pattern factory (and :func:`build_flow`) builds a flow, besides its config."""

    checkpointer: Any
    """Any LangGraph checkpointer (for example ``SqliteSaver``): runs can be resumed and inspected."""
    providers: Providers | None
    """Reuse these providers (models, index) instead of building them from ``config.providers``."""
    threads: bool | None
    """Whether runs share state through threads (``thread_id``); default: when a checkpointer is given. See
    :meth:`FlowBuilder.compile`."""
    output_schema: type[Any] | None
    """What a run returns: a ``TypedDict`` whose keys are :class:`~modular_rag.state.RAGState` keys, for example
    :class:`~modular_rag.state.FlowOutput` (the answer with its citations, evidence, candidates, messages, trace and
    ledger: what the LangGraph Server graphs return; on threads the rest stays in the checkpoint). Default: the
    whole state."""


P = TypeVar("P", bound=BaseModel, default=BaseModel, covariant=True)
"""The params model of the pattern a :class:`FlowBuilder` builds (the type of :attr:`FlowBuilder.params`); covariant,
so a function taking a plain ``FlowBuilder`` accepts a ``FlowBuilder[IterativeParams]``."""


class FlowBuilder(Generic[P]):
    """Wiring shared by all patterns: holds the config, the providers and the graph under construction.

    Subscript it with the pattern's params model to type :attr:`params`:
    ``FlowBuilder[IterativeParams](config, "iterative", **options)``. A pattern adds nodes with :meth:`add_slot`
    (a configurable slot), :meth:`optional` (an optional slot after a node), :meth:`chain` (slots in order, connected),
    :meth:`add_step` (its own traced step) and :meth:`add_node` (a function as it is), and connects them with
    :meth:`edge` and :meth:`branch`.

    Args:
        config: A config object, dict or YAML path.
        pattern: The pattern being built; the config's ``pattern`` must match it.
        **options: How to build and compile the flow (see :class:`BuildOptions`).

    Raises:
        ConfigError: If the config is invalid or names another pattern, or ``output_schema`` has a key the state
            does not.
    """

    def __init__(self, config: FlowSource, pattern: str, **options: Unpack[BuildOptions]) -> None:
        self.resolved: ResolvedFlow[P] = resolution(config)
        """The config resolved against the registry, once: every slot's operators with their validated params."""
        self.config = self.resolved.config
        if self.config.pattern != pattern:
            raise ConfigError("pattern", f"this factory builds {pattern!r}, the config says {self.config.pattern!r}")
        self.info = self.resolved.pattern
        self.params: P = self.resolved.params
        """The validated ``params`` of the config, an instance of the pattern's registered params model."""
        self.env = options.get("providers") or Providers(self.config.providers)
        self.checkpointer = options.get("checkpointer")
        threads = options.get("threads")
        self.threaded = self.checkpointer is not None if threads is None else threads
        self.output_schema = output_schema(options.get("output_schema"))
        self.graph: StateGraph = state_graph(self.output_schema)

    def steps(
        self,
        slot: str,
        *,
        inject: Mapping[str, Any] | None = None,
        default: str | OperatorSpec | None = None,
        fallback: Mapping[str, Any] | None = None,
    ) -> list[_Step]:
        """The active operators of a slot (configured, or the slot's default), built; empty when disabled.

        Args:
            slot: The slot name.
            inject: Parameters the pattern adds to every operator of the slot (the config is not changed).
            default: Overrides the slot's registered default (a pattern mode may need another one): a name, or a
                spec with parameters.
            fallback: The update a step of the slot gives when it is skipped (``skip_when``) or fails under
                ``on_error: skip`` (a router's fallback route); the trace says so.
        """
        return [
            _Step.built(step, self.env, self.config.allow_imports, fallback)
            for step in self.resolved.slot(slot, default=default, inject=inject)
        ]

    def operator(
        self,
        slot: str,
        *,
        inject: Mapping[str, Any] | None = None,
        default: str | OperatorSpec | None = None,
        fallback: Mapping[str, Any] | None = None,
    ) -> SlotNode | None:
        """The slot's node function (instrumented), or ``None`` when the slot is disabled."""
        steps = self.steps(slot, inject=inject, default=default, fallback=fallback)
        return make_node(steps) if steps else None

    def hop(self, slot: str, search: Search, *, node: str, default: str | OperatorSpec | None = None) -> BoundHop:
        """The hop strategy a slot of port ``hop`` holds, bound to the flow's search.

        Args:
            slot: The hop slot.
            search: The flow's search (a retrieve slot's node, or a :meth:`runner` of it): a state with ``queries``
                in, its update out (a :class:`~modular_rag.registry.Search`).
            node: The node name the hop's trace events carry.
            default: Overrides the slot's registered default (see :meth:`steps`).

        Raises:
            ConfigError: If the slot is disabled, or its operator does not build a :class:`~modular_rag.registry.Hop`.
        """
        steps = self.resolved.slot(slot, default=default)
        if not steps or steps[0].port is not Port.HOP:
            raise ConfigError(f"operators.{slot}", "the pattern needs a hop here (how the next round searches)")
        return bind_hop(steps[0], self.env, search, node=node, allow_imports=self.config.allow_imports)

    def add_slot(
        self,
        slot: str,
        node: Callable[..., Any] | None = None,
        *,
        inject: Mapping[str, Any] | None = None,
        default: str | OperatorSpec | None = None,
        fallback: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> bool:
        """Add a slot's active operators as a node named after the slot (or ``node`` under the slot's name).

        LangSmith and other LangChain tracers show one run per node, named after the slot, with the slot's operators
        and their params in its metadata, and under it one run per operator, named after the operator, with its
        params (see :func:`~modular_rag.runs.node_metadata`).

        Args:
            slot: The slot name.
            node: A node function to add instead of the slot's operators.
            inject: Parameters the pattern adds to every operator of the slot (see :meth:`steps`).
            default: Overrides the slot's registered default (see :meth:`steps`).
            fallback: What the slot gives when skipped or failed (see :meth:`steps`).
            **kwargs: Passed to ``StateGraph.add_node``.

        Returns:
            Whether a node was added (``False``: the slot is disabled).
        """
        steps = [] if node is not None else self.steps(slot, inject=inject, default=default, fallback=fallback)
        fn = node if node is not None else make_node(steps) if steps else None
        if fn is None:
            return False
        if steps:
            kwargs.setdefault("metadata", node_metadata(steps))
        self.graph.add_node(slot, pooled(slot, fn), **kwargs)
        return True

    def optional(
        self,
        slot: str,
        *,
        after: str,
        inject: Mapping[str, Any] | None = None,
        default: str | OperatorSpec | None = None,
        fallback: Mapping[str, Any] | None = None,
    ) -> str:
        """Add an optional slot after the node ``after``, with the edge ``after -> slot``, if the slot is active.

        Args:
            slot: The slot name.
            after: The node the slot follows.
            inject: Parameters the pattern adds to every operator of the slot (see :meth:`steps`).
            default: Overrides the slot's registered default (see :meth:`steps`).
            fallback: What the slot gives when skipped or failed (see :meth:`steps`).

        Returns:
            The last node so far, to continue from: ``slot`` if it was added, else ``after``.
        """
        if not self.add_slot(slot, inject=inject, default=default, fallback=fallback):
            return after
        self.edge(after, slot)
        return slot

    def add_step(
        self,
        name: str,
        fn: Callable[[Mapping[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]],
        *,
        operator: str = "pattern",
    ) -> str:
        """Add a pattern's own step (bookkeeping, fan-out preparation, a hop), traced like an operator.

        Args:
            name: The node name.
            fn: The step: takes the state, returns a partial update (with the trace and ledger entries of any
                operators it ran, see :func:`trace_and_ledger`); an ``async def`` is awaited on the event loop in
                async runs (on the kit's loop in sync ones).
            operator: The operator name its trace event and ledger entry carry.

        Returns:
            ``name``.
        """
        self.graph.add_node(name, pooled(name, internal_node(name, fn, operator)))
        return name

    def add_node(self, name: str, fn: Callable[..., Any], **kwargs: Any) -> str:
        """Add a node function (a fan-out target, a tree step) as it is: not traced as an operator.

        Async runs give a sync function the kit's thread pool (:class:`PooledNode`); an ``async def`` (one that
        awaits the :class:`~modular_rag.steps.Runner` runs it makes) is awaited on the event loop instead, and run on
        the kit's loop in sync runs (:class:`~modular_rag.concurrency.AsyncNode`).

        Args:
            name: The node name.
            fn: The node function; the trace and ledger entries it returns are all the flow's trace shows of it.
            **kwargs: Passed to ``StateGraph.add_node``.

        Returns:
            ``name``.
        """
        self.graph.add_node(name, pooled(name, fn), **kwargs)
        return name

    def edge(self, source: str, target: str) -> None:
        """Add the edge ``source -> target``; ``source`` may be ``START``, ``target`` may be ``END``."""
        self.graph.add_edge(source, target)

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
        added = [s for s in slots if self.add_slot(s, default=(defaults or {}).get(s))]
        previous: str | None = start
        for name in added:
            if previous is not None:
                self.edge(previous, name)
            previous = name
        if end is not None and previous is not None:
            self.edge(previous, end)
        return added

    def runner(
        self, slots: Sequence[str], *, label: str, defaults: Mapping[str, str | OperatorSpec] | None = None
    ) -> Runner:
        """The given slots' operators, run in order on a sub-state (a branch, a tree node) by a node of the pattern:
        ``runner(state)`` returns the merged update with trace and ledger entries named ``label`` (``{branch}`` is
        filled from the state); an ``async def`` node awaits ``runner.acall(state)`` (several
        :func:`~modular_rag.concurrency.together`), so async runs await them on the loop.

        Raises:
            ConfigError: If none of the slots is active.
        """
        steps = [step for slot in slots for step in self.steps(slot, default=(defaults or {}).get(slot))]
        if not steps:
            raise ConfigError(f"operators.{slots[0]}", f"the pattern needs an operator in one of: {', '.join(slots)}")
        return Runner(steps, label)

    def subflow(
        self, name: str, config: FlowConfig | ResolvedFlow[Any], carry: Sequence[str] = ()
    ) -> Callable[..., dict[str, Any]]:
        """A node running a whole flow (another pattern's graph) on the query; it shares this flow's providers
        unless its config names its own. Its trace and ledger come back with node names prefixed ``name/``.

        Args:
            name: The node's name.
            config: The inner flow.
            carry: State keys handed to the inner flow besides the question (``query``, ``filter``, ``messages``),
                e.g. ``candidates`` a shared retrieval found before a router.
        """
        own = (config.config if isinstance(config, ResolvedFlow) else config).model_fields_set
        env = self.env if "providers" not in own else None
        sub = build_flow(config, providers=env)

        def keep(out: Mapping[str, Any]) -> dict[str, Any]:
            return {**{k: v for k, v in out.items() if k in SUBFLOW_KEYS}, **_prefixed(name, out)}

        return GraphCall(sub, keep, ("query", "filter", "messages", *carry))

    def branch(
        self,
        source: str,
        decide: Callable[..., Hashable | Sequence[Hashable]],
        path_map: Mapping[Hashable, str] | Sequence[str],
    ) -> None:
        """Add a conditional edge with an explicit ``path_map`` (so drawings and checks know every edge).

        Args:
            source: The node the decision follows (``START`` too).
            decide: Takes the state and returns a key of ``path_map`` (type it ``Literal[...]``), or, for a fan-out,
                ``Send`` packets (then ``path_map`` lists the nodes they and any plain answer go to).
            path_map: Decision -> node (``END`` too), or the list of nodes ``decide`` may lead to.
        """
        self.graph.add_conditional_edges(source, decide, path_map)  # type: ignore[arg-type]

    def compile(self, *, loop_bound: int = 1, max_steps: int | None = None) -> CompiledStateGraph:
        """Compile with the build's checkpointer; ``recursion_limit`` is derived from the graph built and the
        pattern's loop bound (:func:`supersteps`), with a margin of 3.

        On threads (:attr:`BuildOptions.threads`) every new question first passes a ``begin`` step that clears what
        an earlier question on the thread left and takes the question from a new human message (a resume with input
        ``None`` does not pass it), and every run ends with a ``reply`` step that adds the turn to ``messages``. A
        server that attaches its own checkpointer (LangGraph Server) asks for threads explicitly.

        Args:
            loop_bound: How many times the pattern's loop body runs at most (rounds, steps, tree levels); 1 for a
                flow without a loop.
            max_steps: The most supersteps one run can take (as :func:`supersteps` counts them), for a graph whose
                bound it cannot see (default: derived).
        """
        steps = supersteps(self.graph, loop_bound) if max_steps is None else max_steps
        name = self.config.name or self.info.name
        if self.config.answer_cache is not None:
            inner = self.graph.compile(name=name).with_config(recursion_limit=steps + 3)
            return answer_cached(
                inner,
                self.config,
                self.env,
                name=name,
                output_schema=self.output_schema,
                checkpointer=self.checkpointer,
                threaded=self.threaded,
                labels=self._run_labels(name),
            )
        compiled = compile_graph(self.graph, self.checkpointer, name, self.threaded)
        return compiled.with_config(recursion_limit=steps + 3 + 2 * self.threaded, **self._run_labels(name))

    def _run_labels(self, name: str) -> dict[str, Any]:
        """Tags and metadata every run of the flow carries (shown by LangSmith and other tracers)."""
        return {
            "tags": ["modular_rag", f"pattern:{self.info.name}"],
            "metadata": {"modular_rag_pattern": self.info.name, "modular_rag_flow": name},
        }


def build_flow(config: FlowSource, **options: Unpack[BuildOptions]) -> CompiledStateGraph:
    """Build the graph of whatever pattern the config names.

    The config is read, checked and resolved once (:func:`~modular_rag.resolve.resolve`); the pattern builds its
    graph from that resolution.

    Args:
        config: A config object, dict or YAML path, or a resolved config.
        **options: ``checkpointer``, ``providers``, ``threads``, ``output_schema``: see :class:`BuildOptions`.

    Returns:
        The compiled LangGraph ``StateGraph``; call ``.invoke({"query": ...})``.

    Raises:
        ConfigError: If the config is invalid.
    """
    resolved = resolution(config)
    return resolved.pattern.factory(resolved, **options)


def resolution(config: FlowSource) -> ResolvedFlow[Any]:
    """A config read (without the registry checks) and resolved, which checks it; a resolved config as it is.

    Raises:
        ConfigError: If the config is invalid.
    """
    return config if isinstance(config, ResolvedFlow) else resolve(load_config(config, check=False))
