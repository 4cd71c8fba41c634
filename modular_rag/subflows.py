"""Flows run as nodes: a compiled flow as one node of another graph (:class:`GraphCall`: a conditional flow's
routes, a cached flow's inner run), what a sub-flow hands back (:data:`SUBFLOW_KEYS`), and the answer cache in front of
a compiled flow (:func:`answer_cached`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START

from modular_rag.concurrency import pooled
from modular_rag.config import FlowConfig
from modular_rag.graphs import compile_graph, state_graph
from modular_rag.state import RAGState
from modular_rag.steps import internal_node

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from modular_rag.providers import Providers

__all__ = ["SUBFLOW_KEYS", "GraphCall", "answer_cached"]

SUBFLOW_KEYS = frozenset(
    {"queries", "candidates", "evidence", "answer", "rounds", "branches", "tree", "verdicts", "step"}
)
"""The keys a sub-flow's output gives the flow that runs it (besides its trace and ledger)."""


class GraphCall:
    """A node that runs a compiled flow on the state's question (``query``, ``filter``, ``messages``): ``invoke`` in
    sync runs, ``ainvoke`` in async ones (:class:`~modular_rag.concurrency.PooledNode` awaits ``acall`` on the event
    loop), so the inner flow's async operators stay async and no thread waits for the whole inner run.

    Args:
        graph: The compiled flow.
        keep: What of the flow's output becomes the node's update.
        inputs: The state keys the inner flow is given.
    """

    is_async = True

    def __init__(
        self,
        graph: CompiledStateGraph,
        keep: Callable[[Mapping[str, Any]], dict[str, Any]],
        inputs: Sequence[str] = ("query", "filter", "messages"),
    ) -> None:
        self.graph, self.keep, self.inputs = graph, keep, tuple(inputs)
        self.limit = graph.config.get("recursion_limit", 25)  # type: ignore[union-attr]

    def _args(self, state: Mapping[str, Any], config: RunnableConfig) -> tuple[dict[str, Any], RunnableConfig]:
        inputs = {key: state[key] for key in self.inputs if key in state}
        return inputs, {**config, "recursion_limit": self.limit}

    def __call__(self, state: RAGState, config: RunnableConfig) -> dict[str, Any]:
        return self.keep(self.graph.invoke(*self._args(state, config)))

    async def acall(self, state: RAGState, config: RunnableConfig) -> dict[str, Any]:
        """The node's async run."""
        return self.keep(await self.graph.ainvoke(*self._args(state, config)))


def answer_cached(
    inner: CompiledStateGraph,
    config: FlowConfig,
    env: Providers,
    *,
    name: str,
    output_schema: type[Any],
    checkpointer: Any,
    threaded: bool,
    labels: Mapping[str, Any],
) -> CompiledStateGraph:
    """Put a flow's semantic answer cache (``config.answer_cache``) in front of its compiled graph: a hit answers at
    once; a miss runs the flow and stores its answer.

    Args:
        inner: The flow, compiled without a checkpointer.
        config: The flow's config.
        env: Its providers.
        name: The flow's name.
        output_schema: What a run returns (see :class:`~modular_rag.builder.BuildOptions`).
        checkpointer: The build's checkpointer, or ``None``.
        threaded: Whether runs share state through threads.
        labels: The tags and metadata every run carries.

    Returns:
        The compiled outer graph: ``cache_lookup``, then ``flow`` on a miss, then ``cache_store``.
    """
    from modular_rag.cache import answer_cache_steps, flow_answer_cache

    lookup, store = answer_cache_steps(flow_answer_cache(config), env)
    limit = inner.config.get("recursion_limit", 25)  # type: ignore[union-attr]
    run_flow = GraphCall(inner, lambda out: {key: value for key, value in out.items() if key != "messages"})

    def hit(state: RAGState) -> Literal["hit", "miss"]:
        return "hit" if state.get("answer") else "miss"

    outer = state_graph(output_schema)
    outer.add_node("cache_lookup", pooled("cache_lookup", internal_node("cache_lookup", lookup)))
    outer.add_node("flow", pooled("flow", run_flow))
    outer.add_node("cache_store", pooled("cache_store", internal_node("cache_store", store)))
    outer.add_edge(START, "cache_lookup")
    outer.add_conditional_edges("cache_lookup", hit, {"hit": END, "miss": "flow"})
    outer.add_edge("flow", "cache_store")
    outer.add_edge("cache_store", END)
    compiled = compile_graph(outer, checkpointer, name, threaded)
    return compiled.with_config(recursion_limit=limit + 4 + 2 * threaded, **labels)
