"""Linear pattern: graph shape pinned, every slot swappable, end to end on the real local model."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag import template_path
from modular_rag.builder import build_flow
from modular_rag.config import load_config
from patterns import build_linear
from tests.conftest import demo_flow, fake_llm
from tests.patterns.conftest import snapshot


@pytest.mark.unit
def test_template_graph_matches_snapshot() -> None:
    cfg = load_config(template_path("linear"))
    cfg.providers.vectorstore.in_memory = True
    mermaid = build_linear(cfg).get_graph().draw_mermaid()
    assert mermaid == snapshot("linear", mermaid)


@pytest.mark.unit
def test_disabled_slots_leave_the_graph() -> None:
    cfg = {
        "pattern": "linear",
        "providers": {"vectorstore": {"in_memory": True}},
        "operators": {
            "rewrite": "rewrite",
            "retrieve": "bm25",
            "context": {"name": "budget", "enabled": False},
            "generate": "none",
            "rerank": [{"name": "embedding"}, {"name": "embedding"}],
        },
    }
    nodes = set(build_linear(cfg).get_graph().nodes)
    assert nodes == {"__start__", "rewrite", "retrieve", "rerank", "__end__"}


@pytest.mark.unit
def test_recursion_limit_is_derived_from_the_flow() -> None:
    flow = build_linear({"pattern": "linear", "providers": {"vectorstore": {"in_memory": True}}})
    assert flow.config["recursion_limit"] == 3 + 4


@pytest.mark.integration
def test_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    flow = build_flow(
        demo_flow(
            demo_dir,
            operators={
                "rewrite": {"name": "rewrite", "params": {"max_tokens": 24}},
                "retrieve": {"name": "hybrid", "params": {"k": 5}},
                "context": {"name": "budget", "params": {"max_tokens": 400, "max_chunks": 3}},
                "generate": {"name": "cited_answer", "params": {"max_tokens": 60}},
            },
        )
    )
    out = flow.invoke({"query": "What does error code E12 on the display mean?"})
    assert out["answer"]["text"].strip()
    assert out["candidates"][0]["metadata"]["doc_id"] == "display-error-e12"
    assert [e["node"] for e in out["trace"]] == ["rewrite", "retrieve", "context", "generate"]
    by_node = {e["node"]: e for e in out["ledger"]}
    assert by_node["rewrite"]["llm_calls"] == 1 and by_node["generate"]["llm_calls"] == 1
    assert by_node["generate"]["prompt_tokens"] > 50  # from the server's usage report
    assert by_node["retrieve"]["retrievals"] == 2 * len(out["queries"])
    evidence_ids = {e["chunk_id"] for e in out["evidence"]}
    assert all(c["chunk_id"] in evidence_ids for c in out["answer"]["citations"])


@pytest.mark.integration
def test_scripted_run_cites_the_retrieved_chunk(demo_dir: Path) -> None:
    config = demo_flow(demo_dir, operators={"retrieve": "bm25"})
    config["providers"]["llm"] = fake_llm("E12 means battery overtemperature [1].")
    out = build_flow(config).invoke({"query": "What does the E12 error indicate?"})
    assert out["answer"]["citations"][0]["chunk_id"] == out["evidence"][0]["chunk_id"]
    assert out["evidence"][0]["metadata"]["doc_id"] == "display-error-e12"
