"""Adaptive pattern: FLARE (token-confidence gate) and Self-RAG-style control; both bounded by max_steps."""

from __future__ import annotations

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
    config = load_config(template("adaptive", demo_dir, params={"mode": "self_rag", "max_steps": steps},
                                  operators={"rerank": "none", "rewrite": "none", "gate": "none", "draft": "none"}))
    config.providers.llm = fake_llm("E07 means the speed sensor signal was lost [1].")
    config.operators["judge"] = OperatorSpec.from_object(never_stop)
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert out["step"] == steps and len(out["rounds"]) == steps


@pytest.mark.integration
def test_self_rag_gate_can_skip_retrieval(demo_dir: Path) -> None:
    config = load_config(template("adaptive", demo_dir, params={"mode": "self_rag", "max_steps": 2},
                                  operators={"judge": {"name": "llm_judge"}, "draft": "none"}))  # fmt: skip
    config.providers.llm = fake_llm("No", "Paris is the capital of France.", "Yes")
    out = build_flow(config).invoke({"query": "What is the capital of France?"})
    nodes = [e["node"] for e in out["trace"]]
    assert nodes[0] == "gate" and "retrieve" not in nodes
    assert out["answer"]["text"] == "Paris is the capital of France."


@pytest.mark.integration
def test_flare_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    config = template("adaptive", demo_dir, params={"mode": "flare", "max_steps": 2})
    out = build_flow(config).invoke({"query": "What does error code E07 mean on the e-bike display?"})
    assert 1 <= out["step"] <= 2 and out["answer"]["text"].strip()
    judged = [v for v in out["verdicts"] if v["judge"] == "token_confidence"]
    assert judged and all(0.0 <= v["score"] <= 1.0 for v in judged)
    assert all(c["chunk_id"] in {e["chunk_id"] for e in out["evidence"]} for c in out["answer"]["citations"])


@pytest.mark.integration
def test_self_rag_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    config = template("adaptive", demo_dir, params={"mode": "self_rag", "max_steps": 2}, operators={
        "judge": {"name": "llm_judge"}, "draft": "none",
        "generate": {"name": "cited_answer", "params": {"max_tokens": 48, "without_evidence": "answer"}},
        "rerank": {"name": "llm_critique", "params": {"max_candidates": 4}}})  # fmt: skip
    out = build_flow(config).invoke({"query": "What does error code E12 mean on the display?"})
    assert 1 <= out["step"] <= 2 and out["answer"]["text"].strip()
    assert any(v["judge"] == "llm_judge" for v in out["verdicts"])
