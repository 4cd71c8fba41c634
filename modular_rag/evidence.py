"""What a first retrieval found, as features a learned router decides from (``train-router --features evidence``).

The question alone does not say whether a second hop pays; what the first retrieval returned often does: whether one
passage already covers the question's terms, or the terms are spread over passages of different documents (a bridge or a
comparison), whether the question names the titles of the passages found, and how sharply the fused scores fall after
the first; and, through the index's link table (:mod:`modular_rag.links`), whether the question names a document the
first retrieval missed and how many documents the passages found point to that it did not find (a bridge the single shot
did not cross). Every feature is read from analysed terms (case, accents and punctuation folded, stop words dropped,
stemmed), so a mix of sources that differ by letter case cannot teach case; a passage without a title gives 0 for the
title features, so plain files (no titles) keep every other feature; the link features read every anchor the link table
holds (titles, headings, the subjects first sentences define, names, codes), so plain files have them too, and an index
without a link table gives 0 for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from modular_rag.state import Hit
from modular_rag.text import Analyzer

__all__ = ["EVIDENCE_NAMES", "TOP", "evidence_features", "link_features"]

TOP = 5
"""How many of the first retrieval's candidates the features read."""

EVIDENCE_NAMES = [
    "score top-1",
    *[f"score {i}/1" for i in range(2, TOP + 1)],
    "covered by top-1",
    "covered by top-2",
    f"covered by top-{TOP}",
    "covered by top-10",
    "best passage covers",
    f"spread over top-{TOP}",
    f"documents in top-{TOP}",
    "top-1 title named",
    f"titles named in top-{TOP}",
    f"anchors named, outside top-{TOP}",
    f"anchors named, in top-{TOP}",
    "anchors top-2 link out to",
    f"anchors top-{TOP} link out to",
    "link-outs sharing a question term",
]
"""The names of :func:`evidence_features`, in order (a saved router model records them)."""

_ANALYZER = Analyzer()


def _title(hit: Hit) -> str:
    return str((hit.get("metadata") or {}).get("title") or "")


def _document(hit: Hit) -> str:
    meta = hit.get("metadata") or {}
    return str(meta.get("doc_id") or hit["chunk_id"])


def evidence_features(query: str, hits: Sequence[Hit], links: Any = None) -> list[float]:
    """Features of the candidates a first retrieval found for ``query`` (best first), in :data:`EVIDENCE_NAMES`' order.

    * the first candidate's fused score and each next one's as a share of it (how sharply the ranking falls);
    * the share of the question's terms in the first passage, the first two, the first five and the first ten;
    * the best single passage's share among the first five, and how much more the five cover together (terms
      spread over passages: the question needs more than one);
    * how many different documents the first five come from (a share of five);
    * whether the question names the first passage's title, and how many of the first five's titles it names
      (a share of two: a comparison names both);
    * with ``links``, :func:`link_features`.

    Args:
        query: The question as asked.
        hits: The first retrieval's candidates, best first (any number; missing ones count as absent).
        links: The index's link table (:class:`~modular_rag.links.StoredLinks`); ``None`` gives 0 for the link
            features.

    Returns:
        One value per name of :data:`EVIDENCE_NAMES`.
    """
    terms = set(_ANALYZER(query))
    top = list(hits[:10])
    texts = [set(_ANALYZER(f"{_title(h)} {h.get('text', '')}")) for h in top]
    scores = [float(h.get("score", 0.0)) for h in top[:TOP]]
    first = scores[0] if scores else 0.0
    ratios = [(scores[i] / first if first > 0 else 0.0) if i < len(scores) else 0.0 for i in range(1, TOP)]

    def covered(n: int) -> float:
        if not terms:
            return 0.0
        union: set[str] = set().union(*texts[:n]) if texts[:n] else set()
        return len(terms & union) / len(terms)

    best = max((len(terms & t) / len(terms) for t in texts[:TOP]), default=0.0) if terms else 0.0
    named = [
        bool(title_terms) and title_terms <= terms for title_terms in (set(_ANALYZER(_title(h))) for h in top[:TOP])
    ]
    documents = len({_document(h) for h in top[:TOP]}) / TOP
    return [
        first,
        *ratios,
        covered(1),
        covered(2),
        covered(TOP),
        covered(10),
        best,
        covered(TOP) - best,
        documents,
        float(bool(named) and named[0]),
        min(sum(named), 2) / 2.0,
        *link_features(terms, query, top[:TOP], links),
    ]


def link_features(terms: set[str], query: str, top: Sequence[Hit], links: Any) -> list[float]:
    """What the link table says of the first passages: how many anchors the question names whose documents are all
    outside them (at most 3) and inside (at most 3); how many anchors the first two and the first ``TOP`` passages
    mention whose documents they do not include (log 1 + n: a bridge not crossed), and how many of the latter share a
    term with the question (at most 5). Zeros without a link table or passages; a passage the index does not hold
    mentions nothing.

    Args:
        terms: The question's analysed terms.
        query: The question as asked (anchors are matched in any letter case).
        top: The first passages, best first.
        links: The link table, or ``None``.
    """
    if links is None or not top:
        return [0.0] * 5
    found = {_document(h) for h in top}
    named = links.mentions(query)
    outs = links.link_outs([h["chunk_id"] for h in top])  # the mentions recorded at indexing, in one read
    said = [outs.get(h["chunk_id"], []) for h in top]
    document = links.documents(sorted({i for _, ids in [*named, *(m for s in said for m in s)] for i in ids}))

    def outside(ids: frozenset[str]) -> bool:
        return bool(ids) and not any(document.get(i) in found for i in ids)

    missed = {alias for alias, ids in named if outside(ids)}
    held = {alias for alias, ids in named if ids and not outside(ids)}
    out2 = {alias for mentioned in said[:2] for alias, ids in mentioned if outside(ids)}
    out = {alias for mentioned in said for alias, ids in mentioned if outside(ids)}
    sharing = [alias for alias in out if set(_ANALYZER(" ".join(alias))) & terms]
    return [
        float(min(len(missed), 3)),
        float(min(len(held), 3)),
        math.log1p(len(out2)),
        math.log1p(len(out)),
        float(min(len(sharing), 5)),
    ]
