"""Streaming and async: every pattern works with ``ainvoke``, ``astream`` and ``abatch``;
``modular-rag run --stream`` prints node updates as they happen, then the answer."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from modular_rag.builder import build_flow
from modular_rag.cli import main, stream_run
from modular_rag.config import load_config
from tests.conftest import fake_llm
from tests.patterns.conftest import template

ANSWER = "Yes. Error E07 means the speed sensor signal was lost [1]."
QUERIES = [
    "What does error code E07 mean on the e-bike display?",
    "Why does the motor stop assisting with E07?",
]

# each pattern's template on the demo index; adaptive in Self-RAG mode, which a scripted model (no token
# log-probabilities) can drive, FLARE's token_confidence judge needs them
PATTERNS: dict[str, dict[str, Any]] = {
    "linear": {"operators": {"generate": {"name": "cited_answer", "params": {"mode": "llm"}}}},  # the model answers
    "conditional": {},
    "branching": {},
    "iterative": {},
    "recursive": {},
    "adaptive": {
        "params": {"mode": "self_rag", "max_steps": 2},
        "operators": {"judge": {"name": "llm_judge", "params": {"criterion": "supported"}}},
    },
}


def scripted_flow(pattern: str, demo_dir: Path) -> Any:
    config = load_config(template(pattern, demo_dir, **PATTERNS[pattern]))
    config.providers.llm = fake_llm(ANSWER)
    return build_flow(config)


@pytest.mark.integration
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_ainvoke_astream_abatch(pattern: str, demo_dir: Path) -> None:
    flow = scripted_flow(pattern, demo_dir)
    nodes = set(flow.get_graph().nodes)

    async def run() -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
        out = await flow.ainvoke({"query": QUERIES[0]})
        updates = [
            (node, update)
            async for chunk in flow.astream({"query": QUERIES[0]}, stream_mode="updates")
            for node, update in chunk.items()
        ]
        batch = await flow.abatch([{"query": q} for q in QUERIES], {"max_concurrency": 2})
        return out, updates, batch

    out, updates, batch = asyncio.run(run())
    assert out["answer"]["text"] == ANSWER and out["answer"]["citations"]
    assert updates and {node for node, _ in updates} <= nodes
    assert any("answer" in (update or {}) for _, update in updates)
    streamed = [e["node"] for _, u in updates for e in u.get("ledger", [])]
    # the same ledger entries; parallel branches stream in the order they finish, the state keeps task order
    assert sorted(streamed) == sorted(e["node"] for e in out["ledger"])
    assert [n for n in streamed if "[" not in n] == [e["node"] for e in out["ledger"] if "[" not in e["node"]]
    assert [o["query"] for o in batch] == QUERIES
    assert all(o["answer"]["text"] == ANSWER for o in batch)


@pytest.mark.integration
def test_stream_run_prints_one_line_per_node(demo_dir: Path) -> None:
    buffer = io.StringIO()
    result = stream_run(scripted_flow("iterative", demo_dir), {"query": QUERIES[0]}, out=buffer)
    lines = buffer.getvalue().splitlines()
    nodes = [line.split("]")[0].lstrip("[") for line in lines]
    assert nodes == ["retrieve", "context", "generate", "advance", "judge"] * result["step"]
    assert lines[2].startswith("[generate] ") and "1 LLM call  answer('Yes. Error E07 means" in lines[2]
    assert result["answer"]["text"] == ANSWER


@pytest.mark.integration
def test_cli_run_stream(demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = template(
        "linear",
        demo_dir,
        operators={
            "context": {"name": "budget", "params": {"max_chunks": 2}},
            "generate": {"name": "cited_answer", "params": {"max_tokens": 32}},
        },
    )
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", "--config", str(path), "--stream", QUERIES[0]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("]")[0] for line in out[:3]] == ["[retrieve", "[context", "[generate"]
    assert "candidates[10]" in out[0] and "1 LLM call" in out[2]
    answer = next(line for line in out if line.startswith("A: "))
    assert len(answer) > len("A: ") and out.index(answer) > 3

    # with --json the node lines go to stderr and stdout stays one JSON document
    path.write_text(yaml.safe_dump({**config, "operators": {**config["operators"], "generate": "none"}}))
    assert main(["run", "--config", str(path), "--stream", "--json", QUERIES[0]]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["evidence"]
    assert [line.split("]")[0] for line in captured.err.splitlines() if line.startswith("[")] == [
        "[retrieve",
        "[context",
    ]
