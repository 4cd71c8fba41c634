"""``python -m benchmarks.perf latency``: the default template answering questions a warm process has not seen,
with the sentence vectors the index stored and without them, in one run; what storing them costs at indexing; the
cold first answer; and whether any answer changed.

* **Warm latency**: the template ``modular-rag run`` uses by default (``modular_rag/templates/linear.yaml``: hybrid
  retrieval, evidence-first context, extractive cited answer; no LLM call) over the demo index, built here with stored
  sentence vectors. One process, warmed by a question outside the set; then each of the 24 demo questions is asked
  once each way, alternating which goes first: **stored** (the scorers read each chunk's sentence vectors from the
  catalog) and **embedded** (``index.sentences.use_stored`` off: the scorers embed the sentences of each question's
  top chunks and cache them by text in the process, as the kit did before). The query-embedding cache is cleared
  before every call, so each call embeds its question; the sentence cache is cleared at the start of each round
  (``--rounds``), so every round's questions are new to the process. Reported: p50 and max ms of ``flow.invoke``
  and the texts the encoder received. Targets: p50 <= 25 ms, max <= 60 ms.
* **Indexing cost**: ``index_paths`` into fresh stores with and without sentence vectors (``index.sentences.store``),
  on the demo corpus and the first ``--index-limit`` SciFact abstracts, in the order with, without, without, with
  (drift in the machine's load falls on both): chunks per second, and the seconds spent embedding sentences.
* **Cold first answer**: ``modular-rag run --config <default template over the demo index> QUESTION`` from start to
  exit, median of ``--cold-runs``. Target <= 5 s.
* **Answers unchanged**: the default template's answer text with stored and with embedded sentence vectors, on the
  24 demo questions and on the SQuAD and NQ-open report splits of ``benchmarks/answers.py`` (their cached evaluation
  indexes copied to a scratch folder and given their sentence vectors there, as the next ``index`` run would).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import ROOT, Report, table, verdict

WARM_UP = "How long does the battery take to charge?"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _default_config(index: Path) -> Any:
    """The default template with its store at ``index``."""
    from modular_rag import template_path
    from modular_rag.config import load_config

    config = load_config(template_path("linear"))
    config.providers.vectorstore.path = str(index)  # type: ignore[union-attr]
    return config


def _questions() -> list[str]:
    from modular_rag import demo_corpus_path

    lines = (demo_corpus_path().parent / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


def run(args: argparse.Namespace, out: Report) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="perf-latency-", dir=args.scratch))
    try:
        demo = scratch / "demo"
        _index_demo(demo)
        parts = {"warm": _warm, "cold": _cold, "indexing": _indexing, "answers": _answers}
        wanted = args.parts.split(",")
        if wanted != list(parts):  # a part of the command: its own results file
            out.name = "latency-" + "-".join(wanted)
        unknown = set(wanted) - set(parts)
        if unknown:
            raise SystemExit(f"--parts: unknown {', '.join(sorted(unknown))}; parts: {', '.join(parts)}")
        for name in wanted:
            parts[name](args, out, demo if name in ("warm", "cold") else scratch)
            out()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _index_demo(folder: Path) -> None:
    from modular_rag import demo_corpus_path
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    env = Providers(_default_config(folder).providers)
    index_paths([demo_corpus_path()], env, progress=False)


def _warm(args: argparse.Namespace, out: Report, demo: Path) -> None:
    from modular_rag.attribution import scoring as attribution
    from modular_rag.builder import build_flow
    from modular_rag.providers import Providers

    config = _default_config(demo)
    env = Providers(config.providers)
    flow = build_flow(config, providers=env)
    encoder = env.encoder
    sent: list[int] = []
    real = encoder.encode
    encoder.encode = lambda texts: (sent.append(len(texts)), real(texts))[1]  # type: ignore[method-assign]
    for use in (True, False):
        env.index.sentences.use_stored = use
        flow.invoke({"query": WARM_UP})
    questions = _questions()
    ms: dict[str, list[float]] = {"stored": [], "embedded": []}
    cpu: dict[str, list[float]] = {"stored": [], "embedded": []}
    texts: dict[str, list[int]] = {"stored": [], "embedded": []}
    differ = 0
    for r in range(args.rounds):
        attribution._SENTENCE_VECTORS.clear()  # every round's questions are new to the process
        for i, question in enumerate(questions):
            order = ("stored", "embedded") if (i + r) % 2 == 0 else ("embedded", "stored")
            answers = {}
            for way in order:
                env.index.sentences.use_stored = way == "stored"
                encoder.clear_cache()
                sent.clear()
                t0, c0 = time.perf_counter(), time.process_time()
                result = flow.invoke({"query": question})
                ms[way].append((time.perf_counter() - t0) * 1000)
                cpu[way].append((time.process_time() - c0) * 1000)
                texts[way].append(sum(sent))
                answers[way] = result["answer"]["text"]
            differ += answers["stored"] != answers["embedded"]
    env.index.sentences.use_stored = True
    encoder.encode = real  # type: ignore[method-assign]
    n = len(questions) * args.rounds
    out(
        f"warm process, default template (linear: hybrid k 10, evidence_first 5 chunks x 2 sentences, cited_answer "
        f"extractive) over the demo index ({env.index.count()} chunks); {len(questions)} demo questions x "
        f"{args.rounds} rounds, each asked both ways, alternating which goes first; query and sentence caches as "
        "described in benchmarks/perf/latency.py"
    )
    rows = [
        [
            way,
            len(v),
            _pct(v, 50),
            _pct(v, 95),
            max(v),
            _pct(cpu[way], 50),
            max(cpu[way]),
            statistics.mean(texts[way]),
            max(texts[way]),
        ]
        for way, v in ms.items()
    ]
    out(
        table(
            [
                "sentence vectors",
                "questions",
                "p50 ms",
                "p95 ms",
                "max ms",
                "CPU ms p50",
                "CPU ms max",
                "texts embedded / question",
                "most texts",
            ],
            rows,
        )
    )
    p50, top = _pct(ms["stored"], 50), max(ms["stored"])
    out(
        f"stored: p50 {p50:.1f} ms (target <= 25: {verdict(p50 <= 25)}), max {top:.1f} ms (target <= 60: "
        f"{verdict(top <= 60)}); answers that differ between the two ways: {differ}/{n}; load average (1, 5, 15 "
        f"min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores (wall times "
        "wait for cores the machine's other processes hold; CPU ms is this process's own work, its threads summed)"
    )


def _cold(args: argparse.Namespace, out: Report, demo: Path) -> None:
    from modular_rag.cli import DEMO_QUESTION

    binary = str(Path(sys.executable).parent / "modular-rag")
    config = demo.parent / "linear-demo.yaml"
    config.write_text(_default_config(demo).to_yaml(), encoding="utf-8")
    times = []
    for _ in range(args.cold_runs):
        t0 = time.perf_counter()
        done = subprocess.run(
            [binary, "run", "--config", str(config), DEMO_QUESTION], capture_output=True, text=True, cwd=ROOT
        )
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise RuntimeError(f"modular-rag run failed: {done.stderr[-2000:]}")
    median = statistics.median(times)
    out(
        f"cold first answer: modular-rag run --config <default template over the demo index> {DEMO_QUESTION!r}, "
        f"start to exit: median {median:.2f} s of {len(times)} ({', '.join(f'{t:.2f}' for t in times)}; target <= "
        f"5 s: {verdict(median <= 5)})"
    )


def _indexing(args: argparse.Namespace, out: Report, scratch: Path) -> None:
    from modular_rag import demo_corpus_path
    from modular_rag.config import ChromaConfig, OperatorSpec, ProvidersConfig
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    from .indexing import _subset

    corpora = {
        "demo": ([demo_corpus_path()], None),
        f"scifact (first {args.index_limit:,})": (
            [_subset(args.dataset, args.index_limit, scratch)],
            OperatorSpec(name="document"),
        ),
    }
    rows = []
    for name, (paths, chunker) in corpora.items():
        sums = {True: [0.0, 0, 0.0], False: [0.0, 0, 0.0]}  # seconds, chunks, sentence seconds
        for run, store in enumerate((True, False, False, True)):
            env = Providers(
                ProvidersConfig(
                    vectorstore=ChromaConfig(path=str(scratch / f"idx-{name[:4]}-{run}"), collection="perf")
                )
            )
            env.encoder.encode(["warm up"])
            env.index.sentences.store = store
            t0 = time.perf_counter()
            summary = index_paths(paths, env, chunker=chunker, progress=False)
            seconds = time.perf_counter() - t0
            sums[store][0] += seconds
            sums[store][1] += summary.index_chunks
            sums[store][2] += summary.stages.get("sentence vectors", 0.0)
            env.close()
        with_, without = sums[True], sums[False]
        rows.append(
            [
                name,
                with_[1] // 2,
                round(without[1] / without[0], 2),
                round(with_[1] / with_[0], 2),
                round((with_[1] / with_[0]) / (without[1] / without[0]), 2),
                round(with_[2] / with_[0], 2),
            ]
        )
    out(
        "indexing with and without stored sentence vectors (index_paths into fresh stores, runs with, without, "
        "without, with; MiniLM fp32 on ONNX Runtime)"
    )
    out(
        table(
            [
                "corpus",
                "chunks",
                "without: chunks/s",
                "with: chunks/s",
                "with / without",
                "share of the time embedding sentences",
            ],
            rows,
        )
    )


def _answers(args: argparse.Namespace, out: Report, scratch: Path) -> None:
    from benchmarks.answers import _datasets  # the sets answers.py scores
    from modular_rag.builder import build_flow
    from modular_rag.config import ChromaConfig, OperatorSpec
    from modular_rag.eval.runner import index_folder
    from modular_rag.providers import Providers

    rows = []
    for name, dataset in _datasets(args.dataset.parent).items():
        config = _default_config(scratch / "demo")
        if name != "demo":
            cached = index_folder(dataset, config.providers, OperatorSpec(name=dataset.default_chunker))
            if not (cached / "complete.json").exists():
                rows.append([name, len(dataset.queries), "", "", f"no cached index at {cached}: left out"])
                continue
            copy = scratch / f"answers-{name}"
            shutil.copytree(cached, copy)
            config.providers.vectorstore = ChromaConfig(path=str(copy), collection="beir")
        env = Providers(config.providers)
        t0 = time.perf_counter()
        env.index.add([])  # what the next index run does: the sentence vectors of every chunk
        backfill = time.perf_counter() - t0
        flow = build_flow(config, providers=env)
        texts: dict[bool, list[str]] = {True: [], False: []}
        for use in (True, False):
            env.index.sentences.use_stored = use
            texts[use] = [flow.invoke({"query": q.text})["answer"]["text"] for q in dataset.queries]
        env.index.sentences.use_stored = True
        same = sum(a == b for a, b in zip(texts[True], texts[False], strict=True))
        rows.append(
            [
                name,
                len(dataset.queries),
                f"{same}/{len(dataset.queries)}",
                round(backfill, 1),
                "" if same == len(dataset.queries) else "CHANGED",
            ]
        )
    out(
        "answers of the default template with stored and with embedded sentence vectors (SQuAD and NQ-open: the "
        "report splits of benchmarks/answers.py)"
    )
    out(table(["set", "questions", "same answer text", "sentence vectors made (s)", ""], rows))
