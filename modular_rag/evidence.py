"""What a first retrieval found, as features a learned router decides from (``train-router --features evidence``).

The question alone does not say whether a second hop pays; what the first retrieval returned often does: whether one
passage already covers the question's terms, or the terms are spread over passages of different documents (a bridge
or a comparison), whether the question names the titles of the passages found, and how sharply the fused scores fall
after the first. Every feature is read from analysed terms (case, accents and punctuation folded, stop words dropped,
stemmed), so a mix of sources that differ by letter case cannot teach case; a passage without a title gives 0 for
the title features, so plain files (no titles) keep every other feature.
"""

from __future__ import annotations

from collections.abc import Sequence

from modular_rag.state import Hit
from modular_rag.text import Analyzer

__all__ = ["EVIDENCE_NAMES", "evidence_features", "TOP"]

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
]
"""The names of :func:`evidence_features`, in order (a saved router model records them)."""

_ANALYZER = Analyzer()


def _title(hit: Hit) -> str:
    return str((hit.get("metadata") or {}).get("title") or "")


def _document(hit: Hit) -> str:
    meta = hit.get("metadata") or {}
    return str(meta.get("doc_id") or hit["chunk_id"])


def evidence_features(query: str, hits: Sequence[Hit]) -> list[float]:
    """Features of the candidates a first retrieval found for ``query`` (best first), in :data:`EVIDENCE_NAMES`' order.

    * the first candidate's fused score and each next one's as a share of it (how sharply the ranking falls);
    * the share of the question's terms in the first passage, the first two, the first five and the first ten;
    * the best single passage's share among the first five, and how much more the five cover together (terms
      spread over passages: the question needs more than one);
    * how many different documents the first five come from (a share of five);
    * whether the question names the first passage's title, and how many of the first five's titles it names
      (a share of two: a comparison names both).

    Args:
        query: The question as asked.
        hits: The first retrieval's candidates, best first (any number; missing ones count as absent).

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
    ]
