"""SciFact, retrieval only, model-free: does fusing dense search over ~600-character passages with BM25 over whole
abstracts (each channel at the granularity it prefers, fused per document) beat the single-granularity hybrids? And
two more model-free ideas on top of the best hybrid: more channels (three and four granularity x method lists,
dense over titles alone) and Rocchio query feedback for the dense channel (the query vector plus beta times the mean
of the first hybrid ranking's top-m abstract vectors, searched again over passages).

    .venv/bin/python benchmarks/granularity.py [--root ../shared/datasets] [--split train] [--pool 200] [--save]

Both indexes (one chunk per abstract; ``recursive`` 600/100 passages) are the cached evaluation indexes under
``$MODULAR_RAG_HOME/eval`` (built on first use: about 5 and 13 minutes on 2 cores). Every channel takes ``--pool``
hits per query, passages are pooled to their document by their best score, and the lists are fused per document
by score fusion (z-scored or min-max, dense weight w, BM25 weight 1) or RRF (k=60). BM25 uses the kit's defaults.
Run it on ``train`` (the split tuning reads): it chooses nothing, it measures whether the idea is worth a chunker.
``--save`` writes ``benchmarks/results/granularity-<split>.txt``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from modular_rag.config import OperatorSpec, ProvidersConfig  # noqa: E402
from modular_rag.eval.datasets import load_beir  # noqa: E402
from modular_rag.eval.metrics import retrieval_metrics  # noqa: E402
from modular_rag.eval.runner import dataset_providers, doc_ranking  # noqa: E402
from modular_rag.state import Hit  # noqa: E402
from modular_rag.tables import format_table  # noqa: E402
from operators.fusion import rrf, score_fusion  # noqa: E402

CHANNELS = ("bm25_doc", "dense_doc", "bm25_pas", "dense_pas", "dense_title")
PAIRS = (("dense_doc", "bm25_doc"), ("dense_pas", "bm25_pas"), ("dense_pas", "bm25_doc"))
MANY = (
    (("dense_pas", "bm25_pas", "bm25_doc"), (1.0, 0.5, 0.5)),
    (("dense_pas", "bm25_pas", "dense_doc"), (1.0, 1.0, 0.25)),
    (("dense_pas", "bm25_pas", "dense_doc", "bm25_doc"), (1.0, 1.0, 0.3, 0.3)),
    (("dense_pas", "bm25_pas", "dense_title"), (1.0, 1.0, 0.25)),
)
FEEDBACK = ((3, 0.3), (3, 1.0), (5, 0.6), (10, 0.3))  # (m, beta)


def per_document(hits: Sequence[Hit]) -> list[Hit]:
    """Hits pooled to their document (its best-scoring chunk), best first; the document id becomes the hit id."""
    best: dict[str, Hit] = {}
    for hit in hits:
        doc = str(hit["metadata"].get("doc_id", hit["chunk_id"]))
        if doc not in best or hit["score"] > best[doc]["score"]:
            best[doc] = cast(Hit, {**hit, "chunk_id": doc})
    return sorted(best.values(), key=lambda h: -h["score"])


def main() -> None:
    """Print (and with ``--save`` store) nDCG@10 and R@5 of each channel and fusion."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(ROOT.parent / "shared" / "datasets"))
    parser.add_argument("--split", default="train")
    parser.add_argument("--pool", type=int, default=200)
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    dataset = load_beir(Path(args.root) / "scifact", split=args.split)
    providers = ProvidersConfig.model_validate({"embeddings": {"name": "minilm"}})
    docs = dataset_providers(dataset, providers, chunker=OperatorSpec(name="document"), progress=False)
    passages = dataset_providers(
        dataset,
        providers,
        progress=False,
        chunker=OperatorSpec(name="recursive", params={"chunk_size": 600, "chunk_overlap": 100}),
    )
    encoder = docs.index.encoder
    assert encoder is not None
    titled = [row for row in dataset.corpus() if row["title"]]
    title_vectors = np.asarray(encoder.encode([row["title"] for row in titled]), dtype=np.float32)
    vectors = {q.id: np.asarray(encoder.encode_query(q.text), dtype=np.float32) for q in dataset.queries}

    def by_title(vector: np.ndarray) -> list[Hit]:
        scores = title_vectors @ vector
        return [
            {"chunk_id": titled[i]["id"], "score": float(scores[i]), "text": "", "channel": "title", "metadata": {}}
            for i in np.argsort(-scores)[: args.pool]
        ]

    lists = {
        q.id: {
            "bm25_doc": per_document(docs.index.search_sparse(q.text, args.pool, None)),
            "dense_doc": per_document(docs.index.search_dense(q.text, args.pool, None, vector=vectors[q.id])),
            "bm25_pas": per_document(passages.index.search_sparse(q.text, args.pool, None)),
            "dense_pas": per_document(passages.index.search_dense(q.text, args.pool, None, vector=vectors[q.id])),
            "dense_title": by_title(vectors[q.id]),
        }
        for q in dataset.queries
    }

    def row(label: str, run: dict[str, dict[str, float]]) -> list[str]:
        mean = retrieval_metrics(dataset.qrels, run, recall_at=(5,))["mean"]
        return [label, f"{mean['ndcg@10']:.4f}", f"{mean['recall@5']:.4f}"]

    rows = [row(c, {q: doc_ranking(ls[c]) for q, ls in lists.items()}) for c in CHANNELS]
    for dense, sparse in PAIRS:
        for weight in (0.5, 0.75, 1.0, 1.5):
            for norm in ("zscore", "minmax"):
                rows.append(
                    row(
                        f"{dense} + {sparse}, {norm}, w={weight}",
                        {
                            q: doc_ranking(
                                score_fusion([ls[dense], ls[sparse]], weights=(weight, 1.0), norm=norm, k=100)
                            )
                            for q, ls in lists.items()
                        },
                    )
                )
        rows.append(
            row(
                f"{dense} + {sparse}, rrf",
                {q: doc_ranking(rrf([ls[dense], ls[sparse]], k=100)) for q, ls in lists.items()},
            )
        )
    for names, weights in MANY:
        rows.append(
            row(
                " + ".join(names) + f", minmax, w={'/'.join(map(str, weights))}",
                {
                    q: doc_ranking(score_fusion([ls[n] for n in names], weights=weights, norm="minmax", k=100))
                    for q, ls in lists.items()
                },
            )
        )
    first = {q: score_fusion([ls["dense_pas"], ls["bm25_pas"]], norm="minmax", k=100) for q, ls in lists.items()}
    chunk_ids, _, metas = docs.index.dense.dump()
    chunk_of = {str(meta.get("doc_id", cid)): cid for cid, meta in zip(chunk_ids, metas, strict=True)}
    for m, beta in FEEDBACK:
        run = {}
        for q, ls in lists.items():
            top = docs.index.dense.get_vectors([chunk_of[h["chunk_id"]] for h in first[q][:m]])  # type: ignore[union-attr]
            moved = vectors[q] + beta * np.mean(list(top.values()), axis=0)
            again = per_document(passages.index.search_dense("", args.pool, None, vector=moved / np.linalg.norm(moved)))
            run[q] = doc_ranking(score_fusion([again, ls["bm25_pas"]], norm="minmax", k=100))
        rows.append(row(f"Rocchio m={m} beta={beta}: dense_pas + bm25_pas, minmax, w=1.0", run))
    text = (
        f"$ .venv/bin/python benchmarks/granularity.py --split {args.split} --pool {args.pool}\n"
        f"scifact ({args.split}, {len(dataset.queries)} queries), bundled MiniLM, BM25 defaults\n"
        + format_table(["channels", "nDCG@10", "R@5"], rows, max_width=80)
    )
    print(text)
    if args.save:
        out = ROOT / "benchmarks" / "results" / f"granularity-{args.split}.txt"
        out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
