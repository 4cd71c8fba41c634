"""The workbench page against the command line's run, on the same question in the same process, warm: time to the
first node and to the answer through the page (``POST /api/ask`` over HTTP to uvicorn on loopback, Server-Sent
Events read as they come) and through the CLI's path (``flow.stream(..., stream_mode=["updates", "values"])`` on the
same built flow, as ``modular-rag run --stream``); then N askers at once through the page, and their errors.

    .venv/bin/python benchmarks/ui.py [--index DIR] [--repeats 20] [--askers 20] [--save]

The index defaults to a demo index in a temporary folder (indexed first, untimed); the config is the linear template
(no LLM call), so the figures are the page's own overhead over the kit's run.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

QUESTION = "What does error code E07 mean on the e-bike display?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _page_ask(client: Any, url: str, question: str) -> tuple[float, float, dict[str, Any]]:
    """One question through the page: ms to the first node event, ms to the result event, the result."""
    start = time.perf_counter()
    first = 0.0
    result: dict[str, Any] = {}
    with client.stream("POST", f"{url}/api/ask", json={"question": question, "config": "linear"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.read()[:200]!r}")
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["event"] == "node" and not first:
                first = (time.perf_counter() - start) * 1000
            elif event["event"] == "result":
                result = event
            elif event["event"] == "error":
                raise RuntimeError(event["message"])
    return first, (time.perf_counter() - start) * 1000, result


def _cli_ask(flow: Any, question: str) -> tuple[float, float, dict[str, Any]]:
    """One question as ``modular-rag run --stream`` runs it: ms to the first node update, ms to the final state."""
    start = time.perf_counter()
    first = 0.0
    final: dict[str, Any] = {}
    for mode, chunk in flow.stream({"query": question}, stream_mode=["updates", "values"]):
        if mode == "values":
            final = chunk
        elif not first:
            first = (time.perf_counter() - start) * 1000
    return first, (time.perf_counter() - start) * 1000, final


def _row(label: str, samples: list[tuple[float, float, Any]]) -> str:
    firsts = sorted(s[0] for s in samples)
    totals = sorted(s[1] for s in samples)
    p95 = max(0, round(0.95 * len(totals)) - 1)
    return (
        f"{label:<32} {statistics.median(firsts):>9.1f} {statistics.median(totals):>9.1f} {totals[p95]:>9.1f}"
        f" {len(samples):>5}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", help="a Chroma folder holding the demo corpus (collection demo)")
    parser.add_argument("--repeats", type=int, default=20, help="questions per side, after one warm-up each")
    parser.add_argument("--askers", type=int, default=20, help="askers at once through the page")
    parser.add_argument("--save", action="store_true", help="also write benchmarks/results/ui.txt")
    args = parser.parse_args(argv)

    import httpx
    import uvicorn

    from modular_rag import template_path
    from modular_rag.config import load_config
    from modular_rag.ui import Workbench, create_app
    from modular_rag.ui.workbench import demo_index

    folder = Path(args.index or tempfile.mkdtemp(prefix="modular-rag-ui-bench-"))
    bench = Workbench({"linear": load_config(template_path("linear"))}, [demo_index(folder)])
    _, flow, _ = bench.flow("linear")  # builds, and indexes the demo corpus into an empty folder (untimed)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(bench), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    lines = [
        f"benchmarks/ui.py: linear template (no LLM call), demo index at {folder}, question {QUESTION!r}",
        f"{args.repeats} questions per side after one warm-up each, alternating; same process; ms",
        "",
        f"{'path':<32} {'1st node':>9} {'answer':>9} {'p95 ans':>9} {'runs':>5}",
    ]
    try:
        with httpx.Client(timeout=120) as client:
            _page_ask(client, url, QUESTION)
            _cli_ask(flow, QUESTION)
            page, cli = [], []
            for _ in range(args.repeats):
                page.append(_page_ask(client, url, QUESTION))
                cli.append(_cli_ask(flow, QUESTION))
            same = {s[2]["answer"]["text"] for s in page} | {s[2]["answer"]["text"] for s in cli}
            lines.append(_row("page (HTTP, SSE)", page))
            lines.append(_row("CLI path (flow.stream)", cli))
            lines.append(f"answers: {len(same)} distinct across both paths ({sorted(same)[0]!r})")

        def one(_: int) -> tuple[float, float, Any] | str:
            try:
                with httpx.Client(timeout=300) as own:
                    return _page_ask(own, url, QUESTION)
            except Exception as exc:  # counted and shown
                return f"{type(exc).__name__}: {exc}"

        start = time.perf_counter()
        with ThreadPoolExecutor(args.askers) as pool:
            outcomes = list(pool.map(one, range(args.askers)))
        wall = (time.perf_counter() - start) * 1000
        errors = [o for o in outcomes if isinstance(o, str)]
        done = [o for o in outcomes if not isinstance(o, str)]
        lines.append("")
        lines.append(f"{args.askers} askers at once through the page: {len(errors)} errors, all done in {wall:.0f} ms")
        if done:
            lines.append(_row(f"  each of the {len(done)} answered", done))
        lines += [f"  error: {e}" for e in errors[:5]]
        health = httpx.get(f"{url}/healthz", timeout=10).json()
        lines.append(f"server serving after them: {health}")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    print("\n".join(lines))
    if args.save:
        out = Path(__file__).resolve().parent / "results" / "ui.txt"
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
