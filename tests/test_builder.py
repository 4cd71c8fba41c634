"""Step controls apply to any slot without code changes: disable, skip_when, timeout, on_error; trace and ledger."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow, evaluate_condition
from modular_rag.config import Condition
from modular_rag.errors import OperatorError, OperatorTimeout
from tests.conftest import demo_flow

pytestmark = pytest.mark.integration

Q = {"query": "What does display code E17 report?"}


def flow(demo_dir: Path, **operators: Any):
    return build_flow(demo_flow(demo_dir, operators={"generate": "none", **operators}, allow_imports=True))


def test_skip_when_skips_the_step_and_says_so(demo_dir: Path) -> None:
    out = flow(
        demo_dir,
        retrieve="bm25",
        rerank={"name": "embedding", "skip_when": {"key": "len:candidates", "op": "lt", "value": 50}},
    ).invoke(Q)
    step = next(e for e in out["trace"] if e["node"] == "rerank")
    assert step["status"] == "skipped"
    assert all(h["channel"] == "bm25" for h in out["candidates"])


def test_timeout_and_on_error_skip(demo_dir: Path) -> None:
    def slow(state: Mapping[str, Any]) -> dict[str, Any]:
        time.sleep(2)
        return {"candidates": []}

    def boom(state: Mapping[str, Any]) -> dict[str, Any]:
        raise RuntimeError("reranker exploded")

    from modular_rag.config import OperatorSpec, load_config

    config = load_config(demo_flow(demo_dir, operators={"retrieve": "bm25", "generate": "none"}))
    spec = OperatorSpec.from_object(slow)
    spec.timeout_s = 0.2
    config.operators["rerank"] = spec
    t0 = time.perf_counter()
    with pytest.raises(OperatorTimeout, match=r"rerank \(<slow>\): timed out after 0.2s"):
        build_flow(config).invoke(Q)
    assert time.perf_counter() - t0 < 1.5
    spec.on_error = "skip"
    out = build_flow(config).invoke(Q)
    event = next(e for e in out["trace"] if e["node"] == "rerank")
    assert event["status"] == "error" and "timed out" in event["error"]
    assert out["candidates"][0]["channel"] == "bm25"  # the retrieval's hits survive the skipped step

    boom_spec = OperatorSpec.from_object(boom)
    config.operators["rerank"] = boom_spec
    with pytest.raises(OperatorError, match="reranker exploded"):
        build_flow(config).invoke(Q)


def test_chained_operators_each_get_a_trace_and_ledger_entry(demo_dir: Path) -> None:
    out = flow(
        demo_dir,
        retrieve={"name": "hybrid", "params": {"k": 6}},
        rerank=[{"name": "embedding", "params": {"top_k": 4}}, {"name": "tests.helpers.custom_ops:keep_two"}],
    ).invoke({"query": "Which display code means a motor controller communication fault?"})
    steps = [(e["node"], e["operator"]) for e in out["trace"]]
    assert steps[:3] == [
        ("retrieve", "hybrid"),
        ("rerank", "embedding"),
        ("rerank", "tests.helpers.custom_ops:keep_two"),
    ]
    assert len(out["candidates"]) == 2 and out["candidates"][0]["channel"] == "embedding"
    assert len(out["ledger"]) == len(out["trace"])
    assert out["ledger"][0]["retrievals"] == 2 and out["ledger"][0]["embed_calls"] == 1  # a query not seen before


def test_unknown_state_keys_are_refused(demo_dir: Path) -> None:
    from modular_rag.config import OperatorSpec, load_config

    config = load_config(demo_flow(demo_dir, operators={"retrieve": "bm25", "generate": "none"}))
    config.operators["rerank"] = OperatorSpec.from_object(lambda state: {"candidatez": []})
    with pytest.raises(OperatorError, match="unknown state keys"):
        build_flow(config).invoke(Q)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("condition", "state", "expected"),
    [
        ({"key": "route", "op": "eq", "value": "exact"}, {"route": "exact"}, True),
        ({"key": "route", "op": "eq", "value": "exact"}, {}, False),
        ({"key": "candidates", "op": "empty"}, {"candidates": []}, True),
        ({"key": "answer.refused", "op": "eq", "value": True}, {"answer": {"refused": True}}, True),
        ({"key": "len:queries", "op": "ge", "value": 2}, {"queries": ["a", "b"]}, True),
        ({"key": "step", "op": "gt", "value": 1}, {"step": "x"}, False),
    ],
)
def test_conditions(condition: dict, state: dict, expected: bool) -> None:
    assert evaluate_condition(Condition(**condition), state) is expected


def test_a_timed_out_step_cancels_its_model_call_and_records_it(demo_dir: Path) -> None:
    import threading

    from tests.helpers.stub_llm import StubLLM

    with StubLLM(latency_s=4.0) as stub:
        config = demo_flow(
            demo_dir,
            operators={
                "retrieve": "bm25",
                "generate": "none",
                "rewrite": {"name": "rewrite", "timeout_s": 0.5, "on_error": "skip"},
            },
            providers={
                "llm": {
                    "name": "openai",
                    "model": "stub",
                    "base_url": stub.url,
                    "api_key_env": "NO_KEY",
                    "max_retries": 2,
                },
                "vectorstore": {"name": "chroma", "path": str(demo_dir), "collection": "demo"},
            },
        )
        from modular_rag.config import load_config
        from modular_rag.providers import Providers

        env = Providers(load_config(config).providers)
        assert env.llm  # built before the clock starts: the step's time goes to the call itself
        t0 = time.perf_counter()
        out = build_flow(config, providers=env).invoke(Q)
        elapsed = time.perf_counter() - t0
        entry = next(e for e in out["ledger"] if e["node"] == "rewrite")
        event = next(e for e in out["trace"] if e["node"] == "rewrite")
        assert event["status"] == "error" and "timed out" in event["error"]
        assert entry["llm_calls"] == 1 and entry["prompt_tokens"] > 0  # the cancelled call is on the ledger
        assert "1 LLM call spent, then cancelled" in event["error"]
        assert elapsed < 3.0  # the request was cut at the deadline, not retried past it
        for worker in [t for t in threading.enumerate() if t.name.startswith("op-timeout")]:
            worker.join(timeout=1.0)  # unwinding its cancelled call; it must not go on (old code: 4 s and more)
            assert not worker.is_alive()
        assert stub.calls == 1


def test_supersteps_counts_the_longest_path_and_the_loop_once_per_further_round() -> None:
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from modular_rag.builder import supersteps

    class S(TypedDict, total=False):
        n: int

    graph = StateGraph(S)
    for name in ("a", "b", "c", "d"):
        graph.add_node(name, lambda s: {})
    graph.add_edge(START, "a")
    graph.add_conditional_edges("a", lambda s: "b", {"b": "b", "c": "c"})  # a short and a long way round
    graph.add_edge("b", "c")
    graph.add_conditional_edges("c", lambda s: "d", {"again": "a", "d": "d"})
    graph.add_edge("d", END)
    assert supersteps(graph) == 1 + 4 and supersteps(graph, 3) == 1 + 4 + 2 * 3  # the input step, a-b-c-d, a-b-c


def keep_going(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"verdicts": [{"judge": "always", "decision": "continue", "reason": "test", "step": state.get("step", 0)}]}


@pytest.mark.parametrize(
    "pattern, params, operators",
    [
        ("iterative", {"rounds": 3}, {"judge": "none"}),
        ("iterative", {"rounds": 3}, {"judge": keep_going}),
        ("adaptive", {"mode": "self_rag", "max_steps": 3}, {"judge": keep_going, "gate": "none"}),
        ("recursive", {"max_depth": 2, "max_nodes": 7}, {}),
    ],
)
def test_a_run_at_its_loop_bound_fits_the_derived_recursion_limit(
    pattern: str, params: dict[str, Any], operators: dict[str, Any], demo_dir: Path
) -> None:
    """The builder's limit is exact: with no margin at all, a run that goes round as often as the bound allows ends
    (a hand-counted bound one step short fails here with GraphRecursionError)."""
    from modular_rag.builder import supersteps
    from modular_rag.config import OperatorSpec, load_config
    from tests.conftest import fake_llm
    from tests.patterns.conftest import template

    config = load_config(template(pattern, demo_dir, params=params))
    config.providers.llm = fake_llm("Error E07 means the motor overheated [1].\nWhich year was it?")
    for slot, op in operators.items():
        config.operators[slot] = OperatorSpec.from_object(op) if callable(op) else OperatorSpec.model_validate(op)
    flow = build_flow(config)
    bound = params.get("rounds") or params.get("max_steps") or params["max_depth"] + 1  # rounds, steps, levels
    limit = supersteps(flow.builder, bound)  # type: ignore[arg-type]
    out = flow.invoke({"query": "What does error code E07 mean?"}, {"recursion_limit": limit})
    assert out["answer"]["text"]
    if pattern != "recursive":
        assert out["step"] == bound
