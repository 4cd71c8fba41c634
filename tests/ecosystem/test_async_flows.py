"""Async flows end to end: an operator may be ``async def`` (awaited on the event loop) or plain (run in the kit's
pool of threads), so an ``abatch`` of many questions against a slow OpenAI-compatible endpoint has every question's
call at the endpoint at once, ``max_concurrency`` the bound; ``timeout_s``, ``on_error`` and the per-operator
LangChain runs behave as in sync runs, and sync runs still run every operator."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler

from modular_rag.builder import build_flow
from modular_rag.config import load_config
from modular_rag.errors import OperatorTimeout
from tests.helpers import async_ops
from tests.helpers.stub_llm import StubLLM
from tests.patterns.conftest import template

QUESTION = "What does error code E07 mean on the e-bike display?"
KEEP_TWO = "tests.helpers.async_ops:keep_two"


def stub_flow(demo_dir: Path, url: str, **operators: Any) -> Any:
    """The linear template on the demo index, its model the stub endpoint at ``url``, answering in mode llm."""
    config = template(
        "linear",
        demo_dir,
        allow_imports=True,
        operators={"generate": {"name": "cited_answer", "params": {"mode": "llm"}}, **operators},
    )
    config["providers"]["llm"] = {"name": "openai", "model": "stub", "base_url": url, "max_retries": 0}
    return build_flow(load_config(config))


@pytest.mark.integration
def test_abatch_makes_every_questions_model_call_at_once_on_a_slow_model(demo_dir: Path) -> None:
    n = 8  # more than the event loop's default executor has threads on 2 cores (min(32, cores + 4) = 6)
    inputs = [{"query": f"{QUESTION} (case {i})"} for i in range(n)]
    with StubLLM(latency_s=1.0) as stub:
        flow = stub_flow(demo_dir, stub.url)
        sync = [flow.invoke(x) for x in inputs[:2]]
        stub.max_in_flight = 0
        t0 = time.perf_counter()
        results = asyncio.run(flow.abatch(inputs, {"max_concurrency": n}))
        took = time.perf_counter() - t0
    assert stub.max_in_flight == n  # all n calls were at the endpoint at once: the kit's pool, not the default one
    assert took < 2 * n * 1.0 / 2  # so the batch took far less than n calls in turn (n s)
    for out in results:
        generate = next(e for e in out["ledger"] if e["node"] == "generate")
        assert generate["llm_calls"] == 1 and generate["prompt_tokens"] > 0 and generate["completion_tokens"] > 0
    assert [r["answer"] for r in results[:2]] == [s["answer"] for s in sync]  # the sync path gives the same
    assert [r["ledger"][-1]["llm_calls"] for r in results[:2]] == [s["ledger"][-1]["llm_calls"] for s in sync]


@pytest.mark.integration
def test_an_awaited_model_call_is_a_child_of_its_operators_run_as_in_sync_runs(demo_dir: Path) -> None:
    with StubLLM() as stub:
        flow = stub_flow(demo_dir, stub.url)
        runs, sync_runs = Runs(), Runs()
        asyncio.run(flow.ainvoke({"query": QUESTION}, {"callbacks": [runs]}))
        flow.invoke({"query": QUESTION}, {"callbacks": [sync_runs]})
    assert runs.chat_model_lineage() == sync_runs.chat_model_lineage() == [["cited_answer", "generate"]]


class Runs(BaseCallbackHandler):
    """Records the name, tags and parent of every chain run and chat model run."""

    def __init__(self) -> None:
        self.runs: dict[UUID, tuple[str, list[str]]] = {}
        self.parents: dict[UUID, UUID | None] = {}

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs[run_id] = (str(kwargs.get("name")), list(tags or []))
        self.parents[run_id] = parent_run_id

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self.runs[run_id] = ("chat model", [])
        self.parents[run_id] = parent_run_id

    def chat_model_lineage(self) -> list[list[str]]:
        """For each chat model run, the names of its ancestors, nearest first."""
        out = []
        for run_id, (name, _) in self.runs.items():
            if name == "chat model":
                chain, parent = [], self.parents[run_id]
                while parent is not None and parent in self.runs:
                    chain.append(self.runs[parent][0])
                    parent = self.parents[parent]
                out.append(chain[:2])
        return out


@pytest.mark.integration
def test_an_async_def_operator_runs_on_the_event_loop_and_in_sync_runs_too(demo_dir: Path) -> None:
    config = template(
        "linear", demo_dir, allow_imports=True, operators={"rerank": {"name": KEEP_TWO}, "generate": "none"}
    )
    flow = build_flow(config)
    runs = Runs()

    async def run() -> tuple[str, dict[str, Any]]:
        return threading.current_thread().name, await flow.ainvoke({"query": QUESTION}, {"callbacks": [runs]})

    async_ops.RAN_IN.clear()
    loop_thread, out = asyncio.run(run())
    assert [loop_thread] == async_ops.RAN_IN  # on the loop's thread, not in a worker
    assert len(out["candidates"]) == 2 and [e["node"] for e in out["ledger"]] == ["retrieve", "rerank", "context"]
    event = next(e for e in out["trace"] if e["node"] == "rerank")
    assert event["operator"] == KEEP_TWO and event["status"] == "ok" and "candidates[2]" in event["summary"]
    assert (KEEP_TWO, [f"operator:{KEEP_TWO}", "slot:rerank"]) in [(n, t[-2:]) for n, t in runs.runs.values()]

    async_ops.RAN_IN.clear()
    again = flow.invoke({"query": QUESTION})  # a sync run awaits it on the kit's own loop
    assert async_ops.RAN_IN == ["modular-rag-loop"]
    assert again["candidates"] == out["candidates"]


@pytest.mark.integration
def test_timeout_s_and_on_error_hold_for_async_steps(demo_dir: Path) -> None:
    slow = {"name": "tests.helpers.async_ops:sleeps", "params": {"seconds": 5}, "timeout_s": 0.3}
    skipping = build_flow(
        template(
            "linear",
            demo_dir,
            allow_imports=True,
            operators={"rerank": {**slow, "on_error": "skip"}, "generate": "none"},
        )
    )
    t0 = time.perf_counter()
    out = asyncio.run(skipping.ainvoke({"query": QUESTION}))
    assert time.perf_counter() - t0 < 4.0
    event = next(e for e in out["trace"] if e["node"] == "rerank")
    assert event["status"] == "error" and event["error"] == "timed out after 0.3s"
    failing = build_flow(
        template("linear", demo_dir, allow_imports=True, operators={"rerank": slow, "generate": "none"})
    )
    with pytest.raises(OperatorTimeout, match="timed out after 0.3s"):
        asyncio.run(failing.ainvoke({"query": QUESTION}))
    with pytest.raises(OperatorTimeout, match="timed out after 0.3s"):
        failing.invoke({"query": QUESTION})

    # an awaited model call cut by the deadline is counted, as in a sync run
    with StubLLM() as stub:
        flow = stub_flow(
            demo_dir,
            stub.url,
            generate={
                "name": "cited_answer",
                "params": {"mode": "llm", "min_relevance": None},
                "timeout_s": 1.0,
                "on_error": "skip",
            },
        )
        assert asyncio.run(flow.ainvoke({"query": QUESTION}))["answer"]  # warm: clients made, models loaded
        assert flow.invoke({"query": QUESTION})["answer"]
        stub.latency_s = 6.0
        outs = [asyncio.run(flow.ainvoke({"query": QUESTION})), flow.invoke({"query": QUESTION})]
    for out in outs:
        event = next(e for e in out["trace"] if e["node"] == "generate")
        assert event["status"] == "error"
        assert event["error"] == "timed out after 1.0s (1 LLM call spent, then cancelled)"
        assert next(e for e in out["ledger"] if e["node"] == "generate")["llm_calls"] == 1


@pytest.mark.integration
def test_queries_an_endpoint_embeds_are_embedded_at_once_under_abatch(tmp_path: Path) -> None:
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers
    from tests.conftest import DEMO
    from tests.helpers.stub_embeddings import StubEmbeddings

    n = 8  # more than the event loop's default executor has threads on 2 cores
    inputs = [{"query": f"{QUESTION} (case {i})"} for i in range(n)]
    with StubEmbeddings() as stub:
        config = load_config(
            {
                "pattern": "linear",
                "providers": {
                    "embeddings": {"name": "openai", "model": "stub", "base_url": stub.url},
                    "vectorstore": {"name": "chroma", "path": str(tmp_path), "collection": "endpoint"},
                },
                "operators": {"retrieve": {"name": "dense", "params": {"k": 3}}, "generate": "none"},
            }
        )
        providers = Providers(config.providers)
        index_paths(sorted(DEMO.glob("display-error-*.md")), providers, progress=False)
        flow = build_flow(config, providers=providers)
        stub.delay_s = 1.0
        sync = flow.invoke(inputs[0])
        providers.encoder.clear_cache()
        stub.max_in_flight = 0
        results = asyncio.run(flow.abatch(inputs, {"max_concurrency": n}))
    assert stub.max_in_flight == n  # every question's embedding request at the endpoint at once
    assert results[0]["candidates"] == sync["candidates"] and len(sync["candidates"]) == 3
    assert [e["embed_calls"] for r in results for e in r["ledger"] if e["node"] == "retrieve"] == [1] * n


@pytest.mark.integration
def test_awaited_model_calls_share_the_llm_cache(demo_dir: Path, tmp_path: Path) -> None:
    from modular_rag.config import CacheConfig
    from modular_rag.providers import Providers
    from tests.conftest import demo_flow, fake_llm, providers_config

    cfg = providers_config(demo_dir, fake_llm("first", "second"))
    cfg.cache = CacheConfig(path=str(tmp_path / "llm.sqlite"))
    env = Providers(cfg)
    assert env.llm.complete("same prompt").text == "first"
    assert asyncio.run(env.llm.acomplete("same prompt")).text == "first"  # the fake would have said "second"
    config = load_config(demo_flow(demo_dir, operators={"retrieve": "bm25"}))
    config.providers = cfg
    flow = build_flow(config)
    first = flow.invoke({"query": "What does E12 mean?"})
    again = asyncio.run(flow.ainvoke({"query": "What does E12 mean?"}))
    assert again["answer"]["text"] == first["answer"]["text"]
    generate = [e for e in again["ledger"] if e["node"] == "generate"][0]
    assert generate["llm_calls"] == 0 and generate["cache_hits"] == 1


@pytest.mark.integration
def test_a_flow_behind_an_answer_cache_keeps_its_async_operators_on_the_loop(demo_dir: Path, tmp_path: Path) -> None:
    config = template(
        "linear",
        demo_dir,
        allow_imports=True,
        operators={"rerank": {"name": KEEP_TWO}},
        answer_cache={"path": str(tmp_path / "answers.sqlite")},
    )
    flow = build_flow(config)

    async def run() -> tuple[str, dict[str, Any]]:
        return threading.current_thread().name, await flow.ainvoke({"query": QUESTION})

    async_ops.RAN_IN.clear()
    loop_thread, out = asyncio.run(run())
    assert [loop_thread] == async_ops.RAN_IN  # the inner flow ran with ainvoke, not invoke in a worker thread
    assert len(out["candidates"]) == 2 and out["answer"]["text"]
    async_ops.RAN_IN.clear()
    assert flow.invoke({"query": "How do I adjust the saddle height?"})["answer"]["text"]
    assert async_ops.RAN_IN == ["modular-rag-loop"]
