"""Branching pattern: parallel fan-out with Send (proven by timing), fusion of lists and of answers (REPLUG)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import OperatorSpec, load_config
from modular_rag.errors import ConfigError
from operators.fusion import replug_weights
from tests.conftest import fake_llm
from tests.patterns.conftest import snapshot, template


@pytest.mark.unit
def test_template_graphs_match_snapshots() -> None:
    mermaid = build_flow(template("branching")).get_graph().draw_mermaid()
    assert mermaid == snapshot("branching", mermaid)
    docs = template("branching", params={"mode": "documents", "branches": 3},
                    operators={"fuse": {"name": "replug"}, "expand": "none"})  # fmt: skip
    mermaid = build_flow(docs).get_graph().draw_mermaid()
    assert mermaid == snapshot("branching-documents", mermaid)


@pytest.mark.unit
def test_fusion_that_does_not_fit_the_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match="mode 'queries' needs a candidates fusion"):
        build_flow(template("branching", operators={"fuse": {"name": "replug"}}))


@pytest.mark.unit
def test_replug_weights_are_a_softmax_of_scores() -> None:
    w = replug_weights([0.9, 0.8, 0.1], temperature=0.1)
    assert w.sum() == pytest.approx(1.0) and w[0] > w[1] > w[2]
    assert w[0] / w[1] == pytest.approx(2.718281828, rel=1e-6)


@pytest.mark.integration
def test_branches_run_concurrently(demo_dir: Path) -> None:
    def four_queries(state: Mapping[str, Any]) -> dict[str, Any]:
        return {"queries": [f"{state['query']} {i}" for i in range(4)]}

    def slow_retrieve(state: Mapping[str, Any]) -> dict[str, Any]:
        time.sleep(0.6)
        hit = {"chunk_id": state["query"], "text": state["query"], "score": 1.0, "channel": "slow", "metadata": {}}
        return {"candidates": [hit]}

    config = load_config(template("branching", demo_dir, operators={"context": "none", "generate": "none"}))
    config.operators["expand"] = OperatorSpec.from_object(four_queries)
    config.operators["retrieve"] = OperatorSpec.from_object(slow_retrieve)
    flow = build_flow(config)
    start = time.perf_counter()
    out = flow.invoke({"query": "q"})
    elapsed = time.perf_counter() - start
    assert len(out["branches"]) == 4 and len(out["candidates"]) == 4
    assert elapsed < 4 * 0.6 * 0.6, f"4 branches of 0.6 s took {elapsed:.2f} s: not concurrent"
    branch_events = [e for e in out["trace"] if e["node"].startswith("branch[")]
    assert len(branch_events) == 4
    starts = sorted(e["start"] for e in branch_events)
    assert starts[-1] - starts[0] < 0.6  # all four started before the first finished


@pytest.mark.integration
def test_multi_query_branches_are_fused(demo_dir: Path) -> None:
    config = load_config(template("branching", demo_dir, operators={"generate": "none", "context": "none"}))
    config.providers.llm = fake_llm("E07 display error", "speed sensor fault code", "e-bike speed sensor signal")
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert [b["query"] for b in out["branches"]][0] == "What does error code E07 mean?"
    assert len(out["branches"]) == 4
    assert out["candidates"][0]["metadata"]["doc_id"] == "display-error-e07"
    assert out["candidates"][0]["channel"] == "weighted"


@pytest.mark.integration
def test_replug_vote_with_a_model_without_token_probabilities(demo_dir: Path) -> None:
    config = load_config(template("branching", demo_dir, params={"mode": "documents", "branches": 3},
                                  operators={"fuse": {"name": "replug"}, "expand": "none"}))  # fmt: skip
    config.providers.llm = fake_llm("Speed sensor signal lost.", "Speed sensor signal lost.", "Battery too hot.")
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert len(out["branches"]) == 3
    assert out["answer"]["text"] in {"Speed sensor signal lost.", "Battery too hot."}
    fuse = next(e for e in out["trace"] if e["node"] == "fuse")
    assert "answer-level weighted vote" in fuse["summary"]


@pytest.mark.integration
def test_replug_token_level_on_the_local_model(demo_dir: Path) -> None:
    config = template("branching", demo_dir, params={"mode": "documents", "branches": 2},
                      operators={"fuse": {"name": "replug", "params": {"max_tokens": 16}}, "expand": "none",
                                 "generate": {"name": "cited_answer", "params": {"max_tokens": 24}},
                                 "retrieve": {"name": "bm25", "params": {"k": 4}}})  # fmt: skip
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    fuse = next(e for e in out["trace"] if e["node"] == "fuse")
    assert "token-level ensemble over 2 documents" in fuse["summary"]
    assert out["answer"]["text"].strip()
    ledger = next(e for e in out["ledger"] if e["node"] == "fuse")
    assert 2 <= ledger["llm_calls"] <= 2 * 16  # two documents per decoding step
    assert ledger["llm_calls"] % 2 == 0


@pytest.mark.integration
def test_end_to_end_multi_query_on_the_local_model(demo_dir: Path) -> None:
    config = template("branching", demo_dir, operators={
        "expand": {"name": "multi_query", "params": {"styles": ["standalone", "synonyms"], "max_tokens": 24}},
        "generate": {"name": "cited_answer", "params": {"max_tokens": 48}}})  # fmt: skip
    out = build_flow(config).invoke({"query": "What does display code E17 report?"})
    assert 1 <= len(out["branches"]) <= 3 and out["answer"]["text"].strip()
    assert "display-error-e17" in [h["metadata"]["doc_id"] for h in out["candidates"][:3]]
