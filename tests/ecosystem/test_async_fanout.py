"""Async fan-out: the nodes of the branching, recursive and adaptive patterns that run operators themselves (a
branch's generation, a tree node's retrieval and answer, one clarification per parent of a level, FLARE's re-query
and draft, llm_critique's judgement per passage) are ``async def`` nodes: under ``ainvoke`` / ``abatch`` every
question's model calls reach a slow endpoint at once (``max_concurrency`` is the bound), a level's clarifications and
a hop's searches run together, and each gives what a sync run gives: the same answers, trace, ledger and LangChain
runs; timeouts and ``on_error`` hold inside a branch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import FlowConfig, OperatorSpec, load_config
from modular_rag.providers import Providers
from tests.ecosystem.test_async_flows import Runs
from tests.helpers.stub_llm import StubLLM
from tests.patterns.conftest import template

QUESTION = "What does error code E07 mean on the e-bike display?"
_LLM_ANSWER = {"name": "cited_answer", "params": {"mode": "llm", "min_relevance": None}}


def never_stop(state: Mapping[str, Any]) -> dict[str, Any]:
    """A judge that never accepts (FLARE re-queries every sentence; Self-RAG answers max_steps rounds)."""
    return {"verdicts": [{"judge": "never", "decision": "continue", "reason": "test", "step": state.get("step", 0)}]}


def _flows(demo_dir: Path, url: str) -> dict[str, FlowConfig]:
    """One config per kind of fan-out node, each on the demo index, its model the stub endpoint at ``url``."""
    llm = {"llm": {"name": "openai", "model": "stub", "base_url": url, "max_retries": 0}}
    flare = load_config(template("adaptive", demo_dir, params={"mode": "flare", "max_steps": 2}, providers=llm))
    flare.operators["judge"] = OperatorSpec.from_object(never_stop)  # the stub gives no token log-probabilities
    return {
        # retrieve, then one generation per document in its own branch (Send), fused by REPLUG's vote
        "branching-documents": load_config(
            template(
                "branching",
                demo_dir,
                params={"mode": "documents", "branches": 2},
                operators={"expand": "none", "fuse": "replug", "generate": _LLM_ANSWER},
                providers=llm,
            )
        ),
        # per node: retrieval and an answer; per level: one clarification per kept parent; self-verification
        "recursive": load_config(
            template(
                "recursive",
                demo_dir,
                params={"branching": 2, "max_depth": 1, "max_nodes": 3},
                operators={"generate": _LLM_ANSWER},
                providers=llm,
            )
        ),
        # the draft and the re-query (fetch, then draft again) of every sentence
        "adaptive-flare": flare,
        # llm_critique grades every retrieved passage: one yes/no call each, 4 in flight
        "adaptive-self-rag": load_config(
            template(
                "adaptive",
                demo_dir,
                params={"mode": "self_rag", "max_steps": 1},
                operators={
                    "gate": "none",
                    "draft": "none",
                    "rewrite": "none",
                    "generate": _LLM_ANSWER,
                    "judge": "reflection",
                },
                providers=llm,
            )
        ),
    }


def timeless(out: Mapping[str, Any]) -> dict[str, Any]:
    """A run's result without the clock: trace events without ``start`` and ``ms``, ledger entries without ``ms``."""
    return {
        **out,
        "trace": [{k: v for k, v in e.items() if k not in ("start", "ms")} for e in out.get("trace", [])],
        "ledger": [{k: v for k, v in e.items() if k != "ms"} for e in out.get("ledger", [])],
    }


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["branching-documents", "recursive", "adaptive-flare", "adaptive-self-rag"])
def test_fan_out_nodes_make_every_questions_model_calls_at_once_under_abatch(demo_dir: Path, kind: str) -> None:
    n = 8  # more than the event loop's default executor has threads on 2 cores (min(32, cores + 4) = 6)
    inputs = [{"query": f"{QUESTION} (case {i})"} for i in range(n)]
    with StubLLM(latency_s=0.4) as stub:
        config = _flows(demo_dir, stub.url)[kind]
        env = Providers(config.providers)
        flow = build_flow(config, providers=env)
        env.encoder.clear_cache()  # (the encoder, and its query cache, are the process's: earlier tests filled it)
        sync = flow.invoke(inputs[0])
        env.encoder.clear_cache()  # the async run embeds its queries as the sync run did
        stub.max_in_flight = 0
        results = asyncio.run(flow.abatch(inputs, {"max_concurrency": n}))
    assert stub.max_in_flight >= n  # the questions' calls were at the endpoint together: max_concurrency is the bound
    assert timeless(results[0]) == timeless(sync)  # the same answer, trace and ledger as the sync run
    assert sum(e["llm_calls"] for e in results[0]["ledger"]) >= 2


def _toc(prompt: str) -> str:
    """A scripted model for a two-level tree: every node has two interpretations, every check passes."""
    if "specific versions" in prompt:  # clarify: two children per node, named after their parent
        question = prompt.rsplit("Question: ", 1)[1].strip()
        return f"Which frame does {question[:40]!r} mean?\nWhich battery does {question[:40]!r} mean?"
    if "One interpretation of it:" in prompt:  # self-verification
        return "Yes"
    return "Covered for 5 years [1]."


@pytest.mark.integration
def test_a_tree_level_clarifies_its_parents_together_and_matches_the_sync_run(demo_dir: Path) -> None:
    from tests.conftest import ScriptedChat

    config = load_config(
        template(
            "recursive",
            demo_dir,
            params={"branching": 2, "max_depth": 2, "max_nodes": 7},
            operators={
                "generate": {"name": "cited_answer", "params": {"unsupported": "mark", "min_relevance": None}},
                "prune": "self_verify",
            },
        )
    )
    config.providers.llm = ScriptedChat.of(_toc)
    env = Providers(config.providers)
    flow = build_flow(config, providers=env)
    runs, sync_runs = Runs(), Runs()
    env.encoder.clear_cache()  # (the encoder, and its query cache, are the process's: earlier tests filled it)
    out = asyncio.run(flow.ainvoke({"query": "How long is the warranty?"}, {"callbacks": [runs]}))
    env.encoder.clear_cache()  # the sync run embeds its queries as the async run did
    sync = flow.invoke({"query": "How long is the warranty?"}, {"callbacks": [sync_runs]})
    assert [n["depth"] for n in out["tree"]] == [0, 1, 1, 2, 2, 2, 2]  # both parents of level 1 were clarified
    assert timeless(out) == timeless(sync)
    clarified = [e for e in out["trace"] if e["node"] == "expand/clarify"]
    assert [e["operator"] for e in clarified] == ["decompose"] * 3  # the root's, then both level-1 parents'
    assert sorted(runs.chat_model_lineage()) == sorted(sync_runs.chat_model_lineage())  # each call under its operator
    assert ["decompose", "expand"] in runs.chat_model_lineage()


@pytest.mark.integration
def test_a_branch_times_out_and_goes_on_under_ainvoke_as_under_invoke(demo_dir: Path) -> None:
    with StubLLM(latency_s=0.0) as stub:
        config = _flows(demo_dir, stub.url)["branching-documents"]
        config.operators["generate"] = OperatorSpec(
            name="cited_answer", params=_LLM_ANSWER["params"], timeout_s=0.5, on_error="skip"
        )
        flow = build_flow(config)
        assert flow.invoke({"query": QUESTION})["answer"]["text"]  # warm: clients made, models loaded
        stub.latency_s = 4.0
        t0 = time.perf_counter()
        out = asyncio.run(flow.ainvoke({"query": QUESTION}))
        took = time.perf_counter() - t0
        sync = flow.invoke({"query": QUESTION})
    assert took < 3.0  # both branches were cut at 0.5 s, together
    for run in (out, sync):
        events = [e for e in run["trace"] if e["node"].startswith("branch[")]
        assert [(e["status"], e["error"]) for e in events] == [
            ("error", "timed out after 0.5s (1 LLM call spent, then cancelled)")
        ] * 2
        assert [e["llm_calls"] for e in run["ledger"] if e["node"].startswith("branch[")] == [1, 1]
    assert timeless(out)["trace"] == timeless(sync)["trace"]


def _overlapping(events: list[dict[str, Any]]) -> bool:
    """Whether any two of these trace events ran at the same time."""
    spans = sorted((e["start"], e["start"] + e["ms"] / 1000) for e in events)
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))


@pytest.mark.integration
def test_a_hop_searches_from_its_passages_together_under_ainvoke_as_in_turn_under_invoke(demo_dir: Path) -> None:
    from tests.conftest import demo_flow
    from tests.operators.test_multihop import AWARD

    config = load_config(
        demo_flow(
            demo_dir,
            "recursive",
            params={"expand": "hop", "branching": 3, "max_depth": 1, "max_nodes": 10},
            operators={
                "retrieve": {"name": "hybrid", "params": {"k": 4, "pool": 20}},
                "hop": "evidence",
                "fuse": {"name": "pairs", "params": {"k": 5}},
                "context": "none",
                "generate": "none",
            },
        )
    )
    env = Providers(config.providers)
    flow = build_flow(config, providers=env)
    env.encoder.clear_cache()
    out = asyncio.run(flow.ainvoke({"query": AWARD}))
    env.encoder.clear_cache()
    sync = flow.invoke({"query": AWARD})
    searches = [[e for e in run["trace"] if e["node"] == "expand/retrieve"] for run in (out, sync)]
    assert len(searches[0]) == len(searches[1]) == 3  # one search per passage of the root the hop follows
    assert _overlapping(searches[0]) and not _overlapping(searches[1])  # together on the loop; in turn in a sync run
    assert timeless(out) == timeless(sync)
