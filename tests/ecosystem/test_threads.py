"""Threads are conversations: a new question on a reused ``thread_id`` starts its per-question state clean, in
every pattern, while a resume of an interrupted run (input ``None``) still continues where it stopped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from modular_rag.builder import build_flow
from modular_rag.config import OperatorSpec, load_config
from tests.conftest import fake_llm
from tests.patterns.conftest import template

REPLY = "The TW-550 Gravel uses chromoly steel [1].\nWhich year was it?"
FIRST = "Which frame material does the 2022 Coastline Design Award winner use?"
SECOND = "What does error code E07 mean on the e-bike display?"


def accept(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"verdicts": [{"judge": "accept", "decision": "stop", "reason": "test", "step": state.get("step", 0)}]}


def once_more(state: Mapping[str, Any]) -> dict[str, Any]:
    decision = "continue" if int(state.get("step", 0) or 0) < 2 else "stop"
    return {"verdicts": [{"judge": "twice", "decision": decision, "reason": "test", "step": state.get("step", 0)}]}


CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "linear": ("linear", {}, {}),
    "iterative": ("iterative", {"rounds": 3}, {"judge": once_more}),
    "branching": (
        "branching",
        {"branches": 2},
        {"expand": {"name": "multi_query", "params": {"styles": ["standalone"]}}},
    ),
    "flare": ("adaptive", {"max_steps": 2}, {"judge": accept}),
    "recursive": ("recursive", {"max_depth": 1, "max_nodes": 3}, {}),
}


def _flow(case: str, demo_dir: Path, checkpointer: Any) -> Any:
    pattern, params, operators = CASES[case]
    data = template(pattern, demo_dir, params=params)
    config = load_config(data)
    config.providers.llm = fake_llm(REPLY)
    for slot, op in operators.items():
        config.operators[slot] = OperatorSpec.from_object(op) if callable(op) else OperatorSpec.model_validate(op)
    return build_flow(config, checkpointer=checkpointer)


def _shape(out: Mapping[str, Any]) -> dict[str, Any]:
    """What a run did, without its timings."""
    return {
        "nodes": [e["node"] for e in out.get("trace") or []],
        "ledger": [(e["node"], e["llm_calls"], e["retrievals"]) for e in out.get("ledger") or []],
        "step": out.get("step"),
        "rounds": [r["query"] for r in out.get("rounds") or []],
        "branches": sorted(b["query"] for b in out.get("branches") or []),
        "tree": [n["question"] for n in out.get("tree") or []],
        "verdicts": [(v["judge"], v["decision"], v.get("step"), v.get("target")) for v in out.get("verdicts") or []],
        "answer": (out.get("answer") or {}).get("text"),
        "queries": out.get("queries"),
    }


@pytest.mark.integration
@pytest.mark.parametrize("case", list(CASES))
def test_a_new_question_on_a_reused_thread_starts_clean(case: str, demo_dir: Path) -> None:
    saver = InMemorySaver()
    flow = _flow(case, demo_dir, saver)
    thread = {"configurable": {"thread_id": f"reused-{case}"}}
    flow.invoke({"query": FIRST}, thread)
    reused = flow.invoke({"query": SECOND}, thread)
    fresh = _flow(case, demo_dir, InMemorySaver()).invoke({"query": SECOND}, {"configurable": {"thread_id": "new"}})
    assert _shape(reused) == _shape(fresh)
    assert FIRST not in str(_shape(reused))


@pytest.mark.integration
def test_a_filter_stays_with_the_thread_until_replaced_or_cleared(demo_dir: Path) -> None:
    flow = _flow("linear", demo_dir, InMemorySaver())
    thread = {"configurable": {"thread_id": "filters"}}
    flow.invoke({"query": SECOND, "filter": {"year": 2019}}, thread)
    assert flow.invoke({"query": SECOND}, thread)["filter"] == {"year": 2019}
    assert flow.invoke({"query": SECOND, "filter": {"year": 2023}}, thread)["filter"] == {"year": 2023}
    assert flow.invoke({"query": SECOND, "filter": None}, thread).get("filter") is None


@pytest.mark.unit
def test_only_flows_on_threads_get_the_reset_step() -> None:
    plain = build_flow(template("linear"))
    threaded = build_flow(template("linear"), checkpointer=InMemorySaver())
    assert "begin" not in plain.get_graph().nodes
    assert "begin" in threaded.get_graph().nodes
