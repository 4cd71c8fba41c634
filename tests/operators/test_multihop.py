"""Multi-hop retrieval without an LLM on the demo corpus: the document-graph hop (link_hop), the pairs fusion, and
the hops of the iterative, branching and recursive patterns; all count their lookups as retrievals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from tests.conftest import demo_flow

AWARD = "What is the frame material of the bike that won the 2022 Coastline Design Award?"
RETRIEVE = {"name": "hybrid", "params": {"k": 20, "pool": 20}}


def docs(out: dict[str, Any], n: int = 5) -> list[str]:
    return [h["metadata"]["doc_id"] for h in out["candidates"][:n]]


@pytest.mark.integration
def test_link_hop_follows_the_bridge_the_first_passage_names(demo_env: Providers) -> None:
    from operators.fusion import rrf

    first = rrf([demo_env.index.search_dense(AWARD, 20), demo_env.index.search_sparse(AWARD, 20)], k=20)
    info = get_operator(Port.REFINE, "link_hop")
    out = info.factory(info.params.model_validate({"k": 5}), demo_env)({"query": AWARD, "candidates": first})
    assert docs(out)[:2] == ["coastline-design-award-2022", "tw-550-gravel-spec-sheet"]  # the pair comes first
    assert all(h["channel"] == "multihop" for h in out["candidates"])


@pytest.mark.integration
@pytest.mark.parametrize(
    ("pattern", "extra", "retrievals"),
    [
        ("linear", {"operators": {"retrieve": RETRIEVE, "rerank": {"name": "link_hop", "params": {"k": 5}}}}, 4),
        (
            "iterative",
            {
                "operators": {"retrieve": RETRIEVE, "judge": "none", "hop": {"name": "links", "params": {"k": 5}}},
                "params": {"rounds": 2},
            },
            4,
        ),
        (
            "branching",
            {
                "operators": {"retrieve": RETRIEVE, "fuse": {"name": "pairs", "params": {"k": 5}}},
                "params": {"mode": "passages", "branches": 2},
            },
            5,
        ),
        (
            "recursive",
            {
                "operators": {"retrieve": RETRIEVE, "fuse": {"name": "pairs", "params": {"k": 5}}},
                "params": {"expand": "hop", "branching": 2, "max_depth": 1, "max_nodes": 10},
            },
            4,
        ),
    ],
)
def test_every_multi_hop_pattern_reaches_the_second_passage_without_an_llm(
    demo_dir: Path, pattern: str, extra: dict[str, Any], retrievals: int
) -> None:
    config = demo_flow(demo_dir, pattern, **extra)
    config["operators"].update({"context": "none", "generate": "none"})
    out = build_flow(config).invoke({"query": AWARD})
    assert {"coastline-design-award-2022", "tw-550-gravel-spec-sheet"} <= set(docs(out))
    ledger = out["ledger"]
    assert sum(e["llm_calls"] for e in ledger) == 0
    assert sum(e["retrievals"] for e in ledger) == retrievals  # searches and link-table lookups, each counted


@pytest.mark.integration
def test_the_extractive_answer_follows_the_bridge_to_the_second_passage(demo_dir: Path) -> None:
    config = demo_flow(
        demo_dir,
        operators={
            "retrieve": RETRIEVE,
            "rerank": {"name": "link_hop", "params": {"k": 10}},
            "context": "evidence_first",
            "generate": {"name": "cited_answer", "params": {"mode": "extractive"}},
        },
    )
    out = build_flow(config).invoke({"query": AWARD})
    assert "chromoly steel" in out["answer"]["text"]
    [cited] = out["answer"]["citations"]
    assert {e["ref"]: e["metadata"]["doc_id"] for e in out["evidence"]}[cited["ref"]] == "tw-550-gravel-spec-sheet"
    assert cited["verdict"] == "supported"
