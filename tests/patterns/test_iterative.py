"""Iterative pattern (ITER-RETGEN): rounds retrieve with the last answer; a judge may stop early; T is the bound."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import OperatorSpec, load_config
from tests.conftest import fake_llm
from tests.patterns.conftest import snapshot, template


def never_stop(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"verdicts": [{"judge": "never", "decision": "continue", "reason": "test", "step": state.get("step", 0)}]}


@pytest.mark.unit
def test_template_graph_matches_snapshot() -> None:
    mermaid = build_flow(template("iterative")).get_graph().draw_mermaid()
    assert mermaid == snapshot("iterative", mermaid)


@pytest.mark.integration
@pytest.mark.parametrize("rounds", [1, 4])
def test_a_judge_that_never_stops_ends_exactly_at_the_bound(demo_dir: Path, rounds: int) -> None:
    config = load_config(template("iterative", demo_dir, params={"rounds": rounds}))
    config.providers.llm = fake_llm("The TW-550 uses chromoly steel [1].", "It is chromoly steel [1].")
    config.operators["judge"] = OperatorSpec.from_object(never_stop)
    out = build_flow(config).invoke({"query": "Which frame material does the award-winning bike use?"})
    assert out["step"] == rounds and len(out["rounds"]) == rounds
    assert sum(e["node"] == "generate" for e in out["trace"]) == rounds


@pytest.mark.integration
def test_round_t_retrieves_with_the_previous_answer(demo_dir: Path) -> None:
    config = load_config(template("iterative", demo_dir, params={"rounds": 2}, operators={"judge": "none"}))
    config.providers.llm = fake_llm("The award went to the TW-550 Gravel [1].")
    out = build_flow(config).invoke({"query": "Which bike won the 2022 Coastline Design Award?"})
    assert out["rounds"][0]["query"] == "Which bike won the 2022 Coastline Design Award?"
    # the answer joins the query without its citation markers, which mean nothing to a retriever
    assert out["rounds"][1]["query"] == ("Which bike won the 2022 Coastline Design Award? The award went to the "
                                         "TW-550 Gravel.")  # fmt: skip


@pytest.mark.integration
def test_a_refusal_never_extends_the_next_query(demo_dir: Path) -> None:
    from operators.generation import REFUSAL

    config = load_config(template("iterative", demo_dir, params={"rounds": 2}, operators={"judge": "none"}))
    config.providers.llm = fake_llm(REFUSAL)
    out = build_flow(config).invoke({"query": "Which bike won the 2022 Coastline Design Award?"})
    assert [r["query"] for r in out["rounds"]] == ["Which bike won the 2022 Coastline Design Award?"] * 2


@pytest.mark.integration
def test_no_progress_stops_when_the_answer_repeats(demo_dir: Path) -> None:
    config = load_config(template("iterative", demo_dir, params={"rounds": 5}))
    config.providers.llm = fake_llm("Chromoly steel [1].")
    out = build_flow(config).invoke({"query": "Which frame material does the award-winning bike use?"})
    assert out["step"] == 2
    assert out["verdicts"][-1] == {"judge": "no_progress", "decision": "stop", "reason": "no_progress", "step": 2,
                                   "score": 1.0}  # fmt: skip


@pytest.mark.integration
def test_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    config = template("iterative", demo_dir, params={"rounds": 2},
                      operators={"generate": {"name": "cited_answer", "params": {"max_tokens": 48}}})  # fmt: skip
    out = build_flow(config).invoke({"query": "Which frame material does the 2022 Coastline Design Award winner use?"})
    assert 1 <= out["step"] <= 2 and out["answer"]["text"].strip()
    assert sum(e["llm_calls"] for e in out["ledger"]) == out["step"]
