"""One job of ``python -m benchmarks.perf scale``, run in its own process so that the kit version on PYTHONPATH
(today's code or an earlier commit's worktree) is the one measured, and so that a worker starts cold.

    python scale_job.py '{"job": "build" | "worker" | "add" | "sync", ...}'

Prints one JSON object. Uses only the kit's public API (config, Providers, build_flow, index_paths), which both
versions share. The embedder is :class:`hashembed.HashEmbeddings` (no model weights; its time is reported apart).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def rss_mb() -> float:
    """This process's resident memory in MB (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def providers(args: dict[str, Any], embedder: Any) -> Any:
    """The providers of the job's store, with the hash embedder."""
    from modular_rag.config import ChromaConfig, MilvusConfig, ProvidersConfig
    from modular_rag.providers import Providers

    if args["store"] == "milvus":
        fields = {"uri": args["uri"], "collection": args["collection"]}
        if "catalog" in MilvusConfig.model_fields:
            fields["catalog"] = args["catalog"]
        store: Any = MilvusConfig(**fields)
    else:
        store = ChromaConfig(path=args["path"], collection=args["collection"])
    return Providers(ProvidersConfig(embeddings=embedder, vectorstore=store))


def build(args: dict[str, Any]) -> dict[str, Any]:
    """Index the corpus folder (or add/sync files) and time it, the embedding apart."""
    from hashembed import HashEmbeddings

    from modular_rag.ingest import index_paths

    emb = HashEmbeddings()
    env = providers(args, emb)
    before = args.get("before") or {"seconds": 0.0, "embed_seconds": 0.0, "runs": 0}
    opened = 0.0
    if args.get("open_first"):  # the store's own share apart: open the collection (Chroma loads its HNSW index)
        import numpy as np

        t = time.perf_counter()
        env.index.dense.query(np.asarray(emb.embed_query("open"), dtype=np.float32), 1)
        opened = time.perf_counter() - t
        emb.seconds, emb.texts = 0.0, 0
    waited = _time_milvus_requests() if args["store"] == "milvus" else [0.0]
    start = time.perf_counter()
    if args.get("progress_file"):  # a build of hours: record after each write what a resumed run adds to
        file, add = Path(args["progress_file"]), env.index.add

        def recorded(*a: Any, **kw: Any) -> Any:
            out = add(*a, **kw)
            done = {
                "seconds": before["seconds"] + time.perf_counter() - start,
                "runs": before["runs"] + 1,
                "embed_seconds": None if before["embed_seconds"] is None else before["embed_seconds"] + emb.seconds,
            }
            file.write_text(json.dumps(done))
            return out

        env.index.add = recorded
    summary = index_paths(args["paths"], env, progress=False, sync=args.get("sync", False), max_file_mb=10_000)
    wall, milvus_s = time.perf_counter() - start, waited[0]
    known = before["embed_seconds"] is not None  # None: an earlier run that did not record its embedding time
    return {
        "seconds": before["seconds"] + wall,
        "embed_seconds": before["embed_seconds"] + emb.seconds if known else None,
        "runs": before["runs"] + 1,
        "run": {"seconds": wall, "embed_seconds": emb.seconds, "added": summary.added},
        "embedded": emb.texts,
        "chunks": summary.chunks,
        "added": summary.added,
        "removed": getattr(summary, "removed", 0),
        "count": env.index.count(),
        "rss_mb": rss_mb(),
        "opened": opened,
        "milvus s": milvus_s,
        "stages": getattr(summary, "stages", {}),
    }


def _time_milvus_requests() -> list[float]:
    """Sum the seconds this process waits on Milvus requests (every request of the kit's Milvus store goes through
    ``MilvusStore._call``, in both codes measured): the server's share of a question, apart from the kit's."""
    from modular_rag import milvus

    waited = [0.0]
    call = milvus.MilvusStore._call

    def timed(self: Any, what: str, fn: Any) -> Any:
        t = time.perf_counter()
        try:
            return call(self, what, fn)
        finally:
            waited[0] += time.perf_counter() - t

    milvus.MilvusStore._call = timed  # type: ignore[method-assign]
    return waited


def worker(args: dict[str, Any]) -> dict[str, Any]:
    """A new worker: imports, open the store, the first answer, then the rest of the questions, each timed."""
    t0 = time.perf_counter()
    marks: dict[str, float] = {}
    from hashembed import HashEmbeddings

    from modular_rag.builder import build_flow
    from modular_rag.config import load_config

    emb = HashEmbeddings()
    marks["imports s"] = time.perf_counter() - t0
    base = rss_mb()
    questions = args["questions"]
    chroma_s = chroma_mb = 0.0
    if args["store"] == "chroma":  # Chroma's own share: open the collection and load its HNSW index
        import chromadb
        from chromadb.config import Settings

        t = time.perf_counter()
        client = chromadb.PersistentClient(path=args["path"], settings=Settings(anonymized_telemetry=False))
        client.get_collection(args["collection"]).query(query_embeddings=[emb.embed_query(questions[0])], n_results=10)
        chroma_s, chroma_mb = time.perf_counter() - t, rss_mb() - base
    waited = _time_milvus_requests() if args["store"] == "milvus" else [0.0]
    t = time.perf_counter()
    env = providers(args, emb)
    flow = build_flow(load_config(args["config"]), providers=env)
    result = flow.invoke({"query": questions[0]})
    marks["first answer s"] = time.perf_counter() - t
    marks["milvus s"] = waited[0]
    kit_mb = rss_mb() - base - chroma_mb
    latencies, milvus_ms = [], []
    for q in questions[1:]:
        t, before = time.perf_counter(), waited[0]
        flow.invoke({"query": q})
        latencies.append((time.perf_counter() - t) * 1000)
        milvus_ms.append((waited[0] - before) * 1000)
    return {
        **marks,
        "chroma s": chroma_s,
        "chroma MB": chroma_mb,
        "kit MB": kit_mb,
        "rss MB": rss_mb(),
        "milvus ms": milvus_ms,
        "latencies": latencies,
        "hits": len(result.get("hits") or result.get("candidates") or []),
    }


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    out = worker(job) if job["job"] == "worker" else build(job)
    print(json.dumps(out))
