"""Iterative pattern (ITER-RETGEN, MDR, IRCoT): up to T rounds of retrieve -> generate, each round searching with
what the previous one produced.

``query_with`` names how round t+1 searches: one hop strategy each (:data:`HOPS`), every one a function of the same
shape, ``(params, providers, search) -> node``, whose node takes the state round t left and returns round t+1's
``queries`` and ``candidates`` (``search`` is the retrieve slot's operator; round 1 always runs it on the question):

* ``answer`` (ITER-RETGEN): the question plus round t's generation, [n] markers removed; after an extractive round
  the evidence sentence it quoted, after a refused one the sentence it would have quoted (the question alone only
  when round t had no evidence sentence at all).
* ``query``: the question again (a judge decides when the answer is good enough).
* ``links`` (document-graph hop, no LLM): round 2 takes the chunks the question names and those the best first-hop
  passages mention (``link_hop``'s step); round t+1 > 2 follows the links of the passages round t found first,
  ranked together with round t's best pairs, so a chain grows one hop a round while it finds new passages.
* ``evidence`` (MDR, no LLM): a beam: one search per passage of round t (the best ``hop.beam`` that round found
  first), each with the question plus that passage, through the retrieve slot; each search's hits are paired with
  the passage its query was formed from. No passage seeds two searches, so no query runs twice.
* ``thought`` (IRCoT): after each round the model writes the next sentence of a chain of thought from the question,
  every paragraph collected so far and the chain so far; the next round searches with that sentence and adds its
  hits to the collected paragraphs. The loop ends when the chain says "answer is" (or at the bound); ``generate``
  then answers once, from the collected paragraphs. ``llm``, this mode's former spelling, is read as ``thought``.

A judge may end the loop early (``no_progress``: the answer, or the thought, stopped changing; ``token_confidence``
or ``llm_judge``: confident enough; ``budget``); ``rounds`` is the hard bound, and the graph's recursion limit is
derived from it. With ``generate: none`` the pattern is retrieval only (the hop modes need no answer).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast

from langgraph.graph import END, START
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import Unpack

from modular_rag.builder import BuildOptions, FlowBuilder, FlowSource, internal_node, trace_and_ledger
from modular_rag.costs import Cost, Span, active, context_for, llm, retrievals, total
from modular_rag.providers import Providers
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.resolve import ResolvedFlow
from modular_rag.state import Hit, RAGState, Round, step_of
from modular_rag.text import split_sentences
from modular_rag.trace import note
from operators.generation import DATA_RULE, evidence_of, format_evidence, is_refusal, quoted_sentence, strip_citations
from operators.judging import stop_now
from operators.multihop import HopParams, hop, linked_from, multihop_rank, named_by_question

__all__ = ["build_iterative", "IterativeParams", "HOPS", "SLOTS", "RETRIEVE", "RERANK", "CONTEXT", "GENERATE",
           "ADVANCE", "JUDGE", "thought_prompt"]  # fmt: skip

RETRIEVE, RERANK, CONTEXT, GENERATE, ADVANCE, JUDGE = "retrieve", "rerank", "context", "generate", "advance", "judge"

SLOTS = {
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False),
    RERANK: SlotSpec(Port.REFINE, chain=True),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget"),
    GENERATE: SlotSpec(Port.GENERATE, default="cited_answer", doc="none: retrieval only (thought: answers once, "
                                                                  "after the loop)"),  # fmt: skip
    JUDGE: SlotSpec(Port.JUDGE, default="no_progress", chain=True, doc="ends the loop early; rounds is the bound"),
}


class IterativeParams(BaseModel):
    """Loop bound and how the next round searches."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(3, ge=1, le=20, description="T: the most retrieve-generate rounds")
    query_with: Literal["answer", "query", "links", "evidence", "thought"] = Field(
        "answer", description="answer: question + last generation (ITER-RETGEN); query: the question; links: follow "
                              "the titles the newest passages mention (no LLM); evidence: question + passage, a beam "
                              "(MDR, no LLM); thought: the model's next chain-of-thought sentence, paragraphs "
                              "accumulated (IRCoT)"
    )  # fmt: skip
    hop: HopParams = Field(default_factory=HopParams, description="links / evidence: how hops are ranked (evidence: "
                                                                   "hop.beam searches a round)")  # fmt: skip
    max_tokens: int = Field(48, gt=0, le=512, description="thought: the next sentence's length cap")
    passage_words: int = Field(60, gt=0, le=1000, description="evidence: words of the passage added to the question")

    @field_validator("query_with", mode="before")
    @classmethod
    def _former_spelling(cls, value: Any) -> Any:
        if value == "llm":
            warnings.warn("params.query_with: 'llm' is now spelled 'thought' and runs IRCoT (the model writes the "
                          "next chain-of-thought sentence, paragraphs accumulate); read as 'thought'",
                          FutureWarning, stacklevel=2)  # fmt: skip
            return "thought"
        return value


Step = Callable[[Mapping[str, Any]], dict[str, Any]]
"""A node-like function: the state in, a partial update out."""

Hop = Callable[[IterativeParams, Providers, Step], Step]
"""A hop strategy: built from the pattern's params, the providers and the retrieve slot's operator (``search``), it
returns round t+1's retrieve node: the state round t left in; ``queries`` and ``candidates``, with the trace and
ledger of what ran, out. A hop that only writes the query runs ``search`` with it (the round's trace shows the
retrieve slot's operator); a hop with lookups of its own is traced as ``hop:<query_with>``."""


def _question(state: Mapping[str, Any]) -> str:
    return str(state.get("query", ""))


def _search(search: Step, state: Mapping[str, Any], query: str) -> dict[str, Any]:
    """The retrieve slot run with one query (and no precomputed query vector)."""
    return {**search({**state, "queries": [query], "query_embedding": None}), "queries": [query]}


def _generation(providers: Providers, state: Mapping[str, Any]) -> str:
    """Round t's generation as retrieval text: the answer without its [n] markers; for an extractive answer the
    sentence it quoted; for a refusal the evidence sentence the extractive answer would have quoted (scored with the
    default sentence weights); empty when there is none."""
    answer = state.get("answer") or {}
    text = str(answer.get("text") or "")
    if answer.get("source") == "extractive" and answer.get("quote"):
        return str(answer["quote"])
    if answer.get("refused") or is_refusal(text):
        evidence = evidence_of(state)
        return (quoted_sentence(providers, _question(state), evidence) if evidence else None) or ""
    return strip_citations(text)


def _hop_answer(params: IterativeParams, providers: Providers, search: Step) -> Step:
    """ITER-RETGEN: search with the question plus round t's generation (:func:`_generation`)."""

    def step(state: Mapping[str, Any]) -> dict[str, Any]:
        text = _generation(providers, state)
        return _search(search, state, f"{_question(state)} {text}" if text else _question(state))

    return step


def _hop_query(params: IterativeParams, providers: Providers, search: Step) -> Step:
    """Search with the question again."""

    def step(state: Mapping[str, Any]) -> dict[str, Any]:
        return _search(search, state, _question(state))

    return step


def _found_first(state: Mapping[str, Any]) -> list[Hit]:
    """Round t's candidates that no earlier round had, in round t's order (all of round 1's)."""
    rounds = list(state.get("rounds") or [])
    earlier = {c for r in rounds[:-1] for c in r["chunk_ids"]}
    return [h for h in state.get("candidates") or [] if h["chunk_id"] not in earlier]


def _rank(providers: Providers, question: str, first: Sequence[Hit], params: HopParams, *,
          second: Mapping[str, Sequence[Hit]], sources: Sequence[str] | None,
          named: Sequence[Hit] = ()) -> list[Hit]:  # fmt: skip
    return multihop_rank(providers, question, first, named=named, second=second, beam=params.beam, pool=params.pool,
                         pair_slots=params.pair_slots, weights=params.weights, follow_links=False, k=params.k,
                         sources=sources)  # fmt: skip


def _hop_links(params: IterativeParams, providers: Providers, search: Step) -> Step:
    """The document graph: round 2 is ``link_hop``'s step (the chunks the question names, the links of the best
    first-hop passages, pair ranking); round t+1 > 2 follows the links of the best ``hop.beam`` passages round t
    found first, ranking their pairs together with those of round t's best passages. One lookup a round; none, and
    round t's ranking kept, when round t found nothing new."""

    def links(state: Mapping[str, Any]) -> dict[str, Any]:
        question, previous = _question(state), list(state.get("candidates") or [])
        if step_of(state) == 1:
            return {"queries": [question], "candidates": hop(providers, question, previous, params.hop)}
        new = _found_first(state)[: params.hop.beam]
        if not new:
            note("links: the last round found no passage of its own; nothing to follow")
            return {"queries": []}
        sources = list(dict.fromkeys(h["chunk_id"] for h in [*previous[: params.hop.beam], *new]))
        by_id = {h["chunk_id"]: h for h in previous}
        second = linked_from(providers, [by_id[c] for c in sources])
        return {"queries": [question],
                "candidates": _rank(providers, question, previous, params.hop, second=second, sources=sources)}

    return cast(Step, internal_node(RETRIEVE, links, "hop:links"))


def _words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def _hop_evidence(params: IterativeParams, providers: Providers, search: Step) -> Step:
    """MDR: one search per seed, with the question plus the seed passage (its first ``passage_words`` words); the
    seeds are the best ``hop.beam`` passages round t found first, never one whose query already ran. Each search's
    hits are paired with its seed (the seeds are the pairs' first passages); round 2 also adds the chunks the
    question names (``hop.question_titles``). Nothing new to seed from: no search, round t's ranking kept."""

    def evidence(state: Mapping[str, Any]) -> dict[str, Any]:
        question, previous = _question(state), list(state.get("candidates") or [])
        ran = {r["query"] for r in state.get("rounds") or []} | set(state.get("queries") or [])
        seeds: dict[str, str] = {}  # query -> the chunk id of the passage it is formed from
        for h in _found_first(state):
            query = f"{question} {_words(h['text'], params.passage_words)}"
            if len(seeds) < params.hop.beam and query not in ran and query not in seeds:
                seeds[query] = h["chunk_id"]
        if not seeds:
            note("evidence: the last round found no passage of its own to search from")
            return {"queries": []}
        runs = [_search(search, state, query) for query in seeds]
        second = {seed: list(run.get("candidates") or []) for seed, run in zip(seeds.values(), runs, strict=True)}
        named = named_by_question(providers, question) if step_of(state) == 1 and params.hop.question_titles else []
        ranked = _rank(providers, question, previous, params.hop, second=second, sources=list(seeds.values()),
                       named=named)  # fmt: skip
        return {"queries": list(seeds), "candidates": ranked, **trace_and_ledger(*runs)}

    return cast(Step, internal_node(RETRIEVE, evidence, "hop:evidence"))


THOUGHT_PROMPT = (
    "{passages}\n{rule}\n\nQuestion: {query}\nAnswer the question by reasoning step by step from the passages, one "
    "short sentence per step. Write only the next step. When the steps so far give the answer, write: So the answer "
    "is <answer>.\n{so_far}Next step:"
)

_ANSWER_IS = re.compile(r"\banswer is\b", re.IGNORECASE)


def thought_prompt(query: str, evidence: Sequence[Any], chain: Sequence[str]) -> str:
    """The IRCoT prompt for the next chain-of-thought sentence: the paragraphs collected so far, the question and
    the chain so far."""
    so_far = f"Steps so far: {' '.join(chain)}\n" if chain else ""
    return THOUGHT_PROMPT.format(passages=format_evidence(evidence), rule=DATA_RULE, query=query, so_far=so_far)


def _chain(state: Mapping[str, Any]) -> list[str]:
    """The chain of thought so far: each round's thought (thought mode records it as the round's ``answer``)."""
    return [r["answer"] for r in state.get("rounds") or [] if r["answer"]]


def _sentence(text: str) -> str:
    """The first sentence of a completion, without a leading ``Step n:`` or ``Next step:`` label."""
    for line in text.strip().splitlines():
        line = re.sub(r"^\s*((next )?step( \d+)?|thought)\s*[:.\-]\s*", "", line, flags=re.IGNORECASE).strip()
        if line:
            return (split_sentences(line) or [line])[0].strip().strip('"')
    return ""


def _think(params: IterativeParams, providers: Providers) -> Callable[[Mapping[str, Any]], str]:
    """IRCoT's reason step: the next chain-of-thought sentence (one LLM call)."""

    def think(state: Mapping[str, Any]) -> str:
        evidence = evidence_of(state, default_k=len(state.get("candidates") or []) or 5)  # every paragraph collected
        completion = providers.llm.complete(thought_prompt(_question(state), evidence, _chain(state)),
                                            max_tokens=params.max_tokens)  # fmt: skip
        return _sentence(completion.text)

    return think


def _hop_thought(params: IterativeParams, providers: Providers, search: Step) -> Step:
    """IRCoT's retrieve step: search with round t's thought and add the hits to the paragraphs collected so far
    (the collection keeps the order found)."""

    def step(state: Mapping[str, Any]) -> dict[str, Any]:
        previous = list(state.get("candidates") or [])
        update = _search(search, state, (_chain(state) or [_question(state)])[-1])
        seen = {h["chunk_id"] for h in previous}
        return {**update, "candidates": previous + [h for h in update.get("candidates") or []
                                                    if h["chunk_id"] not in seen]}  # fmt: skip

    return step


HOPS: dict[str, Hop] = {"answer": _hop_answer, "query": _hop_query, "links": _hop_links, "evidence": _hop_evidence,
                        "thought": _hop_thought}  # fmt: skip
"""How round t+1 searches, by ``query_with``."""


def _advance(params: IterativeParams, think: Callable[[Mapping[str, Any]], str] | None) -> Step:
    """Record round t (the query it ran, what it produced, its candidates) and count it; in thought mode what it
    produced is the next thought, written only when another round may follow."""

    def advance(state: Mapping[str, Any]) -> dict[str, Any]:
        step = step_of(state) + 1
        queries = list(state.get("queries") or [])
        used = queries[0] if queries else (_question(state) if step == 1 else "")
        if think is None:
            produced = str((state.get("answer") or {}).get("text", ""))
        else:
            produced = think(state) if step < params.rounds else ""
        candidates = list(state.get("candidates") or [])
        return {"step": step, "rounds": [Round(step=step, query=used, answer=produced,
                                               chunk_ids=[h["chunk_id"] for h in candidates])]}  # fmt: skip

    return advance


def cost(flow: ResolvedFlow[IterativeParams]) -> Cost:
    """Round 1 retrieves and runs the body; each later round hops (``answer``, ``query``: one search; ``links``: two
    lookups in round 2, at most one after; ``evidence``: up to ``hop.beam`` searches, plus one lookup in round 2;
    ``thought``: one thought, one search) and runs the body again. Exactly ``rounds`` rounds without a judge, 1 to
    ``rounds`` with one (and in thought mode, which ends when the chain gives the answer); thought mode generates
    once, after the loop."""
    params = flow.params
    thinking = params.query_with == "thought"
    ctx = context_for(flow)
    search = total(flow, [RETRIEVE], ctx)
    body = total(flow, [RERANK, CONTEXT, JUDGE] if thinking else [RERANK, CONTEXT, GENERATE, JUDGE], ctx)
    named = int(params.hop.question_titles)
    beam = Span(0, params.hop.beam)
    second, later = {
        "answer": (search, search),
        "query": (search, search),
        "links": (retrievals(1 + named), retrievals(Span(0, 1))),
        "evidence": (retrievals(Span(0, named)) + search * beam, search * beam),
        "thought": (search, search),
    }[params.query_with]
    n = params.rounds
    lo = 1 if active(flow, JUDGE) or thinking else n
    out = (search + body + (second + body) * Span(min(lo - 1, 1), min(n - 1, 1))
           + (later + body) * Span(max(lo - 2, 0), max(n - 2, 0)))  # fmt: skip
    if thinking:  # a thought after every round but the last at the bound; one answer from what was collected
        out = out + llm((min(1, n - 1), n - 1)) + total(flow, [GENERATE], context_for(flow))
    return out


@register_pattern("iterative", slots=SLOTS, params=IterativeParams, cost=cost)
def build_iterative(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the iterative flow: (retrieve -> rerank -> context -> generate -> advance -> judge) x up to T rounds;
    in thought mode (IRCoT) (retrieve -> rerank -> context -> advance, which writes the next thought -> judge) x up
    to T, then generate once.

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
    search = flow.operator(RETRIEVE)
    assert search is not None  # retrieve is not optional
    next_round = HOPS[params.query_with](params, flow.env, search)  # type: ignore[arg-type]
    thinking = params.query_with == "thought"

    def retrieve(state: Mapping[str, Any]) -> dict[str, Any]:
        """Round 1 searches with the question; round t+1 as ``query_with`` says."""
        return search(state) if step_of(state) == 0 else next_round(state)  # type: ignore[arg-type]

    flow.add_node(RETRIEVE, retrieve)
    flow.edge(START, RETRIEVE)
    body = [RETRIEVE, *flow.chain([RERANK, CONTEXT] if thinking else [RERANK, CONTEXT, GENERATE], start=RETRIEVE,
                                  end=None)]  # fmt: skip
    flow.add_step(ADVANCE, _advance(params, _think(params, flow.env) if thinking else None))
    flow.edge(body[-1], ADVANCE)
    tail = flow.optional(JUDGE, after=ADVANCE)

    def again(state: RAGState) -> Literal["again", "done"]:
        if step_of(state) >= params.rounds or stop_now(state):
            return "done"
        if thinking and not _open(state):
            return "done"
        return "again"

    answer = GENERATE if thinking and flow.add_slot(GENERATE) else END
    if answer != END:
        flow.edge(GENERATE, END)
    flow.branch(tail, again, {"again": RETRIEVE, "done": answer})
    return flow.compile(loop_bound=params.rounds)


def _open(state: Mapping[str, Any]) -> bool:
    """Thought mode: whether the chain goes on (the last thought is a sentence that does not give the answer)."""
    rounds = list(state.get("rounds") or [])
    thought = rounds[-1]["answer"] if rounds else ""
    return bool(thought) and not _ANSWER_IS.search(thought)
