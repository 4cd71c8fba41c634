"""``python -m benchmarks.perf indexing``: ``index_paths`` on the SciFact corpus (load, chunk, embed, write Chroma,
build BM25) into a fresh store, with each embeddings backend (ONNX Runtime, torch), against the raw
``SentenceTransformer.encode()`` of the same chunk texts with the same batch size. The raw encode runs in two halves
around the kit's runs (A-B-A), so slow drift on the machine falls on both. Target: kit throughput >= 0.90 of raw.

``--compare precisions``: ``index_paths`` with the MiniLM ONNX export in fp32 and in int8 (``embeddings: {precision:
int8}``), on each corpus of ``--datasets`` (default SciFact and HotpotQA, one chunk per row), each into a fresh store,
in the order fp32, int8, int8, fp32 per corpus (A-B-B-A: drift in the machine's load falls on both). Reported: chunks
per second of wall time, and CPU seconds per chunk of this process (less sensitive to other processes on shared
cores). Target: int8 throughput >= 2x fp32. Written to ``perf-indexing-precision.txt`` with ``--save``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import Report, table, verdict


def run(args: argparse.Namespace, out: Report) -> None:
    """The comparison ``--compare`` names: embeddings backends against raw encode(), or fp32 against int8."""
    if args.compare == "precisions":
        out.name = "indexing-precision"
        _precisions(args, out)
    else:
        _backends(args, out)


def _subset(dataset: Path, limit: int | None, folder: Path) -> Path:
    """The dataset's corpus file, or its first ``limit`` rows copied into ``folder`` (never into the repo)."""
    corpus = dataset / "corpus.jsonl"
    if not limit:
        return corpus
    target = folder / dataset.name / "corpus.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(corpus, encoding="utf-8") as src, open(target, "w", encoding="utf-8") as dst:
        for i, line in enumerate(src):
            if i >= limit:
                break
            dst.write(line)
    return target


def _precisions(args: argparse.Namespace, out: Report) -> None:
    import os

    from modular_rag.config import ChromaConfig, MiniLMConfig, OperatorSpec, ProvidersConfig
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    datasets = [args.dataset.parent / name if os.sep not in name else Path(name) for name in args.datasets.split(",")]
    order = ("fp32", "int8", "int8", "fp32")
    spec = OperatorSpec(name="document")
    out(
        f"index_paths (load, chunk, embed, Chroma, BM25), MiniLM on ONNX Runtime, batch size "
        f"{MiniLMConfig().batch_size}; per corpus the runs go {', '.join(order)}, each into a fresh store; the "
        "machine's cores are shared with other processes: wall throughput moves with their load, CPU seconds per "
        "chunk less so"
    )
    rows: list[list[Any]] = []
    totals: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="perf-precision-") as tmp:
        for dataset in datasets:
            corpus = _subset(dataset, args.limit, Path(tmp))
            envs = {}
            for precision in ("fp32", "int8"):
                store = ChromaConfig(path=str(Path(tmp) / f"{dataset.name}-{precision}"), collection="perf")
                embeddings = MiniLMConfig(backend="onnx", precision=precision)
                config = envs[precision] = ProvidersConfig(vectorstore=store, embeddings=embeddings)
                Providers(config).encoder.encode(["warm up: the session is made (and the export, once) before timing"])
            sums = {p: [0.0, 0.0, 0, 0.0] for p in envs}  # wall s, cpu s, chunks, embed s
            for run, precision in enumerate(order):
                store = ChromaConfig(path=str(Path(tmp) / f"{dataset.name}-{precision}-{run}"), collection="perf")
                env = Providers(envs[precision].model_copy(update={"vectorstore": store}))
                wall, cpu = time.perf_counter(), time.process_time()
                summary = index_paths([corpus], env, chunker=spec, progress=False)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                chunks = summary.index_chunks
                embed = summary.stages.get("embed", 0.0)
                env.close()
                for i, value in enumerate((wall, cpu, chunks, embed)):
                    sums[precision][i] += value
                rows.append(
                    [
                        dataset.name,
                        run + 1,
                        precision,
                        chunks,
                        round(wall, 1),
                        round(chunks / wall, 2),
                        round(cpu / chunks * 1000),
                        round(embed / wall, 3),
                    ]
                )
            rate = {p: s[2] / s[0] for p, s in sums.items()}
            cpu_per = {p: s[1] / s[2] * 1000 for p, s in sums.items()}
            totals.append(
                [
                    dataset.name,
                    sums["fp32"][2] // 2,
                    round(rate["fp32"], 2),
                    round(rate["int8"], 2),
                    round(rate["int8"] / rate["fp32"], 2),
                    round(cpu_per["fp32"]),
                    round(cpu_per["int8"]),
                    round(cpu_per["fp32"] / cpu_per["int8"], 2),
                ]
            )
    out()
    out(table(["corpus", "run", "precision", "chunks", "seconds", "chunks/s", "CPU ms/chunk", "embed share"], rows))
    out()
    out(
        table(
            [
                "corpus",
                "chunks",
                "fp32 chunks/s",
                "int8 chunks/s",
                "int8 / fp32",
                "fp32 CPU ms/chunk",
                "int8 CPU ms/chunk",
                "fp32 / int8 CPU",
            ],
            totals,
        )
    )
    for row in totals:
        out(
            f"{row[0]}: int8 / fp32 throughput {row[4]:.2f} (target >= 2: {verdict(row[4] >= 2)}); "
            f"CPU per chunk {row[7]:.2f}x less"
        )
    if args.limit:
        out(f"the first {args.limit:,} rows of each corpus (--limit)")


def _backends(args: argparse.Namespace, out: Report) -> None:
    from modular_rag.config import (
        ChromaConfig,
        IndexingConfig,
        MiniLMConfig,
        OperatorSpec,
        ProvidersConfig,
        validate_params,
    )
    from modular_rag.ingest import index_paths, load_file
    from modular_rag.providers import Providers, SentenceEncoder, minilm_path
    from modular_rag.registry import Port, get_operator

    with tempfile.TemporaryDirectory(prefix="perf-indexing-") as tmp:
        corpus = _subset(args.dataset, args.limit, Path(tmp))
        spec = OperatorSpec(name="document")

        def providers(backend: str) -> Any:
            store = ChromaConfig(path=str(Path(tmp) / f"store-{backend}"), collection="perf")
            return Providers(ProvidersConfig(vectorstore=store, embeddings=MiniLMConfig(backend=backend)))

        envs = {backend: providers(backend) for backend in ("onnx", "torch")}
        env = envs["torch"]
        info = get_operator(Port.CHUNK, spec.name)  # the chunker index_paths uses, built the same way
        chunk = info.factory(validate_params(info.params, spec.params, "chunker"), env)
        docs, _ = load_file(corpus, corpus.parent, env)
        texts = [c["text"] for d in docs for c in chunk(d)]
        model = SentenceEncoder(minilm_path()).model  # the raw library, loaded before any timing
        batch = MiniLMConfig().batch_size
        model.encode(texts[:8], batch_size=batch)
        for each in envs.values():
            each.encoder.encode(texts[:8])  # load the session / model
        half = len(texts) // 2

        def raw(part: Sequence[str]) -> float:
            t0 = time.perf_counter()
            model.encode(
                list(part), batch_size=batch, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
            return time.perf_counter() - t0

        out(
            f"corpus: {corpus.name} from {args.dataset.name}, {len(texts)} chunks (one per abstract); "
            f"MiniLM batch size {batch}; order: raw first half, kit (onnx), kit (torch), raw second half"
        )
        raw_a = raw(texts[:half])
        runs = {}
        for backend, each in envs.items():
            t0 = time.perf_counter()
            summary = index_paths([corpus], each, chunker=spec, progress=False)
            runs[backend] = (time.perf_counter() - t0, summary)
            assert summary.index_chunks == len(texts), summary.lines()
        raw_b = raw(texts[half:])
        raw_total = raw_a + raw_b
        rows: list[list[Any]] = [
            [
                "raw SentenceTransformer.encode() (torch)",
                len(texts),
                round(raw_total, 1),
                round(len(texts) / raw_total, 2),
                "",
            ]
        ]
        for backend, (seconds, summary) in runs.items():
            rows.append(
                [
                    f"kit index_paths, embeddings backend {backend} (load, chunk, embed, Chroma, BM25)",
                    summary.index_chunks,
                    round(seconds, 1),
                    round(len(texts) / seconds, 2),
                    round(raw_total / seconds, 3),
                ]
            )
        out()
        out(table(["run", "chunks", "seconds", "chunks/s", "of raw throughput"], rows))
        for backend, (seconds, _) in runs.items():
            ratio = raw_total / seconds
            out(f"kit ({backend}) / raw throughput: {ratio:.3f} (target >= 0.90: {verdict(ratio >= 0.90)})")
        for backend, (_, summary) in runs.items():
            if summary.stages:
                out(
                    f"inside the kit's {backend} run (seconds): "
                    + ", ".join(f"{k} {v:.1f}" for k, v in summary.stages.items())
                )
        dense: Any = env.index.dense
        out(
            f"embedding batches of {IndexingConfig().batch_size} chunks, longest texts first; each batch written to "
            f"Chroma on a background thread while the next is embedded (a write takes at most "
            f"{dense.max_batch:,} chunks, client.get_max_batch_size()); BM25 built once, after the last batch"
        )
