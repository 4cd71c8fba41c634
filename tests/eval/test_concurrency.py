"""Bounded concurrency: ``batch`` / ``abatch`` with ``max_concurrency`` and ``modular-rag eval --concurrency N``
give the serial results, in query order, with at most N model calls in flight. The model is an OpenAI-compatible
stub that waits on every call and answers deterministically from the prompt (no timing is asserted)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from modular_rag.builder import build_flow
from modular_rag.cli import main
from modular_rag.config import load_config
from modular_rag.eval.datasets import load_demo
from modular_rag.eval.runner import evaluate_flow
from modular_rag.providers import Providers
from tests.helpers.stub_llm import StubLLM
from tests.patterns.conftest import template

pytestmark = pytest.mark.integration


def stub_config(demo_dir: Path, url: str) -> dict[str, Any]:
    # the model answers, and its answer is kept whatever the check says: these tests are about concurrent model calls
    config = template(
        "linear",
        demo_dir,
        operators={"generate": {"name": "cited_answer", "params": {"mode": "llm", "unsupported": "mark"}}},
    )
    config["providers"]["llm"] = {"name": "openai", "model": "stub", "base_url": url, "max_retries": 0}
    return config


def without_ms(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "ms"}


def test_batch_and_abatch_match_serial_within_the_bound(demo_dir: Path) -> None:
    queries = [q.text for q in load_demo().queries[:8]]
    with StubLLM(latency_s=0.2) as stub:
        flow = build_flow(stub_config(demo_dir, stub.url))
        serial = [flow.invoke({"query": q})["answer"]["text"] for q in queries]
        stub.max_in_flight = 0
        batch = flow.batch([{"query": q} for q in queries], {"max_concurrency": 3})
        assert 2 <= stub.max_in_flight <= 3  # calls overlapped, never more than the bound
        stub.max_in_flight = 0
        abatch = asyncio.run(flow.abatch([{"query": q} for q in queries], {"max_concurrency": 3}))
        assert 2 <= stub.max_in_flight <= 3
    assert [r["query"] for r in batch] == [r["query"] for r in abatch] == queries
    assert [r["answer"]["text"] for r in batch] == [r["answer"]["text"] for r in abatch] == serial
    assert len(set(serial)) == len(queries)  # the stub's answers differ per query, so order is checked


def test_evaluate_flow_with_concurrency_gives_the_serial_records(demo_dir: Path) -> None:
    dataset = load_demo().limited(8)
    with StubLLM(latency_s=0.1) as stub:
        config = load_config(stub_config(demo_dir, stub.url))
        env = Providers(config.providers)
        serial = evaluate_flow(config, dataset, env)
        stub.max_in_flight = 0
        concurrent = evaluate_flow(config, dataset, env, concurrency=4)
        assert 2 <= stub.max_in_flight <= 4
    assert [r.qid for r in concurrent.records] == [q.id for q in dataset.queries]
    assert [without_ms(asdict(r)) for r in concurrent.records] == [without_ms(asdict(r)) for r in serial.records]
    assert concurrent.retrieval == serial.retrieval


def test_eval_cli_concurrency_writes_the_serial_report(
    demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    with StubLLM(latency_s=0.05) as stub:
        path = tmp_path / "stub.yaml"
        path.write_text(yaml.safe_dump({**stub_config(demo_dir, stub.url), "name": "stub"}))
        for conc in ("1", "4"):
            assert (
                main(
                    [
                        "eval",
                        "--dataset",
                        "demo",
                        "--limit",
                        "6",
                        "--config",
                        str(path),
                        "--concurrency",
                        conc,
                        "--out",
                        str(tmp_path / conc),
                        "--quiet",
                    ]
                )
                == 0
            )
    reports = [json.loads((tmp_path / conc / "results.json").read_text()) for conc in ("1", "4")]
    for report in reports:
        for row in report["results"]:
            row.pop("ms")
        report["queries"] = {name: [without_ms(r) for r in recs] for name, recs in report["queries"].items()}
    assert reports[0] == reports[1]


def test_abatch_is_bounded_by_max_concurrency_not_the_event_loops_default_executor(demo_dir: Path) -> None:
    import os

    default_threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor: sync nodes used to run there
    n = default_threads + 4
    config = stub_config(demo_dir, "")
    config["operators"]["retrieve"] = {"name": "bm25", "params": {"k": 5}}  # quick retrieval: the calls overlap
    with StubLLM(latency_s=1.0) as stub:
        config["providers"]["llm"]["base_url"] = stub.url
        flow = build_flow(config)
        queries = [f"{q.text} ({i})" for i, q in enumerate(load_demo().queries[:n])]
        results = asyncio.run(flow.abatch([{"query": q} for q in queries], {"max_concurrency": n}))
    assert [r["query"] for r in results] == queries
    assert default_threads < stub.max_in_flight <= n
