"""Multi-hop retrieval without a language model: the hops a document graph (the index's link table) or a second
search allow, and the pair ranking that decides which passages a multi-hop question needs.

A multi-hop question's second passage is usually about an entity the first one names (the bridge). The operators
that hop (``link_hop`` in retrieval, ``pairs`` in fusion, the ``links`` and ``evidence`` hops of
:mod:`operators.hops` that the iterative, branching and recursive patterns hold) all rank with
:func:`multihop_rank`: each passage's own score against the question, and the pairs (first passage, the passage it
leads to) that a link or a second search makes, so the passages of the best pairs come first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from modular_rag.index import chunk_vectors
from modular_rag.providers import Providers
from modular_rag.registry import OperatorParams
from modular_rag.state import Hit
from modular_rag.text import split_sentences
from modular_rag.trace import record

__all__ = ["HopWeights", "HopParams", "hits_by_id", "named_by_question", "linked_from", "multihop_rank", "hop"]


class HopWeights(BaseModel):
    """The weights of multi-hop ranking (chosen on a fit split of HotpotQA dev; ``benchmarks/README.md``).

    A passage's own score is ``u = dense * cosine(q, p) + sparse * BM25(q, p) / max BM25 + named * [the question
    names p's title]``; a pair of a first-hop passage p1 and a second p2 scores ``u(p1) + u(p2) + link * [p1
    mentions p2's title] + context * [linked] * (share of the question's IDF weight in p1's sentences that mention
    p2) - redundancy * cosine(p1, p2)``.
    """

    model_config = ConfigDict(extra="forbid")

    dense: float = Field(1.0, ge=0.0, le=10.0, description="embedding cosine of question and passage")
    sparse: float = Field(1.2, ge=0.0, le=10.0, description="BM25 of the question, over the best BM25 in hand")
    named: float = Field(0.9, ge=0.0, le=10.0, description="the question names the passage's title")
    link: float = Field(1.0, ge=0.0, le=10.0, description="the first passage mentions the second's title")
    context: float = Field(0.5, ge=0.0, le=10.0, description="question terms around that mention")
    redundancy: float = Field(0.2, ge=0.0, le=10.0, description="penalty: the pair's passages say the same")


def hits_by_id(providers: Providers, chunk_ids: Sequence[str]) -> list[Hit]:
    """The index's chunks with these ids, as hits (ids the index does not have are skipped), read by key."""
    return providers.index.hits(chunk_ids)


def named_by_question(providers: Providers, question: str) -> list[Hit]:
    """The chunks that define an anchor the question names: one lookup in the link table (one retrieval)."""
    record(retrievals=1)
    return providers.index.hits(sorted(providers.index.links.named_in(question)))


def linked_from(providers: Providers, sources: Sequence[Hit]) -> dict[str, list[Hit]]:
    """For each source chunk, the chunks that define an anchor its text mentions (the document graph): one lookup in
    the link table for all of them (one retrieval)."""
    record(retrievals=1)
    index = providers.index
    links = index.links.outlinks([h["chunk_id"] for h in sources])
    found = index.chunks(sorted({c for targets in links.values() for c in targets}))
    return {
        source: [Hit(**{**found[c], "channel": "link"}) for c in targets if c in found]
        for source, targets in links.items()
    }


def _context_share(providers: Providers, question: str, source: Hit, target: Hit) -> float:
    """The share of the question's IDF weight found in the source's sentences that mention the target's title."""
    index = providers.index
    links = index.links
    around: set[str] = set()
    for sentence in split_sentences(source["text"]):
        if any(target["chunk_id"] in hit for _, hit in links.mentions(sentence, exclude=source["chunk_id"])):
            around |= set(index.analyzer(sentence))
    around -= set(index.analyzer(str(target["metadata"].get("title") or "")))
    terms = set(index.analyzer(question))
    idf = index.idfs(sorted(terms))
    total = sum(idf.values())
    return sum(idf[t] for t in terms & around) / total if total > 0 else 0.0


def multihop_rank(
    providers: Providers,
    question: str,
    candidates: Sequence[Hit],
    *,
    named: Sequence[Hit] = (),
    second: Mapping[str, Sequence[Hit]] | None = None,
    beam: int = 3,
    pool: int = 50,
    pair_slots: int = 10,
    weights: HopWeights | None = None,
    follow_links: bool = True,
    k: int | None = None,
    sources: Sequence[str] | None = None,
) -> list[Hit]:
    """Rank passages for a multi-hop question by the pairs they make (see :class:`HopWeights`).

    Args:
        providers: The providers (stored vectors, BM25 rescoring, the link table).
        question: The question.
        candidates: First-hop hits (for example the union of dense and BM25 top-50s).
        named: Chunks the question names (:func:`named_by_question`), added to the candidates.
        second: Second-hop hits per first-hop chunk id (``linked_from``, or a retrieval with the question and the
            passage); with ``follow_links`` and no ``second``, the links of the ``beam`` best passages are looked up.
        beam: First passages p1 considered: the best ``beam`` by their own score.
        pool: Second passages p2 considered: the best ``pool`` by their own score, plus every second-hop hit.
        pair_slots: The ranking starts with the passages of the best pairs, until this many; the rest follow by
            their own score.
        weights: :class:`HopWeights`.
        follow_links: Look up the links of the beam when ``second`` is not given (one retrieval).
        k: Keep this many (all when ``None``).
        sources: The first passages p1 (chunk ids), instead of the best ``beam`` (a pattern that fanned out over
            them).

    Returns:
        Hits with ``channel`` ``multihop`` and descending scores.
    """
    w = weights or HopWeights()
    hits: dict[str, Hit] = {}
    for h in [*candidates, *named]:
        hits.setdefault(h["chunk_id"], h)
    named_ids = {h["chunk_id"] for h in named}

    def own(new: list[Hit]) -> dict[str, float]:
        if not new:
            return {}
        q = providers.encoder.encode_query(question)
        cos = chunk_vectors(providers, new) @ q
        bm = providers.index.score(question, new)
        return {
            h["chunk_id"]: float(w.dense * c + w.sparse * b / top_bm25 + w.named * (h["chunk_id"] in named_ids))
            for h, c, b in zip(new, cos.tolist(), bm.tolist(), strict=True)
        }

    first = list(hits.values())
    top_bm25 = max(float(providers.index.score(question, first).max(initial=0.0)), 1e-9)
    u = own(first)
    order = sorted(u, key=lambda c: (-u[c], c))
    p1s = [c for c in sources if c in u] if sources is not None else order[:beam]
    if second is None:
        second = linked_from(providers, [hits[c] for c in p1s]) if follow_links and p1s else {}
    targets: dict[str, set[str]] = {}
    for source, found in second.items():
        for h in found:
            hits.setdefault(h["chunk_id"], h)
            targets.setdefault(source, set()).add(h["chunk_id"])
    u.update(own([hits[c] for c in {t for ts in targets.values() for t in ts} if c not in u]))
    order = sorted(u, key=lambda c: (-u[c], c))
    p2s = list(dict.fromkeys([*order[:pool], *sorted({t for ts in targets.values() for t in ts})]))
    if not p1s or len(p2s) < 2:
        return [
            Hit(**{**hits[c], "score": float(len(order) - i), "channel": "multihop"})
            for i, c in enumerate(order[:k] if k else order)
        ]
    vectors = chunk_vectors(providers, [hits[c] for c in p2s])
    at = {c: i for i, c in enumerate(p2s)}
    v1 = np.vstack([vectors[at[c]] if c in at else chunk_vectors(providers, [hits[c]])[0] for c in p1s])
    pair = np.array([u[c] for c in p1s])[:, None] + np.array([u[c] for c in p2s])[None, :]
    pair -= w.redundancy * (v1 @ vectors.T)
    for i, c1 in enumerate(p1s):
        for c2 in targets.get(c1, ()):
            bonus = w.link
            if w.context:
                bonus += w.context * _context_share(providers, question, hits[c1], hits[c2])
            pair[i, at[c2]] += bonus
        if c1 in at:
            pair[i, at[c1]] = -np.inf
    flat = sorted(
        (-float(pair[i, j]), p1s[i], p2s[j])
        for i in range(len(p1s))
        for j in range(len(p2s))
        if np.isfinite(pair[i, j])
    )
    ranked: list[str] = []
    for _, a, b in flat:
        for c in (a, b):
            if c not in ranked:
                ranked.append(c)
        if len(ranked) >= pair_slots:
            break
    ranked += [c for c in order if c not in ranked]
    ranked = ranked[:k] if k else ranked
    return [Hit(**{**hits[c], "score": float(len(ranked) - i), "channel": "multihop"}) for i, c in enumerate(ranked)]


class HopParams(OperatorParams):
    """How a multi-hop step ranks: see :func:`multihop_rank` and :class:`HopWeights`."""

    k: int = Field(10, gt=0, le=1000, description="hits kept")
    beam: int = Field(3, gt=0, le=50, description="first-hop passages whose links are followed (p1 of a pair)")
    pool: int = Field(50, gt=0, le=1000, description="second passages considered by their own score (p2 of a pair)")
    pair_slots: int = Field(10, gt=0, le=1000, description="passages placed by their best pair before the rest")
    question_titles: bool = Field(True, description="add the chunks whose titles the question names (one lookup)")
    weights: HopWeights = Field(default_factory=HopWeights)


def hop(
    providers: Providers,
    question: str,
    first: Sequence[Hit],
    params: HopParams,
    *,
    second: Mapping[str, Sequence[Hit]] | None = None,
) -> list[Hit]:
    """One multi-hop step after a first retrieval: the chunks the question names (``question_titles``, one lookup),
    then the second hop: ``second`` when given (hits found from a first-hop passage, for example by searching with
    the question and that passage), else the chunks the best first-hop passages link to (one lookup); everything
    ranked by pairs (:func:`multihop_rank`)."""
    named = named_by_question(providers, question) if params.question_titles else []
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
        follow_links=second is None,
        k=params.k,
    )
