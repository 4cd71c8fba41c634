"""Orchestration / fusion: merging ranked lists from parallel retrievers or branches.

The merge functions are shared by hybrid retrieval (dense + BM25), multi-query retrieval and the branching
pattern's fusion operators:

* :func:`rrf` - reciprocal rank fusion, ``sum_i w_i / (k + rank_i(d))`` (k = 60 by default); robust when the
  lists' scores are not comparable.
* :func:`score_fusion` with ``norm="minmax"`` - convex combination of min-max normalised scores
  (``alpha * dense + (1 - alpha) * sparse`` for two lists).
* :func:`score_fusion` with ``norm="zscore"`` - weighted sum of standardised scores (distribution-based fusion).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field
from typing_extensions import TypedDict

from modular_rag.answers import (
    DATA_RULE,
    REFUSAL,
    cite_pack,
    cited_refs,
    clean_completion,
    format_evidence,
    is_refusal,
    make_answer,
    renumber,
)
from modular_rag.costs import ZERO, Cost, CostContext, Span, llm, retrievals
from modular_rag.multihop import HopWeights, hits_by_id, multihop_rank, named_by_question
from modular_rag.providers import Providers
from modular_rag.registry import NoParams, Operator, OperatorParams, Port, operator
from modular_rag.state import Answer, Branch, Citation, Evidence, Hit, pack_of
from modular_rag.text import token_f1
from modular_rag.trace import note
from operators.generation import SYSTEM

__all__ = [
    "rrf",
    "score_fusion",
    "normalise_scores",
    "fuse",
    "replug_weights",
    "replug_token_level",
    "document_prompt",
    "pack_of",
    "Partial",
    "partials",
    "fused_evidence",
]

Norm = Literal["minmax", "zscore"]


def _weights(n: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) < n:
        # extra lists get the last weight
        return list(weights) + [weights[-1] if weights else 1.0] * (n - len(weights))
    return list(weights[:n])


def _merged(first: dict[str, Hit], scores: dict[str, float], k: int | None, channel: str) -> list[Hit]:
    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    if k is not None:
        ordered = ordered[:k]
    return [
        Hit(
            chunk_id=cid,
            text=first[cid]["text"],
            score=float(score),
            channel=channel,
            metadata=dict(first[cid]["metadata"]),
        )
        for cid, score in ordered
    ]


def rrf(
    lists: Sequence[Sequence[Hit]],
    *,
    k: int | None = None,
    weights: Sequence[float] | None = None,
    rrf_k: int = 60,
    channel: str = "rrf",
) -> list[Hit]:
    """Reciprocal rank fusion of ranked hit lists.

    Args:
        lists: Ranked lists (best first).
        k: Keep the best ``k`` (all when ``None``).
        weights: Per-list weights (default equal).
        rrf_k: The rank constant (60 in the original paper).
        channel: The channel name the fused hits carry.
    """
    w = _weights(len(lists), weights)
    first: dict[str, Hit] = {}
    scores: dict[str, float] = {}
    for weight, hits in zip(w, lists, strict=True):
        for rank, hit in enumerate(hits, start=1):
            cid = hit["chunk_id"]
            first.setdefault(cid, hit)
            scores[cid] = scores.get(cid, 0.0) + weight / (rrf_k + rank)
    return _merged(first, scores, k, channel)


def normalise_scores(values: np.ndarray, norm: Norm) -> np.ndarray:
    """Scores of one ranked list on a common scale: ``minmax`` to [0, 1] (all ones when they are equal), or
    ``zscore`` (all zeros when they are equal)."""
    if len(values) == 0:
        return values
    if norm == "minmax":
        lo, hi = float(values.min()), float(values.max())
        return np.ones_like(values) if hi - lo < 1e-12 else (values - lo) / (hi - lo)
    std = float(values.std())
    return np.zeros_like(values) if std < 1e-12 else (values - values.mean()) / std


def score_fusion(
    lists: Sequence[Sequence[Hit]],
    *,
    k: int | None = None,
    weights: Sequence[float] | None = None,
    norm: Norm = "minmax",
    channel: str = "fused",
) -> list[Hit]:
    """Weighted sum of per-list normalised scores; a hit missing from a list gets that list's minimum.

    With ``norm="minmax"`` and weights ``(alpha, 1 - alpha)`` this is the convex combination of normalised scores.
    """
    w = _weights(len(lists), weights)
    first: dict[str, Hit] = {}
    per_list: list[dict[str, float]] = []
    for hits in lists:
        values = normalise_scores(np.array([h["score"] for h in hits], dtype=np.float64), norm)
        per_list.append({h["chunk_id"]: float(v) for h, v in zip(hits, values, strict=True)})
        for h in hits:
            first.setdefault(h["chunk_id"], h)
    scores: dict[str, float] = {}
    for weight, table in zip(w, per_list, strict=True):
        floor = min(table.values()) if table else 0.0
        for cid in first:
            scores[cid] = scores.get(cid, 0.0) + weight * table.get(cid, floor)
    return _merged(first, scores, k, channel)


FusionMethod = Literal["rrf", "convex", "weighted"]


def fuse(
    lists: Sequence[Sequence[Hit]],
    method: FusionMethod,
    *,
    k: int | None = None,
    weights: Sequence[float] | None = None,
    rrf_k: int = 60,
    channel: str = "fused",
) -> list[Hit]:
    """Fuse ranked lists by ``rrf``, ``convex`` (min-max normalised) or ``weighted`` (z-score normalised)."""
    if len(lists) == 1 and weights is None:
        hits = list(lists[0])
        return hits[:k] if k is not None else hits
    if method == "rrf":
        return rrf(lists, k=k, weights=weights, rrf_k=rrf_k, channel=channel)
    return score_fusion(lists, k=k, weights=weights, norm="minmax" if method == "convex" else "zscore", channel=channel)


# ------------------------------------------------------------------------------------------------ fusion operators


def _branches(state: Mapping[str, Any]) -> list[Branch]:
    return sorted(state.get("branches") or [], key=lambda b: b["branch"])


class RRFParams(OperatorParams):
    k: int = Field(10, gt=0, le=1000, description="hits kept after fusion")
    rrf_k: int = Field(60, gt=0, description="rank constant")
    weights: list[float] | None = Field(None, description="per-branch weights in branch order (default equal)")


def _list_fusion_cost(params: Any, ctx: CostContext) -> Cost:
    ctx.candidates = Span(min(1, ctx.candidates.lo), params.k)
    return ZERO


@operator("orchestration", "fusion", "rrf", port=Port.FUSE, tags=("candidates",), cost=_list_fusion_cost)
def rrf_fusion(params: RRFParams, providers: Providers) -> Operator:
    """Reciprocal rank fusion of the branches' ranked candidates (optionally weighted per branch)."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        lists = [b["candidates"] for b in _branches(state)]
        return {"candidates": rrf(lists, k=params.k, weights=params.weights, rrf_k=params.rrf_k, channel="rrf")}

    return run


class WeightedParams(OperatorParams):
    k: int = Field(10, gt=0, le=1000, description="hits kept after fusion")
    weights: list[float] = Field(
        [1.0, 0.95, 0.9], description="per-branch weights in branch order (extra branches get the last)"
    )
    norm: Literal["minmax", "zscore"] = Field("minmax", description="score normalisation within each branch")


@operator("orchestration", "fusion", "weighted", port=Port.FUSE, tags=("candidates",), cost=_list_fusion_cost)
def weighted_fusion(params: WeightedParams, providers: Providers) -> Operator:
    """Weighted sum of per-branch normalised scores (e.g. 1.0 / 0.95 / 0.90 for the first three rewrites)."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        lists = [b["candidates"] for b in _branches(state)]
        return {
            "candidates": score_fusion(lists, k=params.k, weights=params.weights, norm=params.norm, channel="weighted")
        }

    return run


def replug_weights(similarities: Sequence[float], temperature: float) -> np.ndarray:
    """Eq. 24: lambda(d, q) = softmax of the query-document similarities s(d, q) (divided by ``temperature``)."""
    x = np.asarray(similarities, dtype=np.float64) / temperature
    x = np.exp(x - x.max()) if len(x) else x
    return x / x.sum() if len(x) else x


class ReplugParams(OperatorParams):
    level: Literal["auto", "token", "answer"] = Field(
        "auto",
        description="token: mix next-token distributions (needs prefill + logprobs); answer: weighted vote; "
        "auto: token when the model allows it",
    )
    temperature: float = Field(
        0.1, gt=0.0, le=100.0, description="softmax temperature over the query-document embedding cosines"
    )
    max_tokens: int = Field(64, gt=0, le=1024, description="token-level decoding length cap")
    top_logprobs: int = Field(10, gt=0, le=20, description="alternatives read per document and step")


def replug_token_level(params: ReplugParams, prefill: bool, logprobs: bool = True) -> bool:
    """Whether REPLUG runs as the token-level ensemble (the model continues partial answers and gives token
    log-probabilities), rather than as a weighted vote over per-document answers."""
    return params.level == "token" or (params.level == "auto" and prefill and logprobs)


def document_prompt(evidence: Evidence, query: str) -> str:
    """The prompt of one REPLUG branch: its single document, numbered with the reference the fused answer uses."""
    return f"{format_evidence([evidence])}\n\nQuestion: {query}\nAnswer:"


def _vote(branches: list[Branch], weights: np.ndarray) -> tuple[str, list[int]]:
    """Weighted voting: answers grouped by normalised text (token F1 >= 0.8 joins a group); heaviest group wins."""
    groups: list[tuple[str, float, list[int]]] = []
    for b, w in zip(branches, weights, strict=True):
        answer: Mapping[str, Any] = b.get("answer") or {}
        text = answer.get("text", "")
        if not text or answer.get("refused"):
            continue
        for i, (rep, total, members) in enumerate(groups):
            if token_f1(text, rep) >= 0.8:
                groups[i] = (rep, total + float(w), [*members, b["branch"]])
                break
        else:
            groups.append((text, float(w), [b["branch"]]))
    if not groups:
        return "", []
    rep, _, members = max(groups, key=lambda g: g[1])
    return rep, members


def _decode(providers: Providers, prompts: list[str], weights: np.ndarray, params: ReplugParams) -> str:
    """Eq. 23: p(y_t | q, D) = sum_d lambda_d p(y_t | d, q, y_<t); greedy over the mixture, one step at a time."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    prefix = ""
    with ThreadPoolExecutor(max_workers=max(1, len(prompts)), thread_name_prefix="replug") as pool:
        for _ in range(params.max_tokens):
            futures = [
                pool.submit(
                    contextvars.copy_context().run,
                    providers.llm.next_token,
                    p,
                    prefix,
                    system=SYSTEM,
                    top_logprobs=params.top_logprobs,
                )
                for p in prompts
            ]
            mixture: dict[str, float] = {}
            for weight, fut in zip(weights, futures, strict=True):
                for token, logprob in fut.result():
                    mixture[token] = mixture.get(token, 0.0) + float(weight) * math.exp(logprob)
            token = max(mixture, key=lambda t: (mixture[t], t))
            if token == "":
                break
            prefix += token
    return prefix


def _replug_cost(params: ReplugParams, ctx: CostContext) -> Cost:
    docs = ctx.candidates  # the pattern sets it to the number of document branches
    return llm((docs.lo, docs.hi * params.max_tokens)) if replug_token_level(params, ctx.prefill) else ZERO


@operator(
    "orchestration",
    "fusion",
    "replug",
    port=Port.FUSE,
    needs_llm=True,
    tags=("answer",),
    cost=_replug_cost,
    answers_itself=lambda params, prefill: replug_token_level(params, prefill),
)
def replug(params: ReplugParams, providers: Providers) -> Operator:
    """REPLUG ensemble of per-document branches, weighted by lambda = softmax(s(d, q) / temperature) with s the
    query-document embedding cosine, whatever the retriever (Eq. 23-24): mixes next-token distributions when the
    model gives them, else a weighted vote over the per-document answers. Each document keeps its reference number
    in every prompt, so citations point at the document they came from."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        from modular_rag.index import chunk_vectors

        branches = [b for b in _branches(state) if b["candidates"]]
        if not branches:
            return {"answer": Answer(text=REFUSAL, citations=[], refused=True)}
        docs = [b["candidates"][0] for b in branches]
        similarities = chunk_vectors(providers, docs) @ providers.encoder.encode_query(str(state.get("query", "")))
        weights = replug_weights(similarities.tolist(), params.temperature)
        evidence = [
            Evidence(ref=i + 1, chunk_id=d["chunk_id"], text=d["text"], score=float(w), metadata=dict(d["metadata"]))
            for i, (d, w) in enumerate(zip(docs, weights, strict=True))
        ]
        if replug_token_level(params, providers.llm.prefill, providers.llm.logprobs):
            prompts = [document_prompt(ev, str(state.get("query", ""))) for ev in evidence]
            text = _decode(providers, prompts, weights, params)
            note(f"token-level ensemble over {len(prompts)} documents")
            return {"answer": make_answer(text, evidence), "evidence": evidence}
        text, members = _vote(branches, weights)
        note(f"answer-level weighted vote; winner backed by branches {members}")
        if not text:
            return {"answer": Answer(text=REFUSAL, citations=[], refused=True), "evidence": evidence}
        answer = make_answer(text, evidence)
        refs = {evidence[i]["ref"] for i, b in enumerate(branches) if b["branch"] in members}
        cited = {c["ref"] for c in answer["citations"]}
        answer["citations"] += [
            Citation(ref=r, chunk_id=evidence[r - 1]["chunk_id"], method="attributed") for r in sorted(refs - cited)
        ]
        return {"answer": answer, "evidence": evidence}

    return run


class LLMFusionParams(OperatorParams):
    max_tokens: int = Field(256, gt=0, le=4096)
    max_evidence: int = Field(8, gt=0, le=50, description="passages given to the model with the branch answers")
    style: Literal["short", "long_form"] = Field(
        "short",
        description="short: one answer combining the partial answers; long_form: an answer covering every "
        "interpretation with its answer (Tree of Clarifications)",
    )


FUSION_PROMPTS = {
    "short": "{passages}\n\nPartial answers found for parts of the question:\n{partials}\n\nQuestion: {query}\n"
    "Write one short answer to the question that combines the partial answers, using only the passages, "
    "citing them like [1].\nAnswer:",
    "long_form": "{passages}\n\nThe question may be ambiguous. Its interpretations, each with the answer found for "
    "it:\n{partials}\n\nQuestion: {query}\nWrite a long-form answer that covers every interpretation: "
    "for each, say which reading it is and give its answer, citing the passages like [1]. Use only the "
    "passages.\nAnswer:",
}


class Partial(TypedDict):
    """One answered branch or kept tree node, as the fusion reads it: its question and answer, the passages it saw
    and what its own ``[n]`` markers name (reference -> chunk id)."""

    question: str
    answer: str
    hits: list[Hit]
    local: dict[int, str]


def partials(state: Mapping[str, Any]) -> list[Partial]:
    """The answered branches, or the answered tree nodes no pruning verdict dropped (recursive pattern)."""
    out: list[Partial] = []
    for b in _branches(state):
        ans = b.get("answer")
        if ans and not ans.get("refused"):
            out.append(
                Partial(
                    question=b["query"],
                    answer=ans["text"],
                    hits=list(b["candidates"]),
                    local={c["ref"]: c["chunk_id"] for c in ans.get("citations") or []},
                )
            )
    dropped = {v.get("target") for v in state.get("verdicts") or [] if v["decision"] == "stop" and v.get("target")}
    for node in state.get("tree") or []:
        if node["node_id"] not in dropped and node.get("answer") and not node.get("refused"):
            out.append(
                Partial(
                    question=node["question"],
                    answer=node["answer"],
                    hits=list(node.get("evidence") or []),
                    local={e["ref"]: e["chunk_id"] for e in pack_of(node)},
                )
            )
    return out


def fused_evidence(parts: Sequence[Partial], limit: int) -> list[Evidence]:
    """One evidence list for the fusion: first the chunks the partial answers cite (in their order), then the other
    passages they saw, at most ``limit``."""
    texts = {h["chunk_id"]: h for p in parts for h in p["hits"]}
    order = [p["local"][r] for p in parts for r in cited_refs(p["answer"]) if r in p["local"]]
    order += [h["chunk_id"] for p in parts for h in p["hits"]]
    evidence: list[Evidence] = []
    for cid in dict.fromkeys(c for c in order if c in texts):
        if len(evidence) >= limit:
            break
        h = texts[cid]
        evidence.append(
            Evidence(
                ref=len(evidence) + 1,
                chunk_id=cid,
                text=h["text"],
                score=float(h.get("score", 0.0)),
                metadata=dict(h["metadata"]),
            )
        )
    return evidence


@operator(
    "orchestration",
    "fusion",
    "llm_fusion",
    port=Port.FUSE,
    needs_llm=True,
    tags=("answer",),
    cost=lambda params, ctx: llm((0, 1)),
)
def llm_fusion(params: LLMFusionParams, providers: Providers) -> Operator:
    """LLM fusion: one answer synthesised from the branch (or tree-node) answers and their passages, with citations;
    each partial answer's own ``[n]`` are renumbered to the passages as the fusion numbers them."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        parts = partials(state)
        evidence = fused_evidence(parts, params.max_evidence)
        if not parts or not evidence:
            return {"answer": Answer(text=REFUSAL, citations=[], refused=True), "evidence": evidence}
        refs = {e["chunk_id"]: e["ref"] for e in evidence}
        listing = "\n".join(f"- {p['question']} -> {renumber(p['answer'], p['local'], refs)}" for p in parts)
        prompt = FUSION_PROMPTS[params.style].format(
            passages=format_evidence(evidence), partials=listing, query=state.get("query", "")
        )
        completion = providers.llm.complete(prompt, system=f"{SYSTEM} {DATA_RULE}", max_tokens=params.max_tokens)
        return {"answer": make_answer(completion.text, evidence), "evidence": evidence}

    return run


class PairsParams(OperatorParams):
    k: int = Field(10, gt=0, le=1000, description="hits kept")
    pool: int = Field(50, gt=0, le=1000, description="second passages considered by their own score (p2 of a pair)")
    pair_slots: int = Field(10, gt=0, le=1000, description="passages placed by their best pair before the rest")
    question_titles: bool = Field(True, description="add the chunks whose titles the question names (one lookup)")
    weights: HopWeights = Field(default_factory=HopWeights)


def _pairs_cost(params: PairsParams, ctx: CostContext) -> Cost:
    ctx.candidates = Span(min(1, ctx.candidates.lo), params.k)
    return retrievals(int(params.question_titles))


@operator("orchestration", "fusion", "pairs", port=Port.FUSE, tags=("candidates",), cost=_pairs_cost)
def pairs_fusion(params: PairsParams, providers: Providers) -> Operator:
    """Multi-hop fusion of branches (or tree nodes) that each followed one first-hop passage: every passage ranked by
    the pair it makes with a branch's first passage (HopWeights), over the first retrieval's candidates, the hops'
    hits and the chunks the question names (one lookup)."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        question = str(state.get("query", ""))
        branches = _branches(state)
        seeds = [b["candidates"][0] for b in branches if b["candidates"]]
        first = [*list(state.get("candidates") or []), *seeds]
        second = {b["candidates"][0]["chunk_id"]: list(b["candidates"][1:]) for b in branches if b["candidates"]}
        dropped = {v.get("target") for v in state.get("verdicts") or [] if v["decision"] == "stop" and v.get("target")}
        tree = [n for n in state.get("tree") or [] if n["node_id"] not in dropped]
        for node in tree:  # a tree grown by links: a node's source chunk leads to the node's passages
            if node.get("source"):
                second.setdefault(node["source"], []).extend(node.get("evidence") or [])
            else:
                first += hits_by_id(providers, node["chunk_ids"])
        sources = {h["chunk_id"]: h for h in first}
        seeds += [sources[c] for c in second if c in sources and c not in {h["chunk_id"] for h in seeds}]
        named = named_by_question(providers, question) if params.question_titles else []
        ranked = multihop_rank(
            providers,
            question,
            first,
            named=named,
            second=second,
            pool=params.pool,
            pair_slots=params.pair_slots,
            weights=params.weights,
            follow_links=False,
            k=params.k,
            sources=[h["chunk_id"] for h in seeds],
        )
        return {"candidates": ranked}

    return run


@operator("orchestration", "fusion", "sentences", port=Port.FUSE, tags=("answer",))
def sentences(params: NoParams, providers: Providers) -> Operator:
    """FLARE's answer from its accepted sentences (``rounds``): each sentence's [n] resolved against the evidence
    pack it was drafted from (the branch that fetched it) and renumbered into one evidence list, the union of those
    packs in the order the sentences first used them; a refusal when the sentences say nothing."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        shown = {h["chunk_id"]: h for b in state.get("branches") or [] for h in b["candidates"]}
        rounds = list(state.get("rounds") or [])
        evidence: list[Evidence] = []
        refs: dict[str, int] = {}
        for r in rounds:
            for cid in r["chunk_ids"]:
                if cid not in refs and cid in shown:
                    refs[cid] = len(evidence) + 1
                    h = shown[cid]
                    evidence.append(
                        Evidence(ref=refs[cid], chunk_id=cid, text=h["text"], score=h["score"], metadata=h["metadata"])
                    )
        written: list[str] = []
        citations: list[Citation] = []
        for r in rounds:
            pack = [
                Evidence(ref=i + 1, chunk_id=cid, text=shown[cid]["text"], score=0.0, metadata={})
                for i, cid in enumerate(r["chunk_ids"])
                if cid in shown
            ]
            text, cited = cite_pack(r["answer"], pack, refs)
            written.append(text)
            citations += [c for c in cited if c["ref"] not in {k["ref"] for k in citations}]
        text = clean_completion(" ".join(s for s in written if s))
        if is_refusal(text):
            return {"answer": Answer(text=text or REFUSAL, citations=[], refused=True), "evidence": evidence}
        return {"answer": Answer(text=text, citations=citations, refused=False), "evidence": evidence}

    return run
