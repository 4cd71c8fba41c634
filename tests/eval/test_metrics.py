"""Metrics: pytrec_eval figures cross-checked by hand; SQuAD answer normalisation."""

from __future__ import annotations

import math

import pytest

from modular_rag.eval.metrics import best_answer_scores, exact_match, retrieval_metrics, token_f1

pytestmark = pytest.mark.unit


def test_retrieval_metrics_by_hand() -> None:
    qrels = {"q1": {"d1": 1, "d4": 1}, "q2": {"d9": 1}}
    run = {"q1": {"d3": 3.0, "d1": 2.0, "d2": 1.0}, "q2": {"d5": 1.0}}
    m = retrieval_metrics(qrels, run, recall_at=(1, 10))
    dcg = 1 / math.log2(3)  # d1 at rank 2
    idcg = 1 / math.log2(2) + 1 / math.log2(3)  # two relevant documents at ranks 1 and 2
    assert m["q1"]["ndcg@10"] == pytest.approx(dcg / idcg)
    assert m["q1"]["mrr@10"] == pytest.approx(1 / 2)
    assert m["q1"]["recall@10"] == pytest.approx(1 / 2) and m["q1"]["recall@1"] == 0.0
    assert m["q2"] == {"ndcg@10": 0.0, "mrr@10": 0.0, "recall@1": 0.0, "recall@10": 0.0}
    assert m["mean"]["ndcg@10"] == pytest.approx(dcg / idcg / 2)


def test_mrr_is_cut_at_ten() -> None:
    run = {"q": {f"d{i}": float(100 - i) for i in range(11)}}  # the relevant document is 11th
    assert retrieval_metrics({"q": {"d10": 1}}, run)["q"]["mrr@10"] == 0.0


def test_missing_queries_count_as_zero() -> None:
    assert retrieval_metrics({"q1": {"d": 1}, "q2": {"d": 1}}, {"q1": {"d": 1.0}})["mean"]["ndcg@10"] == 0.5


def test_squad_normalisation() -> None:
    assert exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert token_f1("in the year 1889", "1889") == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert best_answer_scores("chromoly steel", ["steel", "chromoly steel"]) == (1.0, 1.0)
    assert best_answer_scores("x", []) == (0.0, 0.0)
