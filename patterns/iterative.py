"""Iterative pattern (ITER-RETGEN, and multi-hop retrieval): T rounds of retrieve -> generate, each round
retrieving with what the previous one found.

``query_with`` says how round t+1 searches after round t:

* ``answer`` (ITER-RETGEN): the question plus round t's answer (citation markers removed, never a refusal).
* ``query``: the question again (a judge decides when the answer is good enough).
* ``links`` (document-graph hop, no LLM): the chunks whose titles round t's best passages mention, and those the
  question names; every passage ranked by the pair it makes with a first-hop passage (``hop``).
* ``evidence`` (MDR-style, no LLM): the question plus round t's best passage not yet followed, through the
  retrieve slot (dense, BM25 or hybrid); the hits ranked by pairs with that passage.
* ``llm`` (IRCoT-style, for capable models): the model writes the next search query from the question and the
  evidence so far; the hits ranked by pairs with round t's best passage.

A judge may end the loop early (``no_progress``: the answer stopped changing; ``token_confidence`` or
``llm_judge``: confident enough; ``budget``); ``rounds`` is the hard bound, and the graph's recursion limit is
derived from it. With ``generate: none`` the pattern is retrieval only (the hop modes need no answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END, START
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Unpack

from modular_rag.builder import BuildOptions, FlowBuilder, FlowSource
from modular_rag.costs import Cost, Span, active, context_for, llm, retrievals, total
from modular_rag.providers import Providers
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.resolve import ResolvedFlow
from modular_rag.state import RAGState, Round, step_of
from operators.generation import DATA_RULE, evidence_of, format_evidence, is_refusal, strip_citations
from operators.judging import stop_now
from operators.multihop import HopParams, hop
from operators.pre_retrieval import first_line, usable_rewrite

__all__ = ["build_iterative", "IterativeParams", "SLOTS", "RETRIEVE", "RERANK", "CONTEXT", "GENERATE", "ADVANCE",
           "JUDGE", "next_query_prompt"]  # fmt: skip

RETRIEVE, RERANK, CONTEXT, GENERATE, ADVANCE, JUDGE = "retrieve", "rerank", "context", "generate", "advance", "judge"

SLOTS = {
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False),
    RERANK: SlotSpec(Port.REFINE, chain=True),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget"),
    GENERATE: SlotSpec(Port.GENERATE, default="cited_answer", doc="none: retrieval only"),
    JUDGE: SlotSpec(Port.JUDGE, default="no_progress", chain=True, doc="ends the loop early; rounds is the bound"),
}

HOP_MODES = ("links", "evidence", "llm")


class IterativeParams(BaseModel):
    """Loop bound and how the next round's retrieval is formed."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(3, ge=1, le=20, description="T: the most retrieve-generate rounds")
    query_with: Literal["answer", "query", "links", "evidence", "llm"] = Field(
        "answer", description="answer: question + previous answer (ITER-RETGEN); query: the question; links: follow "
                              "the titles the best passages mention (no LLM); evidence: question + best passage "
                              "(MDR-style, no LLM); llm: the model writes the next query (IRCoT-style)"
    )  # fmt: skip
    hop: HopParams = Field(default_factory=HopParams, description="links / evidence / llm: how hops are ranked")
    max_tokens: int = Field(32, gt=0, le=512, description="llm: the next query's length cap")
    passage_words: int = Field(60, gt=0, le=1000, description="evidence: words of the passage added to the question")


NEXT_QUERY_PROMPT = (
    "{passages}{rule}\n\nQuestion: {query}\nThe passages may not answer the question yet. Write one search query for "
    "the missing fact (for example the entity a passage names that the question asks about). Reply with the query "
    "only.\nQuery:"
)


def next_query_prompt(query: str, evidence: list[Any]) -> str:
    """The IRCoT-style prompt asking the model for the next search query."""
    return NEXT_QUERY_PROMPT.format(passages=format_evidence(evidence), rule=f"\n{DATA_RULE}", query=query)


def _advance(params: IterativeParams, env: Providers) -> Any:
    def advance(state: Mapping[str, Any]) -> dict[str, Any]:
        step = step_of(state) + 1
        answer = (state.get("answer") or {}).get("text", "")
        question = str(state.get("query", ""))
        used = (state.get("queries") or [question])[0]
        candidates = list(state.get("candidates") or [])
        update: dict[str, Any] = {
            "step": step,
            "rounds": [Round(step=step, query=used, answer=answer, chunk_ids=[h["chunk_id"] for h in candidates])],
        }
        refused = bool((state.get("answer") or {}).get("refused")) or is_refusal(answer)
        followed = {q for r in state.get("rounds") or [] for q in [r["query"]]}
        if params.query_with == "answer" and answer and not refused:
            update["queries"] = [f"{question} {strip_citations(answer)}"]
        elif params.query_with == "evidence":
            seed = next((h for h in candidates if f"{question} {_words(h['text'], params.passage_words)}"
                         not in followed), None)  # fmt: skip
            update["queries"] = [f"{question} {_words(seed['text'], params.passage_words)}" if seed else question]
        elif params.query_with == "llm":
            evidence = evidence_of(state)[:5]
            text = first_line(env.llm.complete(next_query_prompt(question, evidence), max_tokens=params.max_tokens)
                              .text) if evidence else ""  # fmt: skip
            update["queries"] = [text if usable_rewrite(text, question) else question]
        else:
            update["queries"] = [question]  # a refusal says nothing to retrieve with; links need no query
        return update

    return advance


def _words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def cost(flow: ResolvedFlow[IterativeParams]) -> Cost:
    """Body x rounds: exactly ``rounds`` without a judge, 1 to ``rounds`` with one. In ``links`` mode later rounds
    look up the link table (two lookups) instead of retrieving; ``llm`` mode writes each next query (one call)."""
    params = flow.params
    ctx = context_for(flow)
    first = total(flow, [RETRIEVE, RERANK, CONTEXT, GENERATE, JUDGE], ctx)
    hop_lookups = retrievals(1 + int(params.hop.question_titles))
    if params.query_with == "links":
        later = hop_lookups + total(flow, [RERANK, CONTEXT, GENERATE, JUDGE], context_for(flow))
    elif params.query_with in ("evidence", "llm"):
        later = hop_lookups * Span(0.5, 0.5) + first + (llm(1) if params.query_with == "llm" else Cost())
    else:
        later = first
    lo = 1 if active(flow, JUDGE) else params.rounds
    return first + later * Span(lo - 1, params.rounds - 1)


@register_pattern("iterative", slots=SLOTS, params=IterativeParams, cost=cost)
def build_iterative(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the iterative flow: (retrieve -> rerank -> context -> generate -> advance -> judge) x up to T rounds.

    Args:
        config: A flow config with ``pattern: iterative``.
        **options: ``checkpointer``, ``providers``, ``threads``, ``output_schema``: see
            :class:`~modular_rag.builder.BuildOptions`.

    Returns:
        The compiled graph. Cost per query: up to ``rounds`` x (1 generation + retrievals), plus judge calls.

    Example:
        >>> flow = build_iterative({"pattern": "iterative", "params": {"rounds": 2},
        ...                         "providers": {"vectorstore": {"in_memory": True}}})
        >>> flow.config["recursion_limit"] > 2 * 6
        True
    """
    flow = FlowBuilder[IterativeParams](config, "iterative", **options)
    params = flow.params
    if params.query_with in HOP_MODES:
        search = flow.operator(RETRIEVE)
        assert search is not None  # retrieve is not optional

        def retrieve(state: Mapping[str, Any]) -> dict[str, Any]:
            """Round 1 retrieves; later rounds hop from what the previous round found."""
            if step_of(state) == 0:
                return search(state)  # type: ignore[arg-type]
            previous = list(state.get("candidates") or [])
            question = str(state.get("query", ""))
            if params.query_with == "links":
                return {"candidates": hop(flow.env, question, previous, params.hop)}
            update = search(state)  # type: ignore[arg-type]
            seed = previous[0]["chunk_id"] if previous else ""
            found = {seed: list(update.get("candidates") or [])} if seed else {}
            return {**update, "candidates": hop(flow.env, question, previous, params.hop, second=found)}

        flow.add_step(RETRIEVE, retrieve, operator=f"hop:{params.query_with}")
        flow.edge(START, RETRIEVE)
        body = [RETRIEVE, *flow.chain([RERANK, CONTEXT, GENERATE], start=RETRIEVE, end=None)]
    else:
        body = flow.chain([RETRIEVE, RERANK, CONTEXT, GENERATE], end=None)
    flow.add_step(ADVANCE, _advance(params, flow.env))
    flow.edge(body[-1], ADVANCE)
    tail = flow.optional(JUDGE, after=ADVANCE)

    def again(state: RAGState) -> Literal["again", "done"]:
        if step_of(state) >= params.rounds or stop_now(state):
            return "done"
        return "again"

    flow.branch(tail, again, {"again": body[0], "done": END})
    return flow.compile(loop_bound=params.rounds)

