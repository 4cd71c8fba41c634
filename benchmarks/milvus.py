"""SciFact dev, retrieval only: the kit's hybrid (Chroma + the local BM25 index) against Milvus's (BM25 and dense
ranked in a Milvus Lite server, fused by RRF in one ``hybrid_search`` call), in one run, on the same vectors.

    .venv/bin/python benchmarks/milvus.py [--root ../shared/datasets] [--depth 100] [--save]

The kit's rows run over the cached SciFact index under ``.modular_rag/eval`` (``dataset_providers``; built the first
time, about 8 minutes on 2 cores). The Milvus rows run against ``milvus-lite server`` started on a free loopback port
over a temporary folder, filled with the chunk ids, texts, metadata and the *same* MiniLM vectors read back from that
Chroma index (nothing is embedded twice); queries are embedded by the same encoder. Both hybrids take ``--depth``
candidates per channel, fuse with RRF (k=60) and keep ``--depth``; both BM25s use k1=1.2, b=0.75.

What differs is the BM25 analysis: the kit folds accents, drops its English stop words and Snowball-stems; Milvus
Lite 3.2.2 has only its standard tokenizer (``\\w+``, lower-cased) and stop words (the kit's list is passed), no
stemmer (a real Milvus applies the ``stemmer`` filter the kit asks for). The ``kit bm25, no stemming`` row runs the
kit's BM25 with ``stemmer: none``: it and Milvus's BM25 then analyse text the same way, and their top-10 overlap
says how much of the remaining gap is Milvus's BM25 itself (its IDF is per segment; the store flushes once after
indexing, so the collection is one segment and the IDF is global here).

``--save`` writes the output to ``benchmarks/results/milvus.txt``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import main as common_main  # noqa: E402

COLLECTION = "scifact"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def milvus_lite_server(folder: Path, timeout_s: float = 60.0, port: int | None = None) -> Iterator[str]:
    """``milvus-lite server`` over ``folder`` on loopback (``port``, else a free one), in its own process group;
    yields its URI and stops it (SIGTERM, then SIGKILL) by its PID."""
    port = port or _free_port()
    binary = Path(sys.executable).parent / "milvus-lite"
    cmd = [str(binary), "server", "--data-dir", str(folder), "--host", "127.0.0.1", "--port", str(port)]
    with open(folder.parent / "milvus.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"milvus-lite server exited with {proc.returncode}; see {folder.parent}/milvus.log")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"milvus-lite server not listening after {timeout_s:.0f}s") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


def copy_into_milvus(source: Any, store: Any, page: int = 2000) -> tuple[int, float]:
    """Copy every chunk of a :class:`~modular_rag.index.ChromaStore` (ids, texts, metadata and stored vectors) into
    a :class:`~modular_rag.milvus.MilvusStore`; returns the chunks copied and the seconds Milvus took (writes and
    the flush that seals them)."""
    import numpy as np

    total, spent = source.count(), 0.0
    for offset in range(0, total, page):
        got = source.collection.get(include=["documents", "metadatas", "embeddings"], limit=page, offset=offset)
        start = time.perf_counter()
        store.add(
            got["ids"],
            got["documents"],
            [dict(m or {}) for m in got["metadatas"]],
            np.asarray(got["embeddings"], dtype=np.float32),
        )
        spent += time.perf_counter() - start
    start = time.perf_counter()
    store.flush()
    return total, spent + time.perf_counter() - start


def _overlap(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], depth: int = 10) -> float:
    """Mean share of documents two runs both rank in their top ``depth``."""
    shares = []
    for qid, ranking in a.items():
        top_a = sorted(ranking, key=lambda d: -ranking[d])[:depth]
        top_b = sorted(b.get(qid, {}), key=lambda d: -b[qid][d])[:depth]
        shares.append(len(set(top_a) & set(top_b)) / max(len(top_a), 1))
    return sum(shares) / max(len(shares), 1)


def run(args: argparse.Namespace) -> int:
    from modular_rag.config import MilvusConfig, ProvidersConfig, SparseConfig
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.runner import RetrievalResult, dataset_providers, run_retrieval
    from modular_rag.index import ChromaStore
    from modular_rag.milvus import MilvusStore
    from modular_rag.providers import Providers
    from modular_rag.tables import format_table

    dataset = load_beir(Path(args.root) / "scifact")
    depth = args.depth
    presets = {
        "bm25": {"name": "bm25", "params": {"k": depth}},
        "dense": {"name": "dense", "params": {"k": depth}},
        "hybrid (rrf)": {"name": "hybrid", "params": {"k": depth, "pool": depth, "fusion": "rrf"}},
    }

    def config(retrieve: dict[str, Any]) -> dict[str, Any]:
        return {"pattern": "linear", "operators": {"retrieve": retrieve, "context": "none", "generate": "none"}}

    kit_env = dataset_providers(dataset, ProvidersConfig(), log=lambda s: print(s, file=sys.stderr))
    source = kit_env.index.dense
    if not isinstance(source, ChromaStore):
        raise RuntimeError(f"expected the cached Chroma index, got {source.describe()}")
    results: dict[tuple[str, str], RetrievalResult] = {}
    for name, retrieve in presets.items():
        results[("kit: chroma + local BM25", name)] = run_retrieval(config(retrieve), dataset, kit_env, name=name)
    plain_env = dataset_providers(dataset, ProvidersConfig(sparse=SparseConfig(stemmer="none")))
    for name in ("bm25", "hybrid (rrf)"):
        results[("kit: BM25 without stemming", name)] = run_retrieval(
            config(presets[name]), dataset, plain_env, name=name
        )

    with tempfile.TemporaryDirectory(prefix="milvus-bench-") as tmp, milvus_lite_server(Path(tmp) / "data") as uri:
        milvus_env = Providers(ProvidersConfig(vectorstore=MilvusConfig(uri=uri, collection=COLLECTION, bm25="milvus")))
        store = milvus_env.index.dense
        if not isinstance(store, MilvusStore):
            raise RuntimeError(f"expected a Milvus store, got {store.describe()}")
        copied, seconds = copy_into_milvus(source, store)
        version, described = store.server_version(), store.describe()
        for name, retrieve in presets.items():
            results[("milvus: server-side", name)] = run_retrieval(config(retrieve), dataset, milvus_env, name=name)
        # what the hybrid step says it did, from one flow run
        from modular_rag.builder import build_flow

        trace = build_flow(config(presets["hybrid (rrf)"]), providers=milvus_env).invoke(
            {"query": dataset.queries[0].text}
        )["trace"][0]["summary"]

    print(
        f"{dataset.name} ({dataset.split} split, {len(dataset.queries)} queries, {copied} chunks, one per "
        f"abstract), embeddings: bundled all-MiniLM-L6-v2, retrieval only, depth {depth}"
    )
    print(
        f"milvus: {version} over gRPC on loopback; {copied} chunks with the kit's vectors copied in "
        f"{seconds:.1f}s; {described}"
    )
    rows = []
    for (store_name, name), res in results.items():
        m = res.mean
        rows.append(
            [
                store_name,
                name,
                f"{m['ndcg@10']:.4f}",
                f"{m['recall@10']:.4f}",
                f"{m['recall@100']:.4f}",
                f"{res.ledger.get('retrievals', 0):.0f}",
                f"{res.ms_per_query:.1f}",
            ]
        )
    print(format_table(["store", "retriever", "nDCG@10", "R@10", "R@100", "retrievals/q", "ms/q"], rows))

    def mean(store_name: str, name: str, metric: str = "ndcg@10") -> float:
        return results[(store_name, name)].mean[metric]

    kit, milvus, plain = "kit: chroma + local BM25", "milvus: server-side", "kit: BM25 without stemming"
    print(f"\nhybrid step's trace (Milvus): {trace}")
    print("\nMilvus - kit, nDCG@10 (R@10):")
    for name in presets:
        print(
            f"  {name:13} {mean(milvus, name) - mean(kit, name):+.4f} "
            f"({mean(milvus, name, 'recall@10') - mean(kit, name, 'recall@10'):+.4f})"
        )
    print("why, nDCG@10:")
    for name in ("bm25", "hybrid (rrf)"):
        stem = mean(kit, name) - mean(plain, name)
        rest = mean(milvus, name) - mean(plain, name)
        same = _overlap(results[(plain, name)].run, results[(milvus, name)].run)
        print(
            f"  {name:13} Snowball stemming is worth {stem:+.4f} to the kit; Milvus vs the kit without stemming "
            f"{rest:+.4f} (top-10 overlap {same:.3f})"
        )
    dense_same = _overlap(results[(kit, "dense")].run, results[(milvus, "dense")].run)
    print(
        f"  dense         the same vectors: top-10 overlap {dense_same:.3f} (Chroma's HNSW, Milvus Lite's FAISS HNSW)"
    )
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--depth", type=int, default=100, help="candidates per channel and hits kept (100)")


def main() -> int:
    return common_main("milvus.py", __doc__ or "", run, _arguments, "milvus.txt")


if __name__ == "__main__":
    raise SystemExit(main())
