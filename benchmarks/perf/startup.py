"""``python -m benchmarks.perf startup``: wall time from starting ``modular-rag run --config <linear template>
QUESTION`` to its exit with the answer, over the demo index; and, in a fresh process doing the same steps, the split:
interpreter, imports, flow build, model loads (embedder, Chroma, BM25), llama-server start, query; side by side with
the embedder on torch instead of ONNX Runtime, with the embedder's int8 export (``embeddings: {precision: int8}``, over
a demo index embedded with it), and with llama-server started only when first needed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import ROOT, Report, ensure_demo_index, table

_PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
marks = {}
def mark(name):
    global t0
    now = time.perf_counter(); marks[name] = now - t0; t0 = now
from modular_rag.cli import main  # what the command imports first
mark("import modular_rag.cli")
from modular_rag.builder import build_flow  # what `run` imports
from modular_rag.config import load_config
from modular_rag.providers import Providers
mark("import builder, config, providers (langgraph, langchain-core)")
config = load_config(sys.argv[1])
env = Providers(config.providers)
if sys.argv[3] == "prestart":
    from modular_rag.cli import _prestart
    _prestart(config, env)
mark("load config (as run does: + launch llama-server, no wait)")
flow = build_flow(config, providers=env)
mark("build flow (operator and pattern plugins)")
env.encoder.encode_query(sys.argv[2])
mark("load embedder (MiniLM: ONNX Runtime session, or torch + sentence-transformers)")
env.index.count()
mark("open index (Chroma, catalog, BM25 segments: opened, nothing loaded whole)")
env.llm  # the chat client (imports langchain-openai) on the local server, which it starts or waits for
mark("LLM client + llama-server: start it, or wait for the launched one")
result = flow.invoke({"query": sys.argv[2]})
assert result["answer"]["text"]
mark("query (retrieve + generate)")
print(json.dumps(marks))
"""


def run(args: argparse.Namespace, out: Report) -> None:
    from modular_rag import template_path
    from modular_rag.cli import DEMO_QUESTION

    index = str(ROOT / ".modular_rag" / "demo")
    ensure_demo_index(index)
    int8_index = str(ROOT / ".modular_rag" / "demo-int8")  # the vectors of the questions' embedder
    ensure_demo_index(int8_index, embeddings={"name": "minilm", "precision": "int8"})
    python = sys.executable
    binary = str(Path(python).parent / "modular-rag")
    with tempfile.TemporaryDirectory() as tmp:
        import yaml

        data = yaml.safe_load(template_path("linear").read_text())
        data["providers"]["vectorstore"]["path"] = index
        config = Path(tmp) / "linear.yaml"
        config.write_text(yaml.safe_dump(data))
        data["providers"]["embeddings"] = {"name": "minilm", "backend": "torch"}
        torch_config = Path(tmp) / "linear-torch.yaml"
        torch_config.write_text(yaml.safe_dump(data))
        data["providers"]["embeddings"] = {"name": "minilm", "precision": "int8"}
        data["providers"]["vectorstore"]["path"] = int8_index
        int8_config = Path(tmp) / "linear-int8.yaml"
        int8_config.write_text(yaml.safe_dump(data))
        variants = {  # column: (config, mode)
            "as run does it (s)": (config, "prestart"),
            "embeddings backend torch (s)": (torch_config, "prestart"),
            "embeddings precision int8 (s)": (int8_config, "prestart"),
            "server started on first use (s)": (config, "sequential"),
        }
        totals, interpreter = [], []
        phases: dict[str, list[dict[str, float]]] = {column: [] for column in variants}
        for i in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run([python, "-c", "pass"], check=True)
            interpreter.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            done = subprocess.run(
                [binary, "run", "--config", str(config), DEMO_QUESTION], capture_output=True, text=True
            )
            totals.append(time.perf_counter() - t0)
            if done.returncode != 0 or "A:" not in done.stdout:
                raise RuntimeError(f"modular-rag run failed ({done.returncode}): {done.stderr[-500:]}")
            order = list(variants.items())
            for column, (cfg, mode) in order[i % len(order) :] + order[: i % len(order)]:
                child = subprocess.run(
                    [python, "-c", _PHASES, str(cfg), DEMO_QUESTION, mode], capture_output=True, text=True
                )
                if child.returncode != 0:
                    raise RuntimeError(f"start-up phases failed: {child.stderr[-800:]}")
                phases[column].append(json.loads(child.stdout.strip().splitlines()[-1]))
    cmd = f"modular-rag run --config <linear template over the demo index> {DEMO_QUESTION!r}"
    out(f"{cmd}: {args.runs} runs, median of each")
    out(
        f"whole command, start to exit with the answer: {statistics.median(totals):.2f}s "
        f"(runs: {', '.join(f'{t:.2f}' for t in totals)})"
    )
    out()
    out(
        "The same steps in a fresh process, timed one by one: as `run` does them (llama-server launched at once, so "
        "it loads while the rest does; the embedder on ONNX Runtime), with the embedder on torch + "
        "sentence-transformers instead, with its int8 export (over a demo index embedded with it), and with the "
        "server started only when first needed"
    )
    first = next(iter(variants))
    rows: list[list[Any]] = [
        ["python interpreter start (python -c pass)", *[statistics.median(interpreter)] * len(variants)]
    ]
    for name in phases[first][0]:
        rows.append([name, *(statistics.median(p[name] for p in phases[column]) for column in variants)])
    rows.append(["total", *(sum(r[j] for r in rows) for j in range(1, len(variants) + 1))])
    out(table(["phase", *variants], rows))
