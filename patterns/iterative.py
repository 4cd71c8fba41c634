"""Iterative pattern (ITER-RETGEN, MDR, IRCoT): up to T rounds of retrieve -> generate, each round searching with
what the previous one produced.

The ``hop`` slot says how round t+1 searches (round 1 always runs the retrieve slot on the question); its operators
are in :mod:`operators.hops`: ``answer`` (ITER-RETGEN, the default: the question plus round t's generation),
``query`` (the question again), ``links`` (the document graph, no LLM), ``evidence`` (MDR: the question plus a
passage, a beam of searches, no LLM) and ``thought`` (IRCoT: the model writes the next chain-of-thought sentence
after each round; the hits accumulate; the answer is generated once, after the loop).

A judge may end the loop early (``no_progress``: the answer, or the thought, stopped changing; ``token_confidence``
or ``llm_judge``: confident enough; ``budget``); ``rounds`` is the hard bound, and the graph's recursion limit is
derived from it. With ``generate: none`` the pattern is retrieval only (a hop that does not think needs no answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END, START
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import Unpack

from modular_rag.builder import BuildOptions, FlowBuilder, FlowSource
from modular_rag.costs import Cost, Span, active, context_for, llm, total
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.resolve import ResolvedFlow
from modular_rag.state import RAGState, Round, should_stop, step_of
from modular_rag.validation import moved_to_slot

__all__ = [
    "build_iterative",
    "IterativeParams",
    "SLOTS",
    "RETRIEVE",
    "HOP",
    "RERANK",
    "CONTEXT",
    "GENERATE",
    "ADVANCE",
    "JUDGE",
]

RETRIEVE, HOP, RERANK, CONTEXT, GENERATE = "retrieve", "hop", "rerank", "context", "generate"
ADVANCE, JUDGE = "advance", "judge"

SLOTS = {
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False, doc="round 1; the search the hop uses"),
    HOP: SlotSpec(Port.HOP, default="answer", optional=False, doc="how round t+1 searches (runs in the retrieve node)"),
    RERANK: SlotSpec(Port.REFINE, chain=True),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget"),
    GENERATE: SlotSpec(
        Port.GENERATE,
        default="cited_answer",
        doc="none: retrieval only (a hop that thinks: answers once, after the loop)",
    ),
    JUDGE: SlotSpec(Port.JUDGE, default="no_progress", chain=True, doc="ends the loop early; rounds is the bound"),
}

_MOVED = ("query_with", "hop", "max_tokens", "passage_words")
_MOVED_PARAMS = {"links": ("hop",), "evidence": ("hop", "passage_words"), "thought": ("max_tokens",)}


class IterativeParams(BaseModel):
    """The loop bound (how the next round searches is the ``hop`` slot)."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(3, ge=1, le=20, description="T: the most retrieve-generate rounds")

    @model_validator(mode="before")
    @classmethod
    def _hop_is_a_slot(cls, data: Any) -> Any:
        """``query_with`` and the hop's knobs were params before the hop became a slot: refused, naming the line."""
        old = [key for key in _MOVED if isinstance(data, Mapping) and key in data]
        if not old:
            return data
        name = {"llm": "thought"}.get(data.get("query_with", "answer"), data.get("query_with", "answer"))
        params: dict[str, Any] = {}
        for key in _MOVED_PARAMS.get(name, ()):
            params.update(data[key] if key == "hop" else {key: data[key]} if key in data else {})
        raise moved_to_slot(old, HOP, {"name": name, "params": params} if params else name, Port.HOP)


def _round_cost(flow: ResolvedFlow[IterativeParams], hop: str, search: Cost) -> Cost:
    ctx = context_for(flow)
    ctx.search, ctx.hop = search, hop
    return total(flow, [HOP], ctx)


def _thinks(flow: ResolvedFlow[IterativeParams]) -> bool:
    step = flow.slot(HOP)[0]
    return step.operator is not None and "thinks" in step.operator.tags


def cost(flow: ResolvedFlow[IterativeParams]) -> Cost:
    """Round 1 retrieves and runs the body; each later round hops (the hop operator's cost: the first hop's, then a
    later one's) and runs the body again. Exactly ``rounds`` rounds without a judge, 1 to ``rounds`` with one (and
    with a hop that thinks, which ends when a thought says so); a hop that thinks writes a thought after every round
    but the last at the bound, and the answer is generated once, after the loop."""
    thinking = _thinks(flow)
    ctx = context_for(flow)
    search = total(flow, [RETRIEVE], ctx)
    body = total(flow, [RERANK, CONTEXT, JUDGE] if thinking else [RERANK, CONTEXT, GENERATE, JUDGE], ctx)
    second, later = _round_cost(flow, "first", search), _round_cost(flow, "later", search)
    n = flow.params.rounds
    lo = 1 if active(flow, JUDGE) or thinking else n
    out = (
        search
        + body
        + (second + body) * Span(min(lo - 1, 1), min(n - 1, 1))
        + (later + body) * Span(max(lo - 2, 0), max(n - 2, 0))
    )
    if thinking:  # a thought after every round but the last at the bound; one answer from what was collected
        out = out + llm((min(1, n - 1), n - 1)) + total(flow, [GENERATE], context_for(flow))
    return out


@register_pattern("iterative", slots=SLOTS, params=IterativeParams, cost=cost)
def build_iterative(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the iterative flow: (retrieve -> rerank -> context -> generate -> advance -> judge) x up to T rounds;
    with a hop that thinks (IRCoT) (retrieve -> rerank -> context -> advance, which writes the next thought ->
    judge) x up to T, then generate once.

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
    rounds = flow.params.rounds
    search = flow.operator(RETRIEVE)
    assert search is not None  # retrieve is not optional
    hop = flow.hop(HOP, search, node=RETRIEVE)
    thinking = hop.think is not None

    def retrieve(state: Mapping[str, Any]) -> dict[str, Any]:
        """Round 1 searches with the question; round t+1 as the hop says."""
        return search(state) if step_of(state) == 0 else hop.next_round(state)  # type: ignore[arg-type]

    def advance(state: Mapping[str, Any]) -> dict[str, Any]:
        """Record round t (the query it ran, what it produced, its candidates) and count it; with a hop that thinks,
        what it produced is the next thought, written only when another round may follow."""
        step = step_of(state) + 1
        queries = list(state.get("queries") or [])
        used = queries[0] if queries else (str(state.get("query", "")) if step == 1 else "")
        if hop.think is None:
            produced = str((state.get("answer") or {}).get("text", ""))
        else:
            produced = hop.think(state) if step < rounds else ""
        chunk_ids = [h["chunk_id"] for h in state.get("candidates") or []]
        return {"step": step, "rounds": [Round(step=step, query=used, answer=produced, chunk_ids=chunk_ids)]}

    def again(state: RAGState) -> Literal["again", "done"]:
        if step_of(state) >= rounds or should_stop(state):
            return "done"
        done = state.get("rounds") or []
        produced = done[-1]["answer"] if done else ""
        return "done" if hop.finished is not None and hop.finished(produced) else "again"

    flow.add_node(RETRIEVE, retrieve)
    flow.edge(START, RETRIEVE)
    body = [
        RETRIEVE,
        *flow.chain([RERANK, CONTEXT] if thinking else [RERANK, CONTEXT, GENERATE], start=RETRIEVE, end=None),
    ]
    flow.add_step(ADVANCE, advance)
    flow.edge(body[-1], ADVANCE)
    tail = flow.optional(JUDGE, after=ADVANCE)
    answer = GENERATE if thinking and flow.add_slot(GENERATE) else END
    if answer != END:
        flow.edge(GENERATE, END)
    flow.branch(tail, again, {"again": RETRIEVE, "done": answer})
    return flow.compile(loop_bound=rounds)
