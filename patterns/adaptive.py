"""Adaptive pattern: the model decides when to retrieve and when to stop.

* ``mode: flare`` (FLARE): draft the next sentence; the judge (``token_confidence``, tau) accepts it when every token
  is likely enough, otherwise a query is built from the sentence with its low-confidence tokens masked, evidence is
  retrieved, and the sentence is drafted again and accepted. Stops at the end of the answer or at ``max_steps``
  sentences. Each sentence's ``[n]`` refer to the evidence pack it was drafted from; the final answer renumbers them
  into one evidence list, the union of those packs, so every citation names the chunk its sentence was written from.
* ``mode: self_rag`` (Self-RAG style, by prompted reflection rather than a Self-RAG-trained model): a gate judge
  decides whether to retrieve at all (Retrieve); retrieved chunks are graded (``llm_critique``, IsRel); after
  generation the ``reflection`` judge asks whether the answer is supported by the passages (IsSup, only when there are
  passages) and useful (IsUse); if either says no, the query is rewritten and the loop retrieves again (a CRAG-like
  corrective loop, which Self-RAG itself does not have), at most ``max_steps`` rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END, START
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Unpack

from modular_rag.builder import BuildOptions, FlowBuilder, FlowSource, trace_and_ledger
from modular_rag.config import OperatorSpec
from modular_rag.costs import ZERO, Cost, CostContext, Span, active, context_for, total
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.resolve import ResolvedFlow
from modular_rag.state import Answer, Branch, Hit, RAGState, Round, evidence_of, should_stop, step_of

__all__ = ["build_adaptive", "AdaptiveParams", "SLOTS"]

GATE, REWRITE, RETRIEVE, RERANK, CONTEXT = "gate", "rewrite", "retrieve", "rerank", "context"
DRAFT, GENERATE, JUDGE = "draft", "generate", "judge"
REQUERY, ACCEPT, REDRAFT, FINISH, ADVANCE = "requery", "accept", "redraft", "finish", "advance"

SLOTS = {
    GATE: SlotSpec(Port.JUDGE, default=None, doc="self_rag: continue = retrieve (default llm_judge needs_retrieval)"),
    REWRITE: SlotSpec(Port.QUERY, default=None, doc="self_rag: rewrites the query before another round"),
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False),
    RERANK: SlotSpec(Port.REFINE, default=None, chain=True, doc="self_rag default: llm_critique"),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget"),
    DRAFT: SlotSpec(Port.GENERATE, default="draft_sentence", doc="flare: the tentative next sentence"),
    GENERATE: SlotSpec(Port.GENERATE, default="cited_answer", doc="self_rag: the answer"),
    JUDGE: SlotSpec(
        Port.JUDGE,
        default=None,
        chain=True,
        doc="flare default: token_confidence; self_rag default: llm_judge (supported)",
    ),
    FINISH: SlotSpec(
        Port.FUSE,
        default="sentences",
        optional=False,
        doc="flare: the answer from the accepted sentences and the packs they cite",
    ),
}

_DEFAULTS: dict[str, dict[str, str | OperatorSpec]] = {
    "flare": {JUDGE: "token_confidence", RERANK: "none"},
    "self_rag": {
        GATE: OperatorSpec(name="llm_judge", params={"criterion": "needs_retrieval", "on_unclear": "continue"}),
        REWRITE: "rewrite",
        RERANK: "llm_critique",
        GENERATE: OperatorSpec(name="cited_answer", params={"without_evidence": "answer"}),
        JUDGE: OperatorSpec(name="reflection"),
    },
}


class AdaptiveParams(BaseModel):
    """Which adaptive scheme, its bound, and FLARE's query masking."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["flare", "self_rag"] = Field("flare", description="FLARE or Self-RAG-style control")
    max_steps: int = Field(4, ge=1, le=20, description="flare: sentences; self_rag: retrieval rounds")
    mask_below: float = Field(
        0.4, gt=0.0, lt=1.0, description="flare: tokens below this probability are masked out of the retrieval query"
    )
    initial_retrieval: bool = Field(True, description="flare: retrieve with the question before the first sentence")


def masked_query(question: str, tokens: list[str], logprobs: list[float], below: float) -> str:
    """FLARE's implicit query: the draft sentence without its low-confidence tokens (with the question when little
    is left)."""
    kept = "".join(t for t, lp in zip(tokens, logprobs, strict=False) if math.exp(lp) >= below).strip()
    return kept if len(kept.split()) >= 4 else f"{question} {kept}".strip()


def _flare(flow: FlowBuilder[AdaptiveParams]) -> CompiledStateGraph:
    params, defaults = flow.params, _DEFAULTS["flare"]
    fetch = flow.runner([RETRIEVE, RERANK, CONTEXT], label="retrieve", defaults=defaults)
    draft = flow.runner([DRAFT], label=DRAFT)

    def seen(update: Mapping[str, Any], branch: int, query: str) -> list[Branch]:
        """What a fetch showed the drafts: its evidence pack, as written, kept as the branch's candidates."""
        pack = evidence_of(update)
        return [
            Branch(
                branch=branch,
                query=query,
                weight=1.0,
                candidates=[
                    Hit(
                        chunk_id=e["chunk_id"],
                        text=e["text"],
                        score=e["score"],
                        channel="evidence",
                        metadata=e["metadata"],
                    )
                    for e in pack
                ],
            )
        ]

    async def start(state: Mapping[str, Any]) -> dict[str, Any]:
        update = (await fetch.acall(state)) if params.initial_retrieval else {}
        return {
            **update,
            "step": 0,
            "answer": Answer(text="", citations=[], refused=False),
            "branches": seen(update, 0, state["query"]),
        }

    async def requery(state: Mapping[str, Any]) -> dict[str, Any]:
        d = state.get("draft") or {}
        query = masked_query(
            state["query"], list(d.get("tokens") or []), list(d.get("logprobs") or []), params.mask_below
        )
        update = await fetch.acall({**state, "queries": [query]})
        again = await draft.acall({**state, **{k: v for k, v in update.items() if k not in ("trace", "ledger")}})
        return {
            **update,
            **trace_and_ledger(update, again),
            "draft": again["draft"],
            "queries": [query],
            "branches": seen(update, step_of(state) + 1, query),
        }

    def accept(state: Mapping[str, Any]) -> dict[str, Any]:
        d = state.get("draft") or {}
        so_far = (state.get("answer") or {}).get("text", "")
        text = f"{so_far} {d.get('text', '')}".strip()
        step = step_of(state) + 1
        # the sentence's [n] refer to the pack it was drafted from: keep that pack with it
        pack = [e["chunk_id"] for e in sorted(evidence_of(state), key=lambda e: e["ref"])]
        return {
            "answer": Answer(text=text, citations=[], refused=False),
            "step": step,
            "rounds": [
                Round(
                    step=step,
                    query=(state.get("queries") or [state["query"]])[0],
                    answer=d.get("text", ""),
                    chunk_ids=pack,
                )
            ],
        }

    def judged(state: RAGState) -> Literal["retrieve", "accept"]:
        return "accept" if should_stop(state) else "retrieve"

    def more(state: RAGState) -> Literal["draft", "finish"]:
        draft: Mapping[str, Any] = state.get("draft") or {}
        done = bool(draft.get("done"))
        return "finish" if done or step_of(state) >= params.max_steps else "draft"

    # async def steps: the runs they make (each a Runner) are awaited on the run's loop (async operators stay on it)
    flow.add_step("start", start)
    flow.edge(START, "start")
    flow.add_step(DRAFT, draft)
    flow.edge("start", DRAFT)
    tail = flow.optional(JUDGE, after=DRAFT, default=defaults[JUDGE])
    flow.add_step(REQUERY, requery)
    flow.add_step(ACCEPT, accept)
    flow.add_slot(FINISH)
    flow.branch(tail, judged, {"retrieve": REQUERY, "accept": ACCEPT})
    flow.edge(REQUERY, ACCEPT)
    flow.branch(ACCEPT, more, {"draft": DRAFT, "finish": FINISH})
    flow.edge(FINISH, END)
    return flow.compile(loop_bound=params.max_steps)


def _self_rag(flow: FlowBuilder[AdaptiveParams]) -> CompiledStateGraph:
    params, defaults = flow.params, _DEFAULTS["self_rag"]

    def advance(state: Mapping[str, Any]) -> dict[str, Any]:
        step = step_of(state) + 1
        return {
            "step": step,
            "rounds": [
                Round(
                    step=step,
                    query=(state.get("queries") or [state["query"]])[-1],
                    answer=(state.get("answer") or {}).get("text", ""),
                    chunk_ids=[h["chunk_id"] for h in state.get("candidates") or []],
                )
            ],
        }

    gate = flow.add_slot(GATE, default=defaults[GATE])
    body = flow.chain([RETRIEVE, RERANK, CONTEXT], start=None, end=None, defaults=defaults)
    flow.add_slot(GENERATE, default=defaults[GENERATE])
    flow.edge(body[-1], GENERATE)
    flow.add_step(ADVANCE, advance)
    flow.edge(GENERATE, ADVANCE)
    tail = flow.optional(JUDGE, after=ADVANCE, default=defaults[JUDGE])
    rewrite = flow.add_slot(REWRITE, default=defaults[REWRITE])
    if rewrite:
        flow.edge(REWRITE, body[0])

    def needs_retrieval(state: RAGState) -> Literal["retrieve", "answer"]:
        return "answer" if should_stop(state) else "retrieve"

    def again(state: RAGState) -> Literal["again", "done"]:
        if step_of(state) >= params.max_steps or should_stop(state):
            return "done"
        return "again"

    if gate:
        flow.edge(START, GATE)
        flow.branch(GATE, needs_retrieval, {"retrieve": body[0], "answer": GENERATE})
    else:
        flow.edge(START, body[0])
    flow.branch(tail, again, {"again": REWRITE if rewrite else body[0], "done": END})
    return flow.compile(loop_bound=params.max_steps)


def cost(flow: ResolvedFlow[AdaptiveParams]) -> Cost:
    """flare: per sentence a draft and a judgement, per low-confidence sentence a retrieval and a redraft;
    self_rag: a gate, then per round retrieval, grading, generation and a judgement, and a rewrite between rounds."""
    params = flow.params
    ctx = context_for(flow)
    defaults = _DEFAULTS[params.mode]
    fresh = lambda: CostContext(prefill=ctx.prefill)  # noqa: E731
    if params.mode == "flare":
        start = total(flow, [RETRIEVE, RERANK, CONTEXT], fresh(), defaults) if params.initial_retrieval else ZERO
        step = total(flow, [DRAFT, JUDGE], fresh(), defaults)
        requery = total(flow, [RETRIEVE, RERANK, CONTEXT, DRAFT], fresh(), defaults)
        return start + step * Span(1, params.max_steps) + requery * Span(0, params.max_steps)
    gate = total(flow, [GATE], fresh(), defaults)
    fetched = fresh()
    first = total(flow, [RETRIEVE, RERANK, CONTEXT], fetched, defaults)
    gated = active(flow, GATE, defaults.get(GATE))
    judged = fresh()  # a gated answer may have no passages: then the support question is not asked
    judged.evidence = Span(0 if gated else fetched.evidence.lo, fetched.evidence.hi)
    answer = total(flow, [GENERATE, JUDGE], judged, defaults)
    rewritten = fresh()  # later rounds retrieve with what the rewrite wrote
    again = total(flow, [REWRITE, RETRIEVE, RERANK, CONTEXT], rewritten, defaults)
    first_fetch = Span(0 if gated else 1, 1)
    return gate + first * first_fetch + answer * Span(1, params.max_steps) + again * Span(0, params.max_steps - 1)


@register_pattern("adaptive", slots=SLOTS, params=AdaptiveParams, cost=cost)
def build_adaptive(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the adaptive flow (FLARE or Self-RAG style).

    Args:
        config: A flow config with ``pattern: adaptive``.
        **options: ``checkpointer``, ``providers``, ``threads``, ``output_schema``: see
            :class:`~modular_rag.builder.BuildOptions`.

    Returns:
        The compiled graph. Cost: flare = 1 draft per sentence + 1 retrieval and 1 redraft per low-confidence
        sentence; self_rag = per round 1 generation + judge, grading and rewrite calls.

    Example:
        >>> flow = build_adaptive({"pattern": "adaptive", "params": {"mode": "flare", "max_steps": 3},
        ...                        "providers": {"vectorstore": {"in_memory": True}}})
        >>> sorted(flow.get_graph().nodes)
        ['__end__', '__start__', 'accept', 'draft', 'finish', 'judge', 'requery', 'start']
    """
    flow = FlowBuilder[AdaptiveParams](config, "adaptive", **options)
    return _flare(flow) if flow.params.mode == "flare" else _self_rag(flow)
