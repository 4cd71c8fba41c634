"""Every shipped config on the embedded default and on Milvus, side by side in one run: the same config, dataset and
dev split, indexed once into the cached Chroma and once into a Milvus Lite server (``modular-rag eval --milvus``'s
path: the corpus embedded and indexed there, nothing copied), and the quality each scores.

    .venv/bin/python benchmarks/milvus_parity.py [--root ../shared/datasets] [--configs configs/*.yaml] [--save]

A config's dataset is named by its file (``scifact-*``, ``hotpotqa-*``). The Milvus Lite server runs on loopback
over ``.modular_rag/milvus-parity`` on a fixed port (``--port``), so a second run reuses its collections (the eval
cache is keyed by the server's address). ``providers.vectorstore.bm25`` is left at ``auto``: on Milvus Lite, which
neither stems nor folds accents, BM25 ranks over the kit's postings in the collection's catalog; dense search,
texts and metadata are Milvus's.

``--dense-recall`` measures only how close each store's dense search is to exact cosine over the same vectors, on
the indexes a run scored (``results/milvus-parity-dense.txt`` with ``--save``); ``--ef 64,128,256`` adds Milvus Lite's
recall when its HNSW index is searched with those ef values; ``--ef N`` in a scoring run searches Milvus with
``search_params: {ef: N}``.

``--save`` writes the output to ``benchmarks/results/milvus-parity.txt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import main as common_main  # noqa: E402
from milvus import milvus_lite_server  # noqa: E402

METRICS = ("nDCG@10", "R@5", "all@5", "EM", "F1", "contains")
KEYS = {"nDCG@10": "ndcg@10", "R@5": "recall@5", "all@5": "all@5", "EM": "em", "F1": "f1", "contains": "contains"}


def _scores(result: Any) -> dict[str, float | None]:
    """The quality figures of a :class:`~modular_rag.eval.runner.FlowResult` (``None`` where it has none: answer
    metrics of a retrieval-only flow)."""
    summary = result.summary()
    answered = any(r.answer for r in result.records)
    return {m: (summary.get(KEYS[m]) if m in ("nDCG@10", "R@5", "all@5") or answered else None) for m in METRICS}


def run(args: argparse.Namespace) -> int:
    from modular_rag.config import MilvusConfig, load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.runner import config_chunker, dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    paths = [Path(p) for p in args.configs]
    folder = ROOT / ".modular_rag" / "milvus-parity"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows, worst = [], 0.0
    with milvus_lite_server(folder / "data", port=args.port) as uri:
        search = {"ef": int(args.ef)} if args.ef else {}  # --ef N: Milvus's dense searches with that HNSW ef
        print(
            f"Milvus: milvus-lite server at {uri} (bm25: auto, so the kit's postings rank BM25 there"
            + (f"; dense searches with ef {args.ef})" if search else ")")
        )
        for path in paths:
            config = load_config(path)
            name = path.stem
            dataset = load_beir(Path(args.root) / name.split("-", 1)[0], split="dev")
            chunker = config_chunker(config, dataset.default_chunker)
            got: dict[str, dict[str, float | None]] = {}
            milvus = config.with_vectorstore(MilvusConfig(uri=uri, search_params=search))
            for store in ("chroma", "milvus"):
                flow = milvus if store == "milvus" else config
                start = time.perf_counter()
                env = dataset_providers(
                    dataset,
                    flow.providers,
                    chunker=chunker,
                    progress=False,
                    log=lambda line: print(f"  {line}", flush=True),
                )
                result = evaluate_flow(flow, dataset, env, name=name)
                got[store] = _scores(result)
                shown = ", ".join(f"{m} {v:.4f}" for m, v in got[store].items() if v is not None)
                print(
                    f"{name} on {store}: {len(dataset.queries)} queries, {time.perf_counter() - start:.0f}s "
                    f"(with indexing), {result.summary()['ms']:.0f} ms/q; {shown}",
                    flush=True,
                )
            for metric in METRICS:
                a, b = got["chroma"][metric], got["milvus"][metric]
                if a is None or b is None:
                    continue
                worst = max(worst, abs(b - a))
                rows.append([name, metric, f"{a:.4f}", f"{b:.4f}", f"{b - a:+.4f}"])
    print()
    print(format_table(["config", "metric", "embedded (Chroma)", "Milvus Lite", "Milvus - embedded"], rows))
    print(f"\nlargest difference: {worst:.4f}")
    return 0


def dense_recall(args: argparse.Namespace) -> int:
    """Each store's dense top-``k`` against exact cosine search over the same vectors (read from the cached Chroma
    index), on every dev question of each dataset the configs use: how much of a difference between the stores is
    their approximate nearest-neighbour search (Chroma's HNSW, Milvus Lite's index)."""
    import numpy as np

    from modular_rag.config import MilvusConfig, load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.runner import config_chunker, dataset_providers

    k = 50
    seen: set[tuple[str, str]] = set()
    folder = ROOT / ".modular_rag" / "milvus-parity"
    with milvus_lite_server(folder / "data", port=args.port) as uri:
        for path in (Path(p) for p in args.configs):
            config = load_config(path)
            dataset = load_beir(Path(args.root) / path.stem.split("-", 1)[0], split="dev")
            chunker = config_chunker(config, dataset.default_chunker)
            key = (dataset.name, chunker.model_dump_json() + config.providers.embeddings.model_dump_json())
            if key in seen:
                continue
            seen.add(key)
            chroma = dataset_providers(dataset, config.providers, chunker=chunker, progress=False)
            milvus_providers = config.with_vectorstore(MilvusConfig(uri=uri)).providers
            milvus = dataset_providers(dataset, milvus_providers, chunker=chunker, progress=False)
            got = chroma.index.dense.collection.get(include=["embeddings"])  # type: ignore[union-attr]
            ids, vectors = got["ids"], np.asarray(got["embeddings"], dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            recall_c, recall_m, same, asked = [], [], [], []
            for query in dataset.queries:
                v = chroma.encoder.encode_query(query.text)
                v = v / np.linalg.norm(v)
                exact = {ids[i] for i in np.argsort(-(vectors @ v))[:k]}
                asked.append((v, exact))
                c = [h["chunk_id"] for h in chroma.index.dense.query(v, k, None)]
                m = [h["chunk_id"] for h in milvus.index.dense.query(v, k, None)]
                recall_c.append(len(exact & set(c)) / k)
                recall_m.append(len(exact & set(m)) / k)
                same.append(c[:10] == m[:10])
            print(
                f"{path.stem} ({dataset.name}, {len(dataset.queries)} questions, {len(ids)} chunks): dense top-{k} "
                f"against exact cosine: Chroma {np.mean(recall_c):.4f}, Milvus Lite {np.mean(recall_m):.4f}; the "
                f"same top 10 in both stores for {np.mean(same):.1%} of the questions",
                flush=True,
            )
            for ef in (int(e) for e in args.ef.split(",") if e):  # Milvus Lite: faiss HNSW, ef 64 by default
                searched = config.with_vectorstore(MilvusConfig(uri=uri, search_params={"ef": ef})).providers
                store = dataset_providers(dataset, searched, chunker=chunker, progress=False).index.dense
                recall = [len(exact & {h["chunk_id"] for h in store.query(v, k, None)}) / k for v, exact in asked]
                print(f"  Milvus Lite searched with ef {ef}: top-{k} recall {np.mean(recall):.4f}", flush=True)
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--configs",
        nargs="+",
        default=[str(p) for p in sorted((ROOT / "configs").glob("*.yaml"))],
        help="the configs to compare (default: every file in configs/)",
    )
    parser.add_argument("--port", type=int, default=19539, help="the Milvus Lite server's loopback port (19539)")
    parser.add_argument(
        "--dense-recall",
        action="store_true",
        help="only measure each store's dense search against exact cosine (the indexes the configs were scored on)",
    )
    parser.add_argument(
        "--ef",
        default="",
        help="Milvus's dense searches with this HNSW ef (vectorstore."
        "search_params; Milvus Lite's default is 64); with --dense-recall, Milvus Lite's recall at "
        "each of these ef values (comma-separated)",
    )


def main() -> int:
    if "--dense-recall" in sys.argv:
        return common_main("milvus_parity.py", __doc__ or "", dense_recall, _arguments, "milvus-parity-dense.txt")
    return common_main("milvus_parity.py", __doc__ or "", run, _arguments, "milvus-parity.txt")


if __name__ == "__main__":
    raise SystemExit(main())
