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


@pytest.mark.unit
def test_the_quality_cost_plot_names_the_data_and_does_not_stretch_one_question(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from modular_rag.eval.report import plot_quality_cost
    from modular_rag.eval.runner import FlowResult, QueryRecord

    def result(name: str, hits: int) -> FlowResult:  # 24 questions, `hits` of them answered right
        records = [
            QueryRecord(
                qid=str(i),
                answer="a",
                refused=False,
                em=0.0,
                f1=float(i < hits),
                docs=[],
                llm_calls=1,
                prompt_tokens=0,
                completion_tokens=0,
                retrievals=2,
                ms=1.0,
            )
            for i in range(24)
        ]
        return FlowResult(name=name, pattern="linear", records=records, retrieval={}, seconds=1.0)

    seen = {}
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen["title"], seen["ylim"] = fig.axes[0].get_title(), fig.axes[0].get_ylim()
        return original(fig, *args, **kwargs)

    plt.Figure.savefig = keep  # type: ignore[method-assign]
    try:
        plot_quality_cost([result("a", 18), result("b", 19)], tmp_path / "p.png", dataset="demo")
    finally:
        plt.Figure.savefig = original  # type: ignore[method-assign]
    assert seen["title"] == "f1 vs llm_calls (demo, 24 questions)"
    low, high = seen["ylim"]
    assert high - low >= 0.2 and low >= -0.05 and high <= 1.05  # one question (0.042) is a small step here
