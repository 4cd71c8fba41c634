"""Evaluation runner: per-query records and the summary over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modular_rag.eval.datasets import Query
from modular_rag.eval.runner import FlowResult, _record

pytestmark = pytest.mark.unit


def test_a_failed_query_is_recorded_as_an_error_not_a_score() -> None:
    failed = _record(Query("q1", "What frames last?", ("steel",)), RuntimeError("llm server down"), 12.0)
    assert failed.error == "RuntimeError: llm server down"
    assert failed.supported is None and failed.ms == 12.0 and failed.docs == []
    evidence = [
        {
            "ref": 1,
            "chunk_id": "c1",
            "text": "Chromoly steel frames last for decades.",
            "score": 1.0,
            "metadata": {"doc_id": "d1"},
        }
    ]
    answer = {
        "text": "Chromoly steel frames last for decades [1].",
        "citations": [{"ref": 1, "chunk_id": "c1", "method": "model"}],
        "refused": False,
    }
    ok = _record(
        Query("q2", "Which frames last for decades?", ("chromoly steel",)),
        {"answer": answer, "evidence": evidence, "ledger": []},
        5.0,
    )
    assert ok.error is None and ok.supported == 1.0 and ok.contains == 1.0
    assert ok.citations == [{"ref": 1, "chunk_id": "c1", "method": "model", "doc_id": "d1", "verdict": "supported"}]
    summary = FlowResult("flow", "linear", [failed, ok], {}, 1.0).summary()
    assert summary["queries"] == 2.0 and summary["errors"] == 1.0
    assert summary["supported"] == 1.0  # the failed query has no support share to average
    assert summary["contains"] == 0.5 and summary["contains_backed"] == 0.5


def test_a_claim_its_citation_does_not_support_is_recorded_unsupported() -> None:
    evidence = [
        {
            "ref": 1,
            "chunk_id": "c1",
            "text": "Error E07 means speed sensor signal lost.",
            "score": 1.0,
            "metadata": {"doc_id": "e07"},
        }
    ]
    answer = {
        "text": "E07 means a malfunctioning motor controller [1].",
        "citations": [{"ref": 1, "chunk_id": "c1", "method": "model"}],
        "refused": False,
    }
    rec = _record(
        Query("q", "What does error code E07 mean?", ("speed sensor signal lost",)),
        {"answer": answer, "evidence": evidence, "ledger": []},
        1.0,
    )
    assert rec.supported == 0.0 and rec.contains == 0.0 and not rec.backed
    assert rec.citations[0]["verdict"] == "unsupported" and "new words" in rec.citations[0]["reason"]


def test_scores_only_what_the_flow_returned_in_its_order() -> None:
    def hit(doc: str) -> dict:
        return {"ref": 1, "chunk_id": f"{doc}#0", "text": doc, "score": 1.0, "metadata": {"doc_id": doc}}

    shown = {"evidence": [hit("d2")], "candidates": [hit("d1"), hit("d2"), hit("d3")], "ledger": []}
    record = _record(Query("q", "q?"), shown, 1.0)
    assert record.docs == ["d2"] and record.scored == "evidence"  # d1 was retrieved but never shown to the model
    retrieval_only = _record(Query("q", "q?"), {"candidates": [hit("d1"), hit("d2")], "ledger": []}, 1.0)
    assert retrieval_only.docs == ["d1", "d2"] and retrieval_only.scored == "candidates"
    assert FlowResult("f", "linear", [record, retrieval_only], {}, 1.0).scored == "evidence, candidates"


def test_citation_markers_are_not_scored_as_answer_words() -> None:
    evidence = [
        {
            "ref": 1,
            "chunk_id": "c1",
            "text": "A complete size 54 weighs 7.6 kg.",
            "score": 1.0,
            "metadata": {"doc_id": "tw-900"},
        }
    ]
    answer = {"text": "7.6 kg [1]", "citations": [{"ref": 1, "chunk_id": "c1", "method": "quoted"}], "refused": False}
    rec = _record(
        Query("q", "How much does it weigh?", ("7.6 kg",)), {"answer": answer, "evidence": evidence, "ledger": []}, 1.0
    )
    assert (rec.em, rec.f1, rec.contains) == (1.0, 1.0, 1.0)


def test_each_question_is_judged_right_or_wrong_with_the_reason() -> None:
    from modular_rag.eval.datasets import BeirDataset
    from modular_rag.eval.runner import QueryRecord, answered_right, judge_right

    def record(qid: str, *, contains: float = 1.0, refused: bool = False, cited: str = "d1", docs=("d1",)) -> Any:
        citations = [{"doc_id": cited}] if cited else []
        return QueryRecord(qid, "x", refused, 0, 0, list(docs), 0, 0, 0, 1, 1.0, None, contains, citations)

    asked = Query("q", "What frames last?", ("steel",))
    gold = {"d1": 1}
    assert judge_right(asked, gold, record("q")) == (1.0, [])
    assert judge_right(asked, gold, record("q", contains=0.0))[1] == [
        "no gold value: the answer holds none of the gold answers"
    ]
    value, why = judge_right(asked, gold, record("q", cited="d2", docs=("d2", "d3")))
    assert value == 0.0 and why == [
        "no gold citation: no citation names a passage of a gold document",
        "gold document not retrieved: none was among the 2 documents the run retrieved",
    ]
    assert (
        judge_right(asked, gold, record("q", refused=True, contains=0.0))[1][0] == "refused a question the set answers"
    )
    unanswerable = Query("u", "Who won in 1850?")
    assert judge_right(unanswerable, {}, record("u", refused=True)) == (1.0, [])
    assert judge_right(unanswerable, {}, record("u"))[0] == 0.0
    assert judge_right(Query("c", "a reworded sentence"), gold, record("c")) == (None, [])  # retrieval only
    dataset = BeirDataset(Path("."), "dev", [asked, unanswerable], {"q": gold})
    assert answered_right(dataset, [record("q"), record("u")]) == 0.5
