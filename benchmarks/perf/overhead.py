"""``python -m benchmarks.perf overhead``: the linear pattern with retrieval-only operators (``retrieve`` + ``context``;
no LLM) built by the kit, against the same operator functions (taken from the same builder) called one after the
other on a dict. Per query over SciFact queries (dev, then train), the two run back to back in rotating order, the
query embedding cache cleared before each call so both embed the query. Target: ratio <= 1.05. Two more runs split
the difference: the operators through the kit's per-operator wrapper without a graph, and the same functions as the
nodes of a bare LangGraph ``StateGraph`` (LangGraph's own cost, no kit).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from .common import Report, scifact_queries, table, verdict


def run(args: argparse.Namespace, out: Report) -> None:
    from modular_rag.builder import FlowBuilder, build_flow
    from modular_rag.config import load_config
    from modular_rag.eval import load_beir
    from modular_rag.eval.runner import dataset_providers

    dataset = load_beir(args.dataset)
    env = dataset_providers(dataset, progress=False, log=lambda line: print(line, file=sys.stderr))
    queries = scifact_queries(args.dataset, args.queries)
    encoder: Any = env.encoder  # the SentenceEncoder (its query cache is cleared before each call)
    out(
        f"SciFact index: {env.index.count()} chunks; {len(queries)} queries, each run the four ways below back to "
        "back, rotating which goes first; query embedding cache cleared before every call"
    )
    rows = []
    for name in args.retrieve.split(","):
        config = load_config(
            {
                "pattern": "linear",
                "name": f"overhead-{name}",
                "operators": {"retrieve": {"name": name, "params": {"k": 10}}, "generate": "none"},
            }
        )
        flow = build_flow(config, providers=env)
        builder = FlowBuilder(config, "linear", providers=env)
        nodes = [n for n in flow.get_graph().nodes if not n.startswith("__")]

        steps = [step for node in nodes for step in builder.steps(node)]
        fns = [step.fn for step in steps]

        def direct(query: str, fns: Sequence[Callable[..., dict[str, Any]]] = fns) -> dict[str, Any]:
            state: dict[str, Any] = {"query": query}
            for fn in fns:
                state.update(fn(state))
            return state

        def kit_steps(query: str, steps: Sequence[Any] = steps) -> dict[str, Any]:
            state: dict[str, Any] = {"query": query}
            for step in steps:  # the kit's per-operator wrapper (checks, trace, ledger) without a graph
                state.update(step.run(state)[0])
            return state

        bare = _bare_graph(nodes, fns)
        runs: dict[str, Callable[[str], Any]] = {
            "direct": direct,
            "kit steps": kit_steps,
            "bare": lambda query, bare=bare: bare.invoke({"query": query}),
            "graph": lambda query, flow=flow: flow.invoke({"query": query}),
        }
        for q in queries[:10]:  # warm-up: model, index and code paths
            for run in runs.values():
                run(q)
        times: dict[str, list[float]] = {label: [] for label in runs}
        order = list(runs.items())
        for i, q in enumerate(queries):
            for label, run in order[i % len(order) :] + order[: i % len(order)]:  # rotate which goes first
                encoder.clear_cache()
                t0 = time.perf_counter()
                result = run(q)
                times[label].append((time.perf_counter() - t0) * 1000)
                assert result.get("evidence") is not None, label
        mean = {label: statistics.mean(t) for label, t in times.items()}
        ratio = sum(times["graph"]) / sum(times["direct"])
        rows.append(
            [
                f"{name} ({' -> '.join(nodes)})",
                *(round(mean[label], 2) for label in runs),
                round(sum(times["bare"]) / sum(times["direct"]), 3),
                round(sum(times["graph"]) / sum(times["bare"]), 3),
                round(ratio, 3),
                verdict(ratio <= 1.05),
            ]
        )
    out()
    out(
        table(
            [
                "retrieval-only linear flow",
                "direct ms/q",
                "kit steps ms/q",
                "bare LangGraph ms/q",
                "kit graph ms/q",
                "bare LangGraph / direct",
                "kit graph / bare LangGraph",
                "kit graph / direct",
                "target <= 1.05",
            ],
            rows,
        )
    )
    out(
        "direct: the operator functions called one after the other on a dict; kit steps: the same through the kit's "
        "per-operator wrapper (checks, trace, ledger), no graph; bare LangGraph: the same functions as the nodes of "
        "a plain StateGraph (the kit's state schema, no wrapper); kit graph: the flow build_flow returns."
    )
    out()
    out(_framework_floor())


def _bare_graph(nodes: Sequence[str], fns: Sequence[Callable[..., dict[str, Any]]]) -> Any:
    """A plain LangGraph chain of ``fns`` as nodes, on the kit's state schema: LangGraph's own cost, no kit."""
    from langgraph.graph import END, START, StateGraph

    from modular_rag.state import RAGState

    graph = StateGraph(RAGState)
    previous = START
    for node, fn in zip(nodes, fns, strict=True):
        graph.add_node(node, fn)
        graph.add_edge(previous, node)
        previous = node
    graph.add_edge(previous, END)
    return graph.compile()


def _framework_floor() -> str:
    """The graph's fixed cost: the linear pattern's two retrieval-only nodes with operators that return at once."""
    from modular_rag.builder import _Step, make_node
    from modular_rag.config import OperatorSpec

    hits = [{"chunk_id": str(i), "text": "x" * 300, "score": 1.0, "channel": "bm25", "metadata": {}} for i in range(10)]

    def retrieve(state: Any) -> dict[str, Any]:
        return {"candidates": list(hits)}

    def context(state: Any) -> dict[str, Any]:
        return {"evidence": [{"ref": i + 1, **h} for i, h in enumerate(state["candidates"][:5])]}

    def direct() -> None:
        state: dict[str, Any] = {"query": "q"}
        state.update(retrieve(state))
        state.update(context(state))

    def traced(name: str, fn: Callable[[Any], dict[str, Any]]) -> Any:
        return make_node([_Step(name, name, fn, OperatorSpec(name=name))])

    names = ["retrieve", "context"]
    graphs = {
        "LangGraph alone": _bare_graph(names, [retrieve, context]),
        "LangGraph + kit tracing": _bare_graph(names, [traced("retrieve", retrieve), traced("context", context)]),
    }

    def per_call(fn: Callable[[], Any], n: int = 400) -> float:
        for _ in range(20):
            fn()
        best = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best.append((time.perf_counter() - t0) * 1000 / n)
        return min(best)

    rows: list[list[Any]] = [["operators called directly", round(per_call(direct), 4)]]
    for label, compiled in graphs.items():
        rows.append([label, round(per_call(partial(compiled.invoke, {"query": "q"})), 3)])
    return "Fixed cost per query with operators that return at once (best of 3 x 400 calls):\n" + table(
        ["two-node retrieval-only flow", "ms/query"], rows
    )
