"""``python -m benchmarks.perf indexing``: ``index_paths`` on the SciFact corpus (load, chunk, embed, write Chroma,
build BM25) into a fresh store, with each embeddings backend (ONNX Runtime, torch), against the raw
``SentenceTransformer.encode()`` of the same chunk texts with the same batch size. The raw encode runs in two halves
around the kit's runs (A-B-A), so slow drift on the machine falls on both. Target: kit throughput >= 0.90 of raw.
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
    from modular_rag.config import (
        ChromaConfig,
        IndexingConfig,
        MiniLMConfig,
        OperatorSpec,
        ProvidersConfig,
        validate_params,
    )
    from modular_rag.providers import Providers, SentenceEncoder, minilm_path
    from modular_rag.registry import Port, get_operator
    from operators.indexing import index_paths, load_file

    with tempfile.TemporaryDirectory(prefix="perf-indexing-") as tmp:
        corpus = args.dataset / "corpus.jsonl"
        if args.limit:
            corpus = Path(tmp) / "corpus.jsonl"  # a subset in a temporary folder, never in the repo
            with open(args.dataset / "corpus.jsonl", encoding="utf-8") as src, open(corpus, "w") as dst:
                for i, line in enumerate(src):
                    if i >= args.limit:
                        break
                    dst.write(line)
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
            model.encode(list(part), batch_size=batch, normalize_embeddings=True, convert_to_numpy=True,
                         show_progress_bar=False)  # fmt: skip
            return time.perf_counter() - t0

        out(f"corpus: {corpus.name} from {args.dataset.name}, {len(texts)} chunks (one per abstract); "
            f"MiniLM batch size {batch}; order: raw first half, kit (onnx), kit (torch), raw second half")
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
            ["raw SentenceTransformer.encode() (torch)", len(texts), round(raw_total, 1),
             round(len(texts) / raw_total, 2), ""]]  # fmt: skip
        for backend, (seconds, summary) in runs.items():
            rows.append([f"kit index_paths, embeddings backend {backend} (load, chunk, embed, Chroma, BM25)",
                         summary.index_chunks, round(seconds, 1), round(len(texts) / seconds, 2),
                         round(raw_total / seconds, 3)])  # fmt: skip
        out()
        out(table(["run", "chunks", "seconds", "chunks/s", "of raw throughput"], rows))
        for backend, (seconds, _) in runs.items():
            ratio = raw_total / seconds
            out(f"kit ({backend}) / raw throughput: {ratio:.3f} (target >= 0.90: {verdict(ratio >= 0.90)})")
        for backend, (_, summary) in runs.items():
            if summary.stages:
                out(f"inside the kit's {backend} run (seconds): "
                    + ", ".join(f"{k} {v:.1f}" for k, v in summary.stages.items()))  # fmt: skip
        dense: Any = env.index.dense
        out(f"embedding batches of {IndexingConfig().batch_size} chunks, longest texts first; each batch written to "
            f"Chroma on a background thread while the next is embedded (a write takes at most "
            f"{dense.max_batch:,} chunks, client.get_max_batch_size()); BM25 built once, after the last batch")
