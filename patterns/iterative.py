"""Iterative pattern (ITER-RETGEN): T rounds of retrieve -> generate, each round retrieving with the question plus
the previous round's answer.

A judge may end the loop early (``no_progress``: the answer stopped changing; ``token_confidence`` or
``llm_judge``: confident enough; ``budget``); ``rounds`` is the hard bound, and the graph's recursion limit is
derived from it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict, Field

from modular_rag.builder import FlowBuilder
from modular_rag.config import FlowConfig
from modular_rag.costs import Cost, Span, active, context_for, total
from modular_rag.providers import Providers
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.state import RAGState, Round, step_of
from operators.generation import is_refusal, strip_citations
from operators.judging import stop_now

__all__ = ["build_iterative", "IterativeParams", "SLOTS", "RETRIEVE", "RERANK", "CONTEXT", "GENERATE", "ADVANCE",
           "JUDGE"]  # fmt: skip

RETRIEVE, RERANK, CONTEXT, GENERATE, ADVANCE, JUDGE = "retrieve", "rerank", "context", "generate", "advance", "judge"

SLOTS = {
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False),
    RERANK: SlotSpec(Port.RERANK, chain=True),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget"),
    GENERATE: SlotSpec(Port.GENERATE, default="cited_answer", optional=False),
    JUDGE: SlotSpec(Port.JUDGE, default="no_progress", chain=True, doc="ends the loop early; rounds is the bound"),
}


class IterativeParams(BaseModel):
    """Loop bound and how the next round's retrieval query is formed."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(3, ge=1, le=20, description="T: the most retrieve-generate rounds")
    query_with: Literal["answer", "query"] = Field(
        "answer", description="'answer': retrieve with question + previous answer, citation markers removed, never a "
                              "refusal (ITER-RETGEN); 'query': question only"
    )  # fmt: skip


def _advance(params: IterativeParams) -> Any:
    def advance(state: Mapping[str, Any]) -> dict[str, Any]:
        step = step_of(state) + 1
        answer = (state.get("answer") or {}).get("text", "")
        used = (state.get("queries") or [state.get("query", "")])[0]
        update: dict[str, Any] = {
            "step": step,
            "rounds": [Round(step=step, query=used, answer=answer,
                             chunk_ids=[h["chunk_id"] for h in state.get("candidates") or []])],
        }  # fmt: skip
        refused = bool((state.get("answer") or {}).get("refused")) or is_refusal(answer)
        if params.query_with == "answer" and answer and not refused:
            update["queries"] = [f"{state.get('query', '')} {strip_citations(answer)}"]
        else:
            update["queries"] = [str(state.get("query", ""))]  # a refusal says nothing to retrieve with
        return update

    return advance


def cost(config: FlowConfig) -> Cost:
    """Body x rounds: exactly ``rounds`` without a judge, 1 to ``rounds`` with one."""
    params = IterativeParams.model_validate(config.params)
    ctx = context_for(config)
    body = total(config, [RETRIEVE, RERANK, CONTEXT, GENERATE, JUDGE], ctx)
    return body * Span(1 if active(config, JUDGE) else params.rounds, params.rounds)


@register_pattern("iterative", slots=SLOTS, params=IterativeParams, cost=cost)
def build_iterative(
    config: FlowConfig | Mapping[str, Any] | str | os.PathLike[str],
    *,
    checkpointer: Any = None,
    providers: Providers | None = None,
    threads: bool | None = None,
) -> CompiledStateGraph:
    """Build the iterative flow: (retrieve -> rerank -> context -> generate -> advance -> judge) x up to T rounds.

    Args:
        config: A flow config with ``pattern: iterative``.
        checkpointer: Optional LangGraph checkpointer (a run can resume between rounds).
        providers: Optional providers to share.
        threads: Whether runs share state through threads (default: with a checkpointer); see
            :meth:`~modular_rag.builder.FlowBuilder.compile`.

    Returns:
        The compiled graph. Cost per query: up to ``rounds`` x (1 generation + retrievals), plus judge calls.

    Example:
        >>> flow = build_iterative({"pattern": "iterative", "params": {"rounds": 2},
        ...                         "providers": {"vectorstore": {"in_memory": True}}})
        >>> flow.config["recursion_limit"] > 2 * 6
        True
    """
    flow = FlowBuilder(config, "iterative", providers=providers)
    params: IterativeParams = flow.params
    body = flow.chain([RETRIEVE, RERANK, CONTEXT, GENERATE], end=None)
    flow.internal(ADVANCE, _advance(params))
    flow.graph.add_edge(body[-1], ADVANCE)
    last = JUDGE if flow.add(JUDGE) else ADVANCE
    if last == JUDGE:
        flow.graph.add_edge(ADVANCE, JUDGE)

    def again(state: RAGState) -> Literal["again", "done"]:
        if step_of(state) >= params.rounds or stop_now(state):
            return "done"
        return "again"

    flow.branch(last, again, {"again": body[0], "done": END})
    per_round = len(body) + 1 + (last == JUDGE)
    return flow.compile(checkpointer=checkpointer, threads=threads, max_steps=params.rounds * per_round)
