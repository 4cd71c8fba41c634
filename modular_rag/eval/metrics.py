"""Retrieval metrics (via pytrec_eval, the TREC evaluation tool's Python binding) and answer metrics (SQuAD
exact match and token F1).

Retrieval runs map query id -> {document id: score}; higher scores rank first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from modular_rag.errors import MissingDependencyError
from modular_rag.text import exact_match, normalize_answer, token_f1

__all__ = [
    "retrieval_metrics",
    "normalize_answer",
    "exact_match",
    "token_f1",
    "best_answer_scores",
    "contains_answer",
    "mean",
]


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean (0 for no values)."""
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0


def _top(run: Mapping[str, float], k: int) -> dict[str, float]:
    return dict(sorted(run.items(), key=lambda kv: (-kv[1], kv[0]))[:k])


def retrieval_metrics(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    *,
    recall_at: Sequence[int] = (10, 100),
) -> dict[str, dict[str, float]]:
    """Per-query nDCG@10, MRR@10 and recall@k, computed by pytrec_eval; key ``"mean"`` holds the means.

    Queries in ``qrels`` that the run lacks count as zero (trec_eval's ``-c`` convention).

    Raises:
        MissingDependencyError: If pytrec-eval-terrier is not installed.
    """
    try:
        import pytrec_eval
    except ImportError as exc:
        raise MissingDependencyError("retrieval metrics need pytrec-eval: pip install 'modular-rag[eval]'") from exc
    qrels = {q: dict(d) for q, d in qrels.items()}
    full = {q: {d: float(s) for d, s in run.get(q, {}).items()} for q in qrels}
    measures = {"ndcg_cut.10"} | {f"recall.{k}" for k in recall_at}
    padded = {q: r or {"__none__": 0.0} for q, r in full.items()}
    scores = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(padded)
    top10 = {q: _top(r, 10) or {"__none__": 0.0} for q, r in full.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    per_query: dict[str, dict[str, float]] = {}
    for q in qrels:
        row = {"ndcg@10": scores[q]["ndcg_cut_10"], "mrr@10": rr[q]["recip_rank"]}
        for k in recall_at:
            row[f"recall@{k}"] = scores[q][f"recall_{k}"]
        per_query[q] = row
    names = list(next(iter(per_query.values())).keys()) if per_query else []
    per_query["mean"] = {name: mean(r[name] for q, r in per_query.items() if q != "mean") for name in names}
    return per_query


def best_answer_scores(prediction: str, answers: Sequence[str]) -> tuple[float, float]:
    """(EM, F1) against the best-matching accepted answer."""
    if not answers:
        return 0.0, 0.0
    return max(exact_match(prediction, a) for a in answers), max(token_f1(prediction, a) for a in answers)


def contains_answer(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the prediction contains one of the gold answers as a whole phrase (after SQuAD normalisation): the
    measure of a long answer against short gold phrases."""
    text = f" {normalize_answer(prediction)} "
    return float(any(normalize_answer(a) and f" {normalize_answer(a)} " in text for a in answers))
