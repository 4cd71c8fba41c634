"""Evaluation runner: per-query records and the summary over them."""

from __future__ import annotations

import pytest

from modular_rag.eval.runner import FlowResult, _record

pytestmark = pytest.mark.unit


def test_a_failed_query_is_recorded_as_an_error_not_a_score() -> None:
    failed = _record("q1", ["steel"], RuntimeError("llm server down"), 12.0)
    assert failed.error == "RuntimeError: llm server down"
    assert failed.grounded is None and failed.ms == 12.0 and failed.docs == []
    evidence = [{"ref": 1, "chunk_id": "c1", "text": "Chromoly steel frames last for decades.", "score": 1.0,
                 "metadata": {"doc_id": "d1"}}]  # fmt: skip
    answer = {"text": "Chromoly steel frames last for decades [1].", "citations": [{"ref": 1, "chunk_id": "c1"}],
              "refused": False}  # fmt: skip
    ok = _record("q2", ["chromoly steel"], {"answer": answer, "evidence": evidence, "ledger": []}, 5.0)
    assert ok.error is None and ok.grounded == 1.0
    summary = FlowResult("flow", "linear", [failed, ok], {}, 1.0).summary()
    assert summary["queries"] == 2.0 and summary["errors"] == 1.0
    assert summary["grounded"] == 1.0  # the failed query has no groundedness to average


def test_scores_only_what_the_flow_returned_in_its_order() -> None:
    def hit(doc: str) -> dict:
        return {"ref": 1, "chunk_id": f"{doc}#0", "text": doc, "score": 1.0, "metadata": {"doc_id": doc}}

    shown = {"evidence": [hit("d2")], "candidates": [hit("d1"), hit("d2"), hit("d3")], "ledger": []}
    record = _record("q", [], shown, 1.0)
    assert record.docs == ["d2"] and record.scored == "evidence"  # d1 was retrieved but never shown to the model
    retrieval_only = _record("q", [], {"candidates": [hit("d1"), hit("d2")], "ledger": []}, 1.0)
    assert retrieval_only.docs == ["d1", "d2"] and retrieval_only.scored == "candidates"
    assert FlowResult("f", "linear", [record, retrieval_only], {}, 1.0).scored == "evidence, candidates"
