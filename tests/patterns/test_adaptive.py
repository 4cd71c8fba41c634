"""Adaptive pattern: FLARE (token-confidence gate) and Self-RAG-style control; both bounded by max_steps."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import OperatorSpec, load_config
from modular_rag.errors import OperatorError
from patterns.adaptive import masked_query
from tests.conftest import fake_llm
from tests.patterns.conftest import snapshot, template


def never_stop(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"verdicts": [{"judge": "never", "decision": "continue", "reason": "test", "step": state.get("step", 0)}]}


@pytest.mark.unit
def test_template_graphs_match_snapshots() -> None:
    mermaid = build_flow(template("adaptive")).get_graph().draw_mermaid()
    assert mermaid == snapshot("adaptive-flare", mermaid)
    self_rag = template("adaptive", params={"mode": "self_rag"}, operators={"judge": "llm_judge", "draft": "none"})
    mermaid = build_flow(self_rag).get_graph().draw_mermaid()
    assert mermaid == snapshot("adaptive-self-rag", mermaid)


@pytest.mark.unit
def test_masked_query_drops_low_confidence_tokens() -> None:
    tokens = [" The", " TW", "-550", " weighs", " 9", ".8", " kg"]
    logprobs = [-0.1, -0.2, -0.1, -0.3, -3.0, -2.5, -0.1]
    assert masked_query("How heavy?", tokens, logprobs, 0.4) == "The TW-550 weighs kg"


@pytest.mark.integration
def test_flare_without_logprobs_names_the_judge(demo_dir: Path) -> None:
    config = load_config(template("adaptive", demo_dir))
    config.providers.llm = fake_llm("The TW-550 weighs 9.8 kg.")
    with pytest.raises(OperatorError, match="token_confidence judge: the draft carries no token log-probabilities"):
        build_flow(config).invoke({"query": "How much does the TW-550 weigh?"})


@pytest.mark.integration
@pytest.mark.parametrize("steps", [1, 3])
def test_flare_ends_at_max_steps_when_the_judge_never_accepts(demo_dir: Path, steps: int) -> None:
    config = load_config(template("adaptive", demo_dir, params={"mode": "flare", "max_steps": steps}))
    config.providers.llm = fake_llm("The bike is light. It is fast. It is red. It is new. It is good.")
    config.operators["judge"] = OperatorSpec.from_object(never_stop)
    out = build_flow(config).invoke({"query": "Tell me about the TW-550."})
    assert out["step"] == steps
    assert sum(e["node"] == "requery" for e in out["trace"]) == steps  # every sentence retrieved again


@pytest.mark.integration
@pytest.mark.parametrize("steps", [1, 3])
def test_self_rag_ends_at_max_steps_when_the_judge_never_accepts(demo_dir: Path, steps: int) -> None:
    config = load_config(
        template(
            "adaptive",
            demo_dir,
            params={"mode": "self_rag", "max_steps": steps},
            operators={"rerank": "none", "rewrite": "none", "gate": "none", "draft": "none"},
        )
    )
    config.providers.llm = fake_llm("E07 means the speed sensor signal was lost [1].")
    config.operators["judge"] = OperatorSpec.from_object(never_stop)
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert out["step"] == steps and len(out["rounds"]) == steps


@pytest.mark.integration
def test_self_rag_gate_can_skip_retrieval(demo_dir: Path) -> None:
    config = load_config(
        template(
            "adaptive",
            demo_dir,
            params={"mode": "self_rag", "max_steps": 2},
            operators={"judge": {"name": "llm_judge"}, "draft": "none"},
        )
    )
    config.providers.llm = fake_llm("No", "Paris is the capital of France.", "Yes")
    out = build_flow(config).invoke({"query": "What is the capital of France?"})
    nodes = [e["node"] for e in out["trace"]]
    assert nodes[0] == "gate" and "retrieve" not in nodes
    assert out["answer"]["text"] == "Paris is the capital of France."
    # no passages, nothing to support: the support judge accepts without asking the model
    assert [v["reason"] for v in out["verdicts"]] == ["needs_retrieval:no", "supported:no_passages"]
    assert sum(e["llm_calls"] for e in out["ledger"] if e["node"] == "judge") == 0


@pytest.mark.integration
def test_flare_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    # tau 0.99: some token of the first draft is below it, so FLARE must re-query with that draft, masked
    config = template(
        "adaptive",
        demo_dir,
        params={"mode": "flare", "max_steps": 2, "mask_below": 0.3},
        operators={"judge": {"name": "token_confidence", "params": {"tau": 0.99}}},
    )
    question = "What does error code E07 mean on the e-bike display?"
    drafts, final = [], {}
    for mode, chunk in build_flow(config).stream({"query": question}, stream_mode=["updates", "values"]):
        if mode == "values":
            final = chunk
        elif "draft" in chunk:
            drafts.append(chunk["draft"]["draft"])
    out = final
    assert 1 <= out["step"] <= 2 and out["answer"]["text"].strip()
    judged = [v for v in out["verdicts"] if v["judge"] == "token_confidence"]
    assert judged and all(0.0 <= v["score"] <= 1.0 for v in judged)
    assert judged[0]["decision"] == "continue"
    first = drafts[0]
    masked = masked_query(question, first["tokens"], first["logprobs"], 0.3)
    assert out["branches"][1]["query"] == masked  # the re-query searched with the masked draft
    assert all(c["chunk_id"] in {e["chunk_id"] for e in out["evidence"]} for c in out["answer"]["citations"])


@pytest.mark.integration
def test_self_rag_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    config = template(
        "adaptive",
        demo_dir,
        params={"mode": "self_rag", "max_steps": 2},
        operators={
            "draft": "none",
            "gate": "none",
            "judge": "reflection",
            "generate": {"name": "cited_answer", "params": {"max_tokens": 48, "without_evidence": "answer"}},
            "rerank": {"name": "llm_critique", "params": {"max_candidates": 4}},
        },
    )
    out = build_flow(config).invoke({"query": "What does error code E12 mean on the display?"})
    assert 1 <= out["step"] <= 2 and out["answer"]["text"].strip()
    reflections = [v for v in out["verdicts"] if v["judge"] == "reflection"]
    assert len(reflections) == out["step"]  # one per round
    for v in reflections:  # with passages, both the support and the usefulness questions are asked
        assert re.fullmatch(r"supported:(yes|no|unclear),useful:(yes|no|unclear)", v["reason"]), v["reason"]


@pytest.mark.integration
def test_self_rag_without_passages_judges_usefulness_only(demo_dir: Path) -> None:
    config = load_config(
        template(
            "adaptive",
            demo_dir,
            params={"mode": "self_rag", "max_steps": 2},
            operators={"draft": "none", "judge": "reflection"},
        )
    )
    config.providers.llm = fake_llm("No", "Paris is the capital of France.", "Yes")  # gate, answer, useful?
    out = build_flow(config).invoke({"query": "What is the capital of France?"})
    assert "retrieve" not in [e["node"] for e in out["trace"]]
    [v] = [v for v in out["verdicts"] if v["judge"] == "reflection"]
    assert (v["decision"], v["reason"]) == ("stop", "supported:no_passages,useful:yes")
    judge_calls = sum(e["llm_calls"] for e in out["ledger"] if e["node"] == "judge")
    assert judge_calls == 1  # nothing to support, so only usefulness was asked


@pytest.mark.integration
def test_self_rag_retrieves_again_when_the_answer_is_not_useful(demo_dir: Path) -> None:
    config = load_config(
        template(
            "adaptive",
            demo_dir,
            params={"mode": "self_rag", "max_steps": 2},
            operators={"draft": "none", "gate": "none", "rerank": "none", "rewrite": "none", "judge": "reflection"},
        )
    )
    # round 1: answer, supported: yes, useful: no -> again; round 2: answer, yes, yes -> stop
    config.providers.llm = fake_llm(
        "It is a code [1].", "Yes", "No", "E07 means speed sensor signal lost [1].", "Yes", "Yes"
    )
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    reasons = [v["reason"] for v in out["verdicts"] if v["judge"] == "reflection"]
    assert reasons == ["supported:yes,useful:no", "supported:yes,useful:yes"]
    assert out["step"] == 2 and out["answer"]["text"].startswith("E07 means")


def _hit(env: Any, doc_id: str) -> dict[str, Any]:
    chunk = next(c for part in env.index.catalog.scan() for c in part if c.doc_id == doc_id)
    return {"chunk_id": chunk.id, "text": chunk.text, "score": 1.0, "channel": "fixed", "metadata": chunk.metadata}


@pytest.mark.integration
def test_flare_citations_resolve_to_the_pack_each_sentence_was_drafted_from(demo_dir: Path, demo_env: Any) -> None:
    e07, e12, e17 = (_hit(demo_env, f"display-error-{c}") for c in ("e07", "e12", "e17"))
    packs = iter([[e07, e12], [e17, e07]])  # the re-query for sentence 2 brings E17 first

    def retrieve(state: Mapping[str, Any]) -> dict[str, Any]:
        return {"candidates": next(packs)}

    def judge(state: Mapping[str, Any]) -> dict[str, Any]:  # accept sentence 1, re-query for sentence 2
        step = state.get("step", 0)
        return {
            "verdicts": [
                {"judge": "scripted", "decision": "stop" if step == 0 else "continue", "reason": "test", "step": step}
            ]
        }

    config = load_config(template("adaptive", demo_dir, params={"mode": "flare", "max_steps": 2}))
    config.providers.llm = fake_llm(
        "E07 means speed sensor signal lost [1].", "Unsure [2].", "E17 is a motor controller communication fault [1]."
    )
    config.operators["retrieve"] = OperatorSpec.from_object(retrieve)
    config.operators["judge"] = OperatorSpec.from_object(judge)
    out = build_flow(config).invoke({"query": "What do E07 and E17 mean?"})
    refs = {e["ref"]: e["chunk_id"] for e in out["evidence"]}
    assert out["answer"]["text"] == (
        "E07 means speed sensor signal lost [1]. E17 is a motor controller communication fault [3]."
    )
    assert refs == {1: e07["chunk_id"], 2: e12["chunk_id"], 3: e17["chunk_id"]}  # every chunk a draft saw is kept
    model = [c for c in out["answer"]["citations"] if c["method"] == "model"]
    assert [(c["ref"], c["chunk_id"]) for c in model] == [(1, e07["chunk_id"]), (3, e17["chunk_id"])]
