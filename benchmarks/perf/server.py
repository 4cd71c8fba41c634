"""``python -m benchmarks.perf server``: the served linear flow under ``--requests`` concurrent requests through
LangGraph Server (``langgraph dev`` on loopback), its model an OpenAI-compatible stub that takes ``--latency`` seconds
per call (``tests/helpers/stub_llm.py``), the kit's async operators against the code before them.

Two servers run side by side, one on this tree and one on a worktree of ``--old`` (the last commit before async
operators: every node of an async run held a thread of the kit's pool, the one waiting on the model included). Each
serves the same config (the linear template on the demo index, hybrid retrieval, ``cited_answer`` in mode ``llm``)
with ``--n-jobs-per-worker`` at the request count, so the server runs every request at once. Bursts of requests
(``runs.wait`` with the LangGraph SDK, stateless runs, distinct questions) alternate between the servers, ``--rounds``
each; per server the table gives throughput (requests / wall time of a burst, the mean over its bursts), p50 / p95
latency of a request (over all its bursts), and the threads of the server's processes (``Threads`` of
``/proc/<pid>/status``, summed over its process group, sampled every 20 ms): idle after a warm-up run, and the most
during the bursts. Answers of the two servers are compared.
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

from .common import ROOT, Report, ensure_demo_index, table

OLD = "0e86dff"
"""The commit before async operators."""

WORK = ROOT / ".modular_rag" / "server-bench"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's options."""
    p.add_argument("--requests", type=int, default=64, help="concurrent requests per burst (default 64)")
    p.add_argument("--latency", type=float, default=1.0, help="seconds per call of the stub endpoint (default 1.0)")
    p.add_argument("--rounds", type=int, default=2, help="bursts per server, alternating (default 2)")
    p.add_argument("--old", default=OLD, help=f"the commit to compare against (default {OLD}, before async operators)")


def _tree(commit: str) -> Path:
    """A worktree of ``commit`` (checked out once, kept under ``.modular_rag/server-bench/``)."""
    commit = subprocess.run(["git", "rev-parse", "--short=10", commit], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    tree = WORK / f"code-{commit}"
    if not tree.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
    return tree


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


@contextmanager
def _server(code: Path, flows: Path, log: Path, jobs: int) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``langgraph dev`` on loopback serving ``code``'s ``langgraph.json`` (its modules first on the path), the flows
    in ``flows``; yields its URL and process, then stops its process group."""
    import signal
    import urllib.request

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    langgraph = str(Path(sys.executable).parent / "langgraph")
    cmd = [langgraph, "dev", "--config", str(code / "langgraph.json"), "--host", "127.0.0.1", "--port", str(port),
           "--no-browser", "--no-reload", "--n-jobs-per-worker", str(jobs)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(code), "MODULAR_RAG_FLOWS": str(flows), "LANGGRAPH_CLI_NO_ANALYTICS": "1",
           "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "MODULAR_RAG_BENCH_KEY": "stub"}  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=code, env=env,
                                start_new_session=True)  # fmt: skip
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


async def _burst(url: str, questions: list[str]) -> tuple[float, list[float], list[str]]:
    """All questions at once, each a stateless ``runs.wait`` of the linear graph: wall seconds, each request's
    seconds, the answers."""
    from langgraph_sdk import get_client

    client = get_client(url=url, timeout=600)

    async def ask(question: str) -> tuple[float, str]:
        t0 = time.perf_counter()
        out = await client.runs.wait(None, "linear", input={"query": question})
        return time.perf_counter() - t0, str((out or {}).get("answer", {}).get("text", ""))  # type: ignore[union-attr]

    t0 = time.perf_counter()
    done = await asyncio.gather(*(ask(q) for q in questions))
    return time.perf_counter() - t0, [s for s, _ in done], [a for _, a in done]


def _config(stub_url: str, index: str) -> dict[str, Any]:
    from modular_rag import template_path

    config = yaml.safe_load(template_path("linear").read_text())
    config["providers"]["vectorstore"] = {"name": "chroma", "path": index, "collection": "demo"}
    config["providers"]["llm"] = {"name": "openai", "model": "stub", "base_url": stub_url,
                                  "api_key_env": "MODULAR_RAG_BENCH_KEY", "max_retries": 0}  # fmt: skip
    config["operators"]["generate"] = {"name": "cited_answer", "params": {"mode": "llm"}}
    return dict(config)


def run(args: argparse.Namespace, out: Report) -> None:
    from tests.helpers.stub_llm import StubLLM

    from .concurrency import _demo_queries

    index = str(ROOT / ".modular_rag" / "demo")
    ensure_demo_index(index)
    old = _tree(args.old)
    codes = {"async (this tree)": ROOT, f"thread per step ({args.old[:7]})": old}
    n = args.requests
    stats: dict[str, dict[str, Any]] = {label: {"walls": [], "latencies": [], "answers": []} for label in codes}
    with StubLLM(latency_s=args.latency) as stub, tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        flows = Path(tmp) / "flows"
        flows.mkdir()
        (flows / "linear.yaml").write_text(yaml.safe_dump(_config(stub.url, index)))
        servers = {label: stack.enter_context(_server(code, flows, Path(tmp) / f"{i}.log", n))
                   for i, (label, code) in enumerate(codes.items())}  # fmt: skip
        for label, (url, proc) in servers.items():
            asyncio.run(_burst(url, ["warm-up: load the embedder and the index"]))
            stats[label]["idle"] = _threads(_group_pids(proc.pid))
            stats[label]["peak"] = stats[label]["idle"]
        order = [label for r in range(args.rounds) for label in (list(codes) if r % 2 == 0 else list(codes)[::-1])]
        for i, label in enumerate(order):
            url, proc = servers[label]
            questions = _demo_queries(n)
            with _Sampler(proc.pid) as sampler:
                wall, latencies, answers = asyncio.run(_burst(url, questions))
            stats[label]["walls"].append(wall)
            stats[label]["latencies"].extend(latencies)
            stats[label]["answers"].append(answers)
            stats[label]["peak"] = max(stats[label]["peak"], sampler.peak)
            out(f"burst {i + 1}/{len(order)} {label}: {n} requests in {wall:.2f}s, "
                f"most threads {sampler.peak}")  # fmt: skip
        calls = stub.calls
    rows = []
    for label, s in stats.items():
        lat = s["latencies"]
        rows.append([label, n, len(s["walls"]), round(float(np.mean([n / w for w in s["walls"]])), 2),
                     round(float(np.percentile(lat, 50)), 2), round(float(np.percentile(lat, 95)), 2),
                     s["idle"], s["peak"]])  # fmt: skip
    out()
    out(f"linear flow (hybrid retrieval over the demo index, cited_answer mode llm) served by `langgraph dev` "
        f"(--n-jobs-per-worker {n}); model: an OpenAI-compatible stub taking {args.latency:.2f}s per call; "
        f"{n} concurrent stateless runs per burst, bursts alternating; {os.cpu_count()} CPU cores (shared)")
    out(table(["server", "concurrent", "bursts", "requests/s", "p50 s", "p95 s", "threads idle", "threads max"],
              rows))  # fmt: skip
    first = [s["answers"] for s in stats.values()]
    same = all(a == first[0][0] for answers in first for a in answers)
    out(f"answers identical across servers and bursts: {same}; stub calls: {calls}")
