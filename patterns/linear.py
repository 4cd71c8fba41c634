"""Linear pattern: rewrite -> retrieve -> rerank -> context -> generate -> verify.

With ``rewrite: none`` (the template) it is naive RAG, retrieve-then-read; with ``rewrite: {name: rewrite}`` it is
Rewrite-Retrieve-Read (a prompted rewriter; the paper trains one), retrieving with the rewrite.

Every slot is swappable by config, and every slot but ``retrieve`` may be ``none`` (left out of the graph).
"""

from __future__ import annotations

from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict
from typing_extensions import Unpack

from modular_rag.builder import BuildOptions, FlowBuilder, FlowSource
from modular_rag.costs import Cost, context_for, total
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.resolve import ResolvedFlow

__all__ = ["build_linear", "LinearParams", "SLOTS", "REWRITE", "RETRIEVE", "RERANK", "CONTEXT", "GENERATE", "VERIFY"]

REWRITE, RETRIEVE, RERANK, CONTEXT, GENERATE = "rewrite", "retrieve", "rerank", "context", "generate"
VERIFY = "verify"

SLOTS = {
    REWRITE: SlotSpec(Port.QUERY, chain=True, doc="pre-retrieval: rewrite / expand / filter extraction"),
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False, doc="dense, bm25 or hybrid retrieval"),
    RERANK: SlotSpec(Port.REFINE, chain=True, doc="post-retrieval: rerank, select, compress (a list chains)"),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget", doc="evidence pack within a token budget"),
    GENERATE: SlotSpec(Port.GENERATE, default="cited_answer", doc="the answer, citing the evidence"),
    VERIFY: SlotSpec(Port.VERIFY, chain=True, doc="answer verification / refusal (a list chains)"),
}


class LinearParams(BaseModel):
    """The linear pattern has no loop, so no bounds."""

    model_config = ConfigDict(extra="forbid")


def cost(flow: ResolvedFlow[LinearParams]) -> Cost:
    """One pass through the slots."""
    return total(flow, [REWRITE, RETRIEVE, RERANK, CONTEXT, GENERATE, VERIFY], context_for(flow))


@register_pattern("linear", slots=SLOTS, params=LinearParams, cost=cost)
def build_linear(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the linear flow: rewrite -> retrieve -> rerank -> context -> generate.

    Args:
        config: A flow config (object, dict or YAML path) with ``pattern: linear``.
        **options: ``checkpointer``, ``providers``, ``threads``, ``output_schema``: see
            :class:`~modular_rag.builder.BuildOptions`.

    Returns:
        The compiled graph; one LLM call per active LLM slot, one retrieval per query.

    Example:
        >>> from patterns import build_linear
        >>> flow = build_linear({"pattern": "linear", "operators": {"retrieve": "bm25", "generate": "none"},
        ...                      "providers": {"vectorstore": {"in_memory": True}}})
        >>> sorted(flow.get_graph().nodes)
        ['__end__', '__start__', 'context', 'retrieve']
    """
    flow = FlowBuilder[LinearParams](config, "linear", **options)
    flow.chain([REWRITE, RETRIEVE, RERANK, CONTEXT, GENERATE, VERIFY])
    return flow.compile()
