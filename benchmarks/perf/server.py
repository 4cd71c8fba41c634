"""``python -m benchmarks.perf server``: linear flows under ``--requests`` concurrent requests through LangGraph Server
(``langgraph dev`` on loopback), their model an OpenAI-compatible stub that takes ``--latency`` seconds per call
(``tests/helpers/stub_llm.py``), the kit's async operators against the code before them.

Two servers run side by side, one on this tree and one on a worktree of ``--old`` (the last commit before async
operators: every node of an async run held a thread of the kit's pool, the one waiting on the model included). Each
serves the same configs through the ``flow`` graph, one assistant per config (``--flows``): ``template``, the linear
template on the demo index (hybrid retrieval with the bundled embedder, ``cited_answer`` in mode ``llm``, which scores
the evidence's sentences first); ``light``, the same with BM25 retrieval and no sentence scoring (``min_relevance:
null``), so the model's wait is most of a request. The servers run with ``--n-jobs-per-worker`` at the largest
request count, so every request of a burst runs at once. Bursts (``runs.wait`` with the LangGraph SDK, stateless
runs, distinct questions) alternate between the servers, ``--rounds`` each. Per flow, request count and server the
table gives throughput (requests / wall time of a burst, the mean over its bursts), p50 / p95 latency of a request
(over all its bursts), the most model calls the stub had in flight at once, and the most threads of the server's
processes during the bursts (``Threads`` of ``/proc/<pid>/status``, summed over its process group, sampled every
20 ms; the idle count after warm-up is printed above the table). Answers of the two servers are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .common import ROOT, Report, ensure_demo_index, table, worktree

OLD = "0e86dff"
"""The commit before async operators."""

WORK = ROOT / ".modular_rag" / "server-bench"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's options."""
    p.add_argument("--requests", default="64", help="concurrent requests per burst, comma-separated (default 64)")
    p.add_argument("--flows", default="template,light", help="configs served (default template,light)")
    p.add_argument("--latency", type=float, default=1.0, help="seconds per call of the stub endpoint (default 1.0)")
    p.add_argument("--rounds", type=int, default=2, help="bursts per server, alternating (default 2)")
    p.add_argument("--old", default=OLD, help=f"the commit to compare against (default {OLD}, before async operators)")


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _group_pids(leader: int) -> list[int]:
    """The processes of a process group (a server started in its own session leads it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == leader:  # the field after state and ppid: the process group
                pids.append(int(entry.name))
    return pids


def _threads(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return total


class _Sampler:
    """Samples the threads of a process group every 20 ms while running; ``peak`` is the most seen."""

    def __init__(self, leader: int) -> None:
        self.pids = _group_pids(leader)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _threads(self.pids))
            self._stop.wait(0.02)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _config_file(code: Path, home: Path) -> Path:
    """``code``'s ``langgraph.json`` written into ``home`` with its graphs' paths made absolute: the dev server reads
    them relative to its working folder, which is ``home``, not ``code``."""
    import json

    config = json.loads((code / "langgraph.json").read_text(encoding="utf-8"))
    config["graphs"] = {name: str(code / target.removeprefix("./")) for name, target in config["graphs"].items()}
    home.mkdir(parents=True, exist_ok=True)
    file = home / "langgraph.json"
    file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return file


@contextmanager
def _server(code: Path, flows: Path, log: Path, jobs: int) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``langgraph dev`` on loopback serving ``code``'s ``langgraph.json`` (its modules first on the path), the flows
    in ``flows``; yields its URL and process, then stops its process group. It runs in a folder of its own beside
    ``log``: the dev server keeps its assistants and threads in ``.langgraph_api`` of its working folder, and the
    benchmark's must not outlive it (a later ``langgraph dev`` in the repository would list them)."""
    import signal
    import urllib.request

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    langgraph = str(Path(sys.executable).parent / "langgraph")
    cmd = [
        langgraph,
        "dev",
        "--config",
        str(_config_file(code, log.with_suffix(""))),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-browser",
        "--no-reload",
        "--n-jobs-per-worker",
        str(jobs),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "MODULAR_RAG_FLOWS": str(flows),
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MODULAR_RAG_BENCH_KEY": "stub",
    }
    with open(log, "wb") as out:
        home = log.with_suffix("")
        home.mkdir(exist_ok=True)
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=home,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"langgraph dev exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"langgraph dev not ready after 300s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url, proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=15)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


async def _burst(url: str, assistant: str, questions: list[str]) -> tuple[float, list[float], list[str]]:
    """All questions at once, each a stateless ``runs.wait`` of an assistant: wall seconds, each request's seconds,
    the answers."""
    from langgraph_sdk import get_client

    client = get_client(url=url, timeout=600)

    async def ask(question: str) -> tuple[float, str]:
        t0 = time.perf_counter()
        out = await client.runs.wait(None, assistant, input={"query": question})
        return time.perf_counter() - t0, str((out or {}).get("answer", {}).get("text", ""))  # type: ignore[union-attr]

    t0 = time.perf_counter()
    done = await asyncio.gather(*(ask(q) for q in questions))
    return time.perf_counter() - t0, [s for s, _ in done], [a for _, a in done]


def _config(flow: str, stub_url: str, index: str) -> dict[str, Any]:
    """The served config ``flow`` (``template`` or ``light``, see the module's docstring)."""
    from modular_rag import template_path

    config = yaml.safe_load(template_path("linear").read_text())
    config["name"] = f"bench-{flow}"
    config["providers"]["vectorstore"] = {"name": "chroma", "path": index, "collection": "demo"}
    config["providers"]["llm"] = {
        "name": "openai",
        "model": "stub",
        "base_url": stub_url,
        "api_key_env": "MODULAR_RAG_BENCH_KEY",
        "max_retries": 0,
    }
    config["operators"]["generate"] = {"name": "cited_answer", "params": {"mode": "llm"}}
    if flow == "light":
        config["operators"]["retrieve"] = {"name": "bm25", "params": {"k": 5}}
        config["operators"]["generate"]["params"]["min_relevance"] = None
    elif flow != "template":
        raise SystemExit(f"--flows: unknown flow {flow!r}; flows: template, light")
    return dict(config)


def _assistant(url: str, flow: str) -> str:
    """An assistant of the ``flow`` graph serving the config ``flow``."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, timeout=600)
    return str(client.assistants.create("flow", context={"flow": flow}, name=flow)["assistant_id"])


def run(args: argparse.Namespace, out: Report) -> None:
    from tests.helpers.stub_llm import StubLLM

    from .concurrency import _demo_queries

    index = str(ROOT / ".modular_rag" / "demo")
    ensure_demo_index(index)
    old = worktree(args.old, WORK)
    before = "thread per step" if args.old == OLD else "before"
    codes = {"this tree": ROOT, f"{before} ({args.old[:7]})": old}
    if args.old != OLD:
        out.name = f"server-{args.old[:7]}"  # --save: a results file of its own
    counts = [int(n) for n in args.requests.split(",")]
    flows = args.flows.split(",")
    stats: dict[tuple[str, int, str], dict[str, Any]] = {}
    with StubLLM(latency_s=args.latency) as stub, tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp) / "flows"
        folder.mkdir()
        for flow in flows:
            (folder / f"{flow}.yaml").write_text(yaml.safe_dump(_config(flow, stub.url, index)))
        servers = {
            label: stack.enter_context(_server(code, folder, Path(tmp) / f"{i}.log", max(counts)))
            for i, (label, code) in enumerate(codes.items())
        }
        assistants: dict[tuple[str, str], str] = {}
        idle: dict[str, int] = {}
        for label, (url, proc) in servers.items():
            for flow in flows:
                assistants[label, flow] = _assistant(url, flow)
                asyncio.run(_burst(url, assistants[label, flow], ["warm-up: load the embedder and the index"]))
            idle[label] = _threads(_group_pids(proc.pid))
        for flow in flows:
            for n in counts:
                questions = _demo_queries(n)
                order = [
                    label for r in range(args.rounds) for label in (list(codes) if r % 2 == 0 else list(codes)[::-1])
                ]
                for label in order:
                    url, proc = servers[label]
                    s = stats.setdefault((flow, n, label), {"walls": [], "latencies": [], "answers": [], "peak": 0})
                    before = stub.max_in_flight = 0
                    with _Sampler(proc.pid) as sampler:
                        wall, latencies, answers = asyncio.run(_burst(url, assistants[label, flow], questions))
                    s["walls"].append(wall)
                    s["latencies"].extend(latencies)
                    s["answers"].append(answers)
                    s["peak"] = max(s["peak"], sampler.peak)
                    s["in_flight"] = max(s.get("in_flight", before), stub.max_in_flight)
                    out(
                        f"{flow}, {n} requests, {label}: {wall:.2f}s, most threads {sampler.peak}, "
                        f"most model calls in flight {stub.max_in_flight}"
                    )
    out()
    out(
        f"linear flows served by `langgraph dev` (--n-jobs-per-worker {max(counts)}), one assistant of the flow graph "
        f"per config; model: an OpenAI-compatible stub taking {args.latency:.2f}s per call; bursts of concurrent "
        f"stateless runs alternating between the servers, {args.rounds} per server; {os.cpu_count()} CPU cores "
        f"(shared); threads idle after warm-up: " + ", ".join(f"{label} {n}" for label, n in idle.items())
    )
    rows = []
    for (flow, n, label), s in stats.items():
        lat = s["latencies"]
        rows.append(
            [
                flow,
                n,
                label,
                round(float(np.mean([n / w for w in s["walls"]])), 2),
                round(float(np.percentile(lat, 50)), 2),
                round(float(np.percentile(lat, 95)), 2),
                s["in_flight"],
                s["peak"],
            ]
        )
    out(
        table(
            ["flow", "requests", "server", "requests/s", "p50 s", "p95 s", "model calls at once", "threads max"], rows
        )
    )
    for flow in flows:
        for n in counts:
            runs = [a for (f, c, _), s in stats.items() if (f, c) == (flow, n) for a in s["answers"]]
            out(f"{flow}, {n} requests: answers identical across servers and bursts: {all(a == runs[0] for a in runs)}")
