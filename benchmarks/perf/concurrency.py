"""``python -m benchmarks.perf concurrency``: the linear demo flow (hybrid retrieval, cited answer) on many queries,
serially (``invoke`` in a loop) and with bounded concurrency (``batch`` / ``abatch`` with ``max_concurrency``,
``modular-rag eval --concurrency N``), (a) against an OpenAI-compatible stub that takes ``--latency`` seconds per
call (``tests/helpers/stub_llm.py``), target: 64 queries at concurrency 16 in <= 1/8 of the serial time; (b) against
the local llama-server started with ``--slots`` parallel slots: throughput against serial.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import ROOT, Report, ensure_demo_index, table, verdict


def _demo_config(llm: dict[str, Any], index: str, *, max_tokens: int | None = None) -> Any:
    from modular_rag import template_path
    from modular_rag.config import load_config

    data = load_config(template_path("linear")).to_dict()
    data["providers"]["llm"] = llm
    data["providers"]["vectorstore"]["path"] = index
    if max_tokens is not None:
        data["operators"]["generate"] = {"name": "cited_answer", "params": {"max_tokens": max_tokens}}
    return load_config(data)


def _demo_queries(n: int) -> list[str]:
    from modular_rag.eval.datasets import load_demo

    base = [q.text for q in load_demo().queries]
    return [base[i % len(base)] + ("" if i < len(base) else f" (case {i // len(base)})") for i in range(n)]


def _clear_query_cache(env: Any) -> None:
    """Forget cached query embeddings, so every run embeds its queries."""
    env.encoder.clear_cache()


@contextmanager
def _timed(label: str, store: dict[str, float]) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    store[label] = time.perf_counter() - t0


def run(args: argparse.Namespace, out: Report) -> None:
    import asyncio

    from modular_rag.builder import build_flow
    from modular_rag.providers import Providers
    from tests.helpers.stub_llm import StubLLM

    index = str(ROOT / ".modular_rag" / "demo")
    ensure_demo_index(index)
    queries = _demo_queries(args.queries)
    n, c = len(queries), args.concurrency
    with StubLLM(latency_s=args.latency) as stub:
        config = _demo_config({"name": "openai", "model": "stub", "base_url": stub.url, "max_retries": 0}, index)
        env = Providers(config.providers)
        flow = build_flow(config, providers=env)
        flow.invoke({"query": "warm-up: load the embedder and the index"})
        inputs = [{"query": q} for q in queries]
        times: dict[str, float] = {}
        answers: dict[str, list[str]] = {}
        _clear_query_cache(env)
        with _timed("serial", times):
            answers["serial"] = [flow.invoke(x)["answer"]["text"] for x in inputs]
        _clear_query_cache(env)
        with _timed("batch", times):
            answers["batch"] = [r["answer"]["text"] for r in flow.batch(inputs, {"max_concurrency": c})]
        _clear_query_cache(env)
        with _timed("abatch", times):
            results = asyncio.run(flow.abatch(inputs, {"max_concurrency": c}))
            answers["abatch"] = [r["answer"]["text"] for r in results]
        peak = stub.max_in_flight
        eval_times = _eval_cli_times(stub.url, index, c)
    same = answers["serial"] == answers["batch"] == answers["abatch"]
    rows = [["invoke, one by one", 1, n, round(times["serial"], 2), round(n / times["serial"], 2), 1.0, ""]]
    for mode in ("batch", "abatch"):
        share = times[mode] / times["serial"]
        rows.append(
            [
                f"{mode}(max_concurrency={c})",
                c,
                n,
                round(times[mode], 2),
                round(n / times[mode], 2),
                round(share, 3),
                verdict(share <= 1 / 8),
            ]
        )
    for conc, (seconds, count) in eval_times.items():
        share = seconds / eval_times[1][0]
        rows.append(
            [
                f"modular-rag eval --dataset demo --concurrency {conc}",
                conc,
                count,
                round(seconds, 2),
                round(count / seconds, 2),
                round(share, 3),
                "",
            ]
        )
    out(
        f"(a) linear demo flow (hybrid retrieval over the demo index, cited answer) against an OpenAI-compatible stub "
        f"that takes {args.latency:.2f}s per call; {n} distinct queries"
    )
    out(table(["run", "concurrency", "queries", "seconds", "queries/s", "time / serial", "target <= 0.125"], rows))
    out(
        f"answers identical and in query order across serial, batch and abatch: {same}; "
        f"most calls the stub had in flight at once: {peak}"
    )
    out()
    _local_slots(args, index, out)


def _eval_cli_times(url: str, index: str, concurrency: int) -> dict[int, tuple[float, int]]:
    """``modular-rag eval --dataset demo`` with the stub, serially and with ``--concurrency``: seconds, queries."""
    import contextlib
    import io

    import yaml

    from modular_rag.cli import main as cli
    from modular_rag.eval.datasets import load_demo

    out: dict[int, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "stub.yaml"
        config.write_text(
            yaml.safe_dump(_demo_config({"name": "openai", "model": "stub", "base_url": url}, index).to_dict())
        )
        for conc in (1, concurrency):
            with contextlib.redirect_stdout(io.StringIO()):
                t0 = time.perf_counter()
                status = cli(
                    ["eval", "--dataset", "demo", "--config", str(config), "--concurrency", str(conc), "--quiet"]
                )
                seconds = time.perf_counter() - t0
            if status != 0:
                raise RuntimeError(f"modular-rag eval --concurrency {conc} exited with {status}")
            out[conc] = (seconds, len(load_demo().queries))
    return out


def _local_slots(args: argparse.Namespace, index: str, out: Report) -> None:
    from modular_rag.builder import build_flow
    from modular_rag.providers import Providers

    slots = args.slots
    config = _demo_config({"name": "local", "parallel": slots}, index, max_tokens=64)
    env = Providers(config.providers)
    flow = build_flow(config, providers=env)
    t0 = time.perf_counter()
    flow.invoke({"query": "warm-up: start the server"})
    started = time.perf_counter() - t0
    queries = _demo_queries(args.local_queries)
    inputs = [{"query": q} for q in queries]
    times: dict[str, float] = {}
    tokens: dict[str, int] = {}
    for label, run in (
        ("serial", lambda: [flow.invoke(x) for x in inputs]),
        ("batch", lambda: flow.batch(inputs, {"max_concurrency": slots})),
    ):
        _clear_query_cache(env)
        t0 = time.perf_counter()
        results = run()
        times[label] = time.perf_counter() - t0
        tokens[label] = sum(e.get("completion_tokens", 0) for r in results for e in r.get("ledger", []))
    speedup = times["serial"] / times["batch"]
    rows = [
        [
            "invoke, one by one",
            1,
            len(inputs),
            round(times["serial"], 1),
            round(len(inputs) / times["serial"], 3),
            tokens["serial"],
            "",
        ],
        [
            f"batch(max_concurrency={slots})",
            slots,
            len(inputs),
            round(times["batch"], 1),
            round(len(inputs) / times["batch"], 3),
            tokens["batch"],
            round(speedup, 2),
        ],
    ]
    out(
        f"(b) the same flow against the local llama-server (SmolLM2-135M, {slots} parallel slots, answers of up to "
        f"64 tokens, {os.cpu_count()} CPU cores; first query with server start {started:.1f}s, not counted)"
    )
    out(
        table(
            ["run", "concurrency", "queries", "seconds", "queries/s", "completion tokens", "throughput x serial"], rows
        )
    )
