"""The cost model: per-pattern LLM calls and retrievals from the config, checked against the ledger of runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import load_config
from modular_rag.costs import Span, estimate
from modular_rag.eval.recommend import PATTERN_RUNS, pattern_config
from modular_rag.trace import totals
from tests.conftest import fake_llm


def config_for(run: str, demo_dir: Path | None = None, **params: object):
    data = pattern_config(run)
    data["providers"]["vectorstore"] = (
        {"name": "chroma", "path": str(demo_dir), "collection": "demo"}
        if demo_dir
        else {"name": "chroma", "in_memory": True}
    )
    data["params"] = {**data.get("params", {}), **params}
    return load_config(data)


@pytest.mark.unit
def test_estimates_follow_the_config() -> None:
    linear = estimate(config_for("linear"))
    assert (linear.llm_calls, linear.retrievals) == (Span(0, 0), Span(2, 2))  # the extractive answer calls no LLM
    data = config_for("linear").to_dict()
    data["operators"]["generate"] = {"name": "cited_answer", "params": {"mode": "checked"}}
    assert estimate(data).llm_calls == Span(0, 1)  # the model answers unless no sentence answers the question
    data["operators"]["rewrite"] = {"name": "rewrite"}
    rewritten = estimate(data)
    assert (rewritten.llm_calls, rewritten.retrievals) == (Span(1, 2), Span(2, 2))  # the rewrite replaces the query
    data["operators"]["rewrite"] = {"name": "rewrite", "params": {"keep_original": True}}
    assert estimate(data).retrievals == Span(2, 4)
    no_judge = config_for("iterative", rounds=4).to_dict()
    no_judge["operators"]["judge"] = "none"
    fixed = estimate(no_judge)
    # every round's answer is one call, skipped when no evidence sentence answers the question (min_relevance)
    assert (fixed.llm_calls, fixed.retrievals) == (Span(0, 4), Span(8, 8))
    judged = estimate(config_for("iterative", rounds=4))
    assert judged.llm_calls == Span(0, 4)
    wide = estimate(config_for("branching", branches=2))
    assert wide.retrievals == Span(2, 4) and wide.llm_calls == Span(3, 4)  # 3 rewrites + 1 answer, 2 branches kept
    tree = estimate(config_for("recursive", branching=3, max_depth=2, max_nodes=10))
    assert tree.llm_calls == Span(0, 10 + 4 + 9 + 1)  # 10 nodes, 4 possible parents, 9 nodes verified, one fusion


QUESTIONS = [
    "What does error code E07 mean?",
    "Which frame material does the 2022 award winner use?",
    "How should I look after my chain in winter?",
]


@pytest.mark.integration
@pytest.mark.parametrize("run", list(PATTERN_RUNS))
def test_the_ledger_of_runs_falls_within_the_estimate(run: str, demo_dir: Path) -> None:
    config = config_for(run, demo_dir)
    config.providers.llm = fake_llm(
        "yes", "E07 means the speed sensor signal was lost [1].", "no", "Which model is it?\nWhich year is it?", "exact"
    )
    if run == "adaptive":  # the scripted model has no token probabilities: judge FLARE's drafts with yes/no instead
        from modular_rag.config import OperatorSpec

        config.operators["judge"] = OperatorSpec(name="llm_judge", params={"criterion": "complete"})
    expected = estimate(config)
    flow = build_flow(config)
    for question in QUESTIONS:
        spent = totals(flow.invoke({"query": question})["ledger"])
        assert spent["llm_calls"] in expected.llm_calls, (question, spent["llm_calls"], str(expected.llm_calls))
        assert spent["retrievals"] in expected.retrievals, (question, spent["retrievals"], str(expected.retrievals))
