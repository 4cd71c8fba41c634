"""Hops: how the next round of a multi-round flow searches, from what the last round left (``Port.HOP``).

Each hop strategy is one registered operator whose factory returns a :class:`~modular_rag.registry.Hop`; the pattern
gives it the flow's search (its retrieve slot). The iterative pattern runs ``next_round`` for every round after the
first; branching (``mode: passages``) and recursive (``expand: hop``) run ``follow`` from each passage.

* ``answer`` (ITER-RETGEN): the question plus round t's generation, [n] markers removed; after an extractive round
  the evidence sentence it quoted, after a refused one the sentence it would have quoted (the question alone only
  when round t had no evidence sentence at all).
* ``query``: the question again (a judge decides when the answer is good enough).
* ``links`` (document-graph hop, no LLM): the first hop takes the chunks the question names and those the best
  first-hop passages mention (``link_hop``'s step); a later hop follows the links of the passages the last round
  found first, ranked together with its best pairs, so a chain grows one hop a round while it finds new passages.
  From one passage: the chunks its text links to (one lookup for all the passages followed).
* ``evidence`` (MDR, no LLM): a beam: one search per passage of round t (the best ``beam`` that round found first),
  each with the question plus that passage; each search's hits are paired with the passage its query was formed
  from. No passage seeds two searches, so no query runs twice. From one passage: the hits of that search.
* ``thought`` (IRCoT): after each round the model writes the next sentence of a chain of thought from the question,
  every paragraph collected so far and the chain so far (``think``); the next round searches with that sentence and
  adds its hits to the collected paragraphs. The loop ends when the chain says "answer is" (``finished``).

A new strategy is one function registered here (or in any plugin) with ``port=Port.HOP``, and a config line
``operators: {hop: <name>}``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from modular_rag.answers import DATA_RULE, evidence_of, format_evidence, is_refusal, strip_citations
from modular_rag.concurrency import together
from modular_rag.costs import Cost, CostContext, Span, retrievals
from modular_rag.multihop import HopParams, hop, linked_from, multihop_rank, named_by_question
from modular_rag.providers import Providers
from modular_rag.registry import Hop, NoParams, OperatorParams, Port, Search, operator
from modular_rag.state import Branch, Hit, step_of, trace_and_ledger
from modular_rag.text import split_sentences
from modular_rag.trace import note
from operators.generation import quoted_sentence

__all__ = [
    "EvidenceHopParams",
    "ThoughtParams",
    "answer",
    "query",
    "links",
    "evidence",
    "thought",
    "thought_prompt",
    "THOUGHT_PROMPT",
]


def _question(state: Mapping[str, Any]) -> str:
    return str(state.get("query", ""))


def _search(search: Search, state: Mapping[str, Any], query: str) -> dict[str, Any]:
    """The flow's search run with one query (and no precomputed query vector)."""
    return {**search({**state, "queries": [query], "query_embedding": None}), "queries": [query]}


def _one_search(params: Any, ctx: CostContext) -> Cost:
    return ctx.search


# ------------------------------------------------------------------------------------------------ answer, query


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


@operator("retrieval", "multi_hop", "answer", port=Port.HOP, cost=_one_search)
def answer(params: NoParams, providers: Providers) -> Hop:
    """ITER-RETGEN: search with the question plus the last round's generation (its [n] markers removed; the quoted
    sentence after an extractive answer, the sentence it would have quoted after a refusal)."""

    def next_round(state: Mapping[str, Any], search: Search) -> dict[str, Any]:
        text = _generation(providers, state)
        return _search(search, state, f"{_question(state)} {text}" if text else _question(state))

    return Hop(next_round)


@operator("retrieval", "multi_hop", "query", port=Port.HOP, cost=_one_search)
def query(params: NoParams, providers: Providers) -> Hop:
    """Search with the question again (a judge decides when the answer is good enough)."""

    def next_round(state: Mapping[str, Any], search: Search) -> dict[str, Any]:
        return _search(search, state, _question(state))

    return Hop(next_round)


# ------------------------------------------------------------------------------------------------ links, evidence


def _found_first(state: Mapping[str, Any]) -> list[Hit]:
    """Round t's candidates that no earlier round had, in round t's order (all of round 1's)."""
    rounds = list(state.get("rounds") or [])
    earlier = {c for r in rounds[:-1] for c in r["chunk_ids"]}
    return [h for h in state.get("candidates") or [] if h["chunk_id"] not in earlier]


def _rank(
    providers: Providers,
    question: str,
    first: Sequence[Hit],
    params: HopParams,
    *,
    second: Mapping[str, Sequence[Hit]],
    sources: Sequence[str] | None,
    named: Sequence[Hit] = (),
) -> list[Hit]:
    return multihop_rank(
        providers,
        question,
        first,
        named=named,
        second=second,
        beam=params.beam,
        pool=params.pool,
        pair_slots=params.pair_slots,
        weights=params.weights,
        follow_links=False,
        k=params.k,
        sources=sources,
    )


def _links_cost(params: HopParams, ctx: CostContext) -> Cost:
    """Two lookups for the first hop (one without ``question_titles``), at most one for a later one; from passages
    (a branch, a tree node), one for all of them."""
    if ctx.hop == "first":
        return retrievals(1 + int(params.question_titles))
    return retrievals(Span(0, 1) if ctx.hop == "later" else 1)


@operator("retrieval", "multi_hop", "links", port=Port.HOP, cost=_links_cost)
def links(params: HopParams, providers: Providers) -> Hop:
    """The document graph, no LLM: the first hop is ``link_hop``'s step (the chunks the question names, the links
    of the best first-hop passages, pair ranking); a later hop follows the links of the best ``beam`` passages the
    last round found first, ranking their pairs together with those of its best passages. One lookup a round; none,
    and the last ranking kept, when the last round found nothing new."""

    def next_round(state: Mapping[str, Any], search: Search) -> dict[str, Any]:
        question, previous = _question(state), list(state.get("candidates") or [])
        if step_of(state) == 1:
            return {"queries": [question], "candidates": hop(providers, question, previous, params)}
        new = _found_first(state)[: params.beam]
        if not new:
            note("links: the last round found no passage of its own; nothing to follow")
            return {"queries": []}
        sources = list(dict.fromkeys(h["chunk_id"] for h in [*previous[: params.beam], *new]))
        by_id = {h["chunk_id"]: h for h in previous}
        second = linked_from(providers, [by_id[c] for c in sources])
        return {
            "queries": [question],
            "candidates": _rank(providers, question, previous, params, second=second, sources=sources),
        }

    def follow(state: Mapping[str, Any], search: Search) -> dict[str, Any]:
        sources = list(state.get("candidates") or [])
        found = linked_from(providers, sources)
        by_id = {h["chunk_id"]: h for h in sources}
        order = [*found, *(c for c in by_id if c not in found)]  # the link table's order, then passages it lacks
        return {
            "branches": [
                Branch(branch=i, query=_question(state), weight=1.0, candidates=[by_id[c], *found.get(c, [])])
                for i, c in enumerate(order)
            ]
        }

    return Hop(next_round, follow=follow)


class EvidenceHopParams(HopParams):
    """MDR's hop: how pairs are ranked (:class:`~modular_rag.multihop.HopParams`) and the passage words searched
    with."""

    passage_words: int = Field(60, gt=0, le=1000, description="words of the passage added to the question")


def _evidence_cost(params: EvidenceHopParams, ctx: CostContext) -> Cost:
    """Up to ``beam`` searches a round, plus one lookup for the first hop; from passages, one search each."""
    if ctx.hop == "follow":
        return ctx.search * ctx.candidates
    beam = ctx.search * Span(0, params.beam)
    return retrievals(Span(0, int(params.question_titles))) + beam if ctx.hop == "first" else beam


def _words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


@operator("retrieval", "multi_hop", "evidence", port=Port.HOP, cost=_evidence_cost)
def evidence(params: EvidenceHopParams, providers: Providers) -> Hop:
    """MDR, no LLM: one search per seed, with the question plus the seed passage (its first ``passage_words``
    words); the seeds are the best ``beam`` passages the last round found first, never one whose query already ran.
    Each search's hits are paired with its seed; the first hop also adds the chunks the question names
    (``question_titles``). Nothing new to seed from: no search, the last ranking kept."""

    def next_round(state: Mapping[str, Any], search: Search) -> dict[str, Any]:
        question, previous = _question(state), list(state.get("candidates") or [])
        ran = {r["query"] for r in state.get("rounds") or []} | set(state.get("queries") or [])
        seeds: dict[str, str] = {}  # query -> the chunk id of the passage it is formed from
        for h in _found_first(state):
            text = f"{question} {_words(h['text'], params.passage_words)}"
            if len(seeds) < params.beam and text not in ran and text not in seeds:
                seeds[text] = h["chunk_id"]
        if not seeds:
            note("evidence: the last round found no passage of its own to search from")
            return {"queries": []}
        runs = [_search(search, state, text) for text in seeds]
        second = {seed: list(run.get("candidates") or []) for seed, run in zip(seeds.values(), runs, strict=True)}
        named = named_by_question(providers, question) if step_of(state) == 1 and params.question_titles else []
        ranked = _rank(providers, question, previous, params, second=second, sources=list(seeds.values()), named=named)
        return {"queries": list(seeds), "candidates": ranked, **trace_and_ledger(*runs)}

    async def follow(state: Mapping[str, Any], search: Search) -> dict[str, Any]:
        seeds = list(state.get("candidates") or [])
        queries = [f"{_question(state)} {_words(seed['text'], params.passage_words)}" for seed in seeds]
        # one search per seed: awaited together in async runs, in turn in sync ones
        runs = await together([functools.partial(search.acall, {**state, "queries": [q]}) for q in queries])
        branches = []
        for i, (seed, run) in enumerate(zip(seeds, runs, strict=True)):
            hits = [h for h in run.get("candidates") or [] if h["chunk_id"] != seed["chunk_id"]]
            branches.append(Branch(branch=i, query=_question(state), weight=1.0, candidates=[seed, *hits]))
        return {"branches": branches, **trace_and_ledger(*runs)}

    return Hop(next_round, follow=follow)


# ------------------------------------------------------------------------------------------------------- thought


class ThoughtParams(OperatorParams):
    """IRCoT's hop: the next thought's length."""

    max_tokens: int = Field(48, gt=0, le=512, description="the next sentence's length cap")


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
    """The chain of thought so far: each round's thought (recorded as the round's ``answer``)."""
    return [r["answer"] for r in state.get("rounds") or [] if r["answer"]]


def _sentence(text: str) -> str:
    """The first sentence of a completion, without a leading ``Step n:`` or ``Next step:`` label."""
    for line in text.strip().splitlines():
        line = re.sub(r"^\s*((next )?step( \d+)?|thought)\s*[:.\-]\s*", "", line, flags=re.IGNORECASE).strip()
        if line:
            return (split_sentences(line) or [line])[0].strip().strip('"')
    return ""


@operator("retrieval", "multi_hop", "thought", port=Port.HOP, needs_llm=True, tags=("thinks",), cost=_one_search)
def thought(params: ThoughtParams, providers: Providers) -> Hop:
    """IRCoT: after each round the model writes the next chain-of-thought sentence (one call) from the question,
    every paragraph collected so far and the chain so far; the next round searches with it and adds its hits to the
    collected paragraphs (in the order found). The chain ends when a thought says "answer is"."""

    def think(state: Mapping[str, Any]) -> str:
        collected = evidence_of(state, default_k=len(state.get("candidates") or []) or 5)  # every paragraph
        completion = providers.llm.complete(
            thought_prompt(_question(state), collected, _chain(state)), max_tokens=params.max_tokens
        )
        return _sentence(completion.text)

    def finished(text: str) -> bool:
        return not text or bool(_ANSWER_IS.search(text))

    def next_round(state: Mapping[str, Any], search: Search) -> dict[str, Any]:
        previous = list(state.get("candidates") or [])
        update = _search(search, state, (_chain(state) or [_question(state)])[-1])
        seen = {h["chunk_id"] for h in previous}
        return {
            **update,
            "candidates": previous + [h for h in update.get("candidates") or [] if h["chunk_id"] not in seen],
        }

    return Hop(next_round, think=think, finished=finished)
