"""``python -m benchmarks.perf add``: adding ``--docs`` documents to a ``--size``-chunk index (a real persistent Chroma
store and the BM25 file beside it): before, the way ``KnowledgeIndex.add`` used to do it (embed, write Chroma, then
``rebuild_sparse()``: read every chunk back from Chroma, analyse every text, build the postings, save), called step
by step through public calls; after, ``KnowledgeIndex.add`` as it is (the sparse index updated with the new chunks
only). Each round runs both, each with its own new documents, in alternating order; the table has the median of each
stage. Each before-round also checks, at full size, that updating the previous index with the same chunks gives
exactly the full rebuild. Then the link table is rebuilt once for the final index (the cost the next multi-hop query
pays after either kind of add, since the table follows the index's digest).

The corpus: SciFact's title + abstract words (split on white space), made into ``--size`` + new documents by the
``sparse`` method (copy ``r`` of abstract ``i`` has 20% of its words replaced; deterministic for ``--seed``), one chunk
per document, content ids as indexing makes them. Embedding 100k chunks with the bundled MiniLM on two cores would take
over two hours (about 13 chunks/s), so the bulk is written to Chroma with random unit vectors of the model's size; only
the new documents are embedded with MiniLM. The bulk index is built once and kept under ``.modular_rag/perf-add/`` (a
run removes what it added, so the next run starts from the same index).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import ROOT, Report, scifact_queries, table
from .sparse import synthetic_corpus

_ADD_FORMAT = 1
"""Bumped when the cached bulk index of ``add`` must be made again."""


def _synthetic_chunks(dataset: Path, n: int, *, seed: int) -> list[Any]:
    """``n`` chunks made from the SciFact abstracts' words by :func:`synthetic_corpus` (see the module
    docstring): text, metadata ``doc_id`` (abstract id and copy) and ``title``, content-derived ids."""
    from operators.indexing import chunk_id

    with open(dataset / "corpus.jsonl", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    words = [f"{row.get('title', '')}\n{row['text']}".split() for row in rows]
    chunks = []
    for i, doc in enumerate(synthetic_corpus(words, n, seed=seed)):
        row = rows[i % len(rows)]
        doc_id, text = f"{row['id']}-{i // len(rows)}", " ".join(doc)
        chunks.append({"chunk_id": chunk_id(doc_id, text), "text": text,
                       "metadata": {"doc_id": doc_id, "title": row.get("title", "")}})  # fmt: skip
    return chunks


def _add_providers(folder: Path) -> Any:
    from modular_rag.config import ChromaConfig, ProvidersConfig
    from modular_rag.providers import Providers

    return Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(folder), collection="perf-add")))


def _bulk_index(cache: Path, bulk: Sequence[Any], fresh: Sequence[Any], seed: int, out: Report) -> Any:
    """The cached bulk index (made when missing or not matching ``bulk``): Chroma with random unit vectors, and the
    BM25 file built from it. What an interrupted run added (``fresh``) is removed first."""
    import numpy as np

    manifest = cache / "manifest.json"
    want = {"format": _ADD_FORMAT, "size": len(bulk), "seed": seed}
    env = _add_providers(cache / "index")
    if manifest.exists():
        made = json.loads(manifest.read_text())
        backup = env.index.sparse_file.with_suffix(".base.npz")
        if backup.exists():  # a run was interrupted before it put things back
            env.index.dense.delete([c["chunk_id"] for c in fresh])
            os.replace(backup, env.index.sparse_file)
        if {k: made.get(k) for k in want} == want and env.index.count() == len(bulk):
            out(f"bulk index: reused {cache.relative_to(ROOT)} (made in {made['seconds']:.0f}s: "
                f"{made['chroma seconds']:.0f}s writing Chroma, {made['sparse seconds']:.0f}s building BM25)")
            return env
        manifest.unlink()
    env.index.clear()
    dim = int(env.encoder.dim or env.encoder.encode(["probe"]).shape[1])
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    step = env.index.dense.max_batch
    for i in range(0, len(bulk), step):
        part = bulk[i : i + step]
        vectors = rng.standard_normal((len(part), dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        env.index.dense.add([c["chunk_id"] for c in part], [c["text"] for c in part], [c["metadata"] for c in part],
                            vectors)  # fmt: skip
    t1 = time.perf_counter()
    env.index.rebuild_sparse()
    t2 = time.perf_counter()
    made = {**want, "seconds": t2 - t0, "chroma seconds": t1 - t0, "sparse seconds": t2 - t1}
    manifest.write_text(json.dumps(made))
    out(f"bulk index: made {cache.relative_to(ROOT)} in {t2 - t0:.0f}s ({t1 - t0:.0f}s writing {len(bulk):,} chunks "
        f"with random {dim}-d vectors to Chroma, {t2 - t1:.0f}s building BM25 from the store)")  # fmt: skip
    return env


def _add_by_full_rebuild(index: Any, batch: Sequence[Any]) -> dict[str, float]:
    """What ``KnowledgeIndex.add`` did before the sparse index was updated in place, through public calls: look the
    ids up, embed the new chunks, write them to Chroma, then ``rebuild_sparse()`` from every chunk of the store."""
    ids, texts, metas = [c["chunk_id"] for c in batch], [c["text"] for c in batch], [c["metadata"] for c in batch]
    t0 = time.perf_counter()
    index.dense.count()
    if index.dense.existing(ids):
        raise RuntimeError("the new documents are already in the index")
    t1 = time.perf_counter()
    vectors = index.encoder.encode(texts)
    t2 = time.perf_counter()
    index.dense.add(ids, texts, metas, vectors)
    t3 = time.perf_counter()
    sparse: dict[str, float] = {}
    index.rebuild_sparse(timings=sparse)
    t4 = time.perf_counter()
    return {"embed": t2 - t1, "dense": t1 - t0 + t3 - t2, **{f"sparse {k}": v for k, v in sparse.items()},
            "sparse": t4 - t3, "total": t4 - t0}  # fmt: skip


def _add_incrementally(index: Any, batch: Sequence[Any]) -> dict[str, float]:
    """``KnowledgeIndex.add`` as it is; the split from its report (the Chroma part is what is left of the total: the
    write runs on a background thread, and the report's ``dense write wait`` only counts waiting for it)."""
    report = index.add(list(batch))
    if report.sparse_path != "incremental":
        raise RuntimeError(f"the add took the {report.sparse_path!r} path, not the incremental one")
    dense = report.seconds - report.stages["embed"] - report.stages["sparse"]
    return {"embed": report.stages["embed"], "dense": dense,
            **{f"sparse {k}": v for k, v in report.sparse_stages.items()}, "sparse": report.stages["sparse"],
            "total": report.seconds}  # fmt: skip


def _same_index(a: Any, b: Any, queries: Sequence[str]) -> str:
    """Where two sparse indexes differ (``""`` when they do not): ids, texts, metadata, digest, postings, weights,
    top 10 of each query."""
    import numpy as np

    checks = {
        "ids": a.ids == b.ids, "texts": a.texts == b.texts, "metadata": a.metadatas == b.metadatas,
        "digest": a.digest == b.digest, "vocabulary": a.scorer.vocab == b.scorer.vocab,
        "postings": np.array_equal(a.scorer.indptr, b.scorer.indptr)
        and np.array_equal(a.scorer.indices, b.scorer.indices),
        "weights": np.allclose(a.scorer.data, b.scorer.data, rtol=1e-6, atol=0),
        "top 10": all(a.search(q, 10) == b.search(q, 10) for q in queries),
    }  # fmt: skip
    return ", ".join(name for name, ok in checks.items() if not ok)


_ADD_ROWS = [
    ("embed (MiniLM, the new documents only)", "embed"),
    ("Chroma: id lookups and write", "dense"),
    ("sparse: read every chunk back from Chroma", "sparse dump"),
    ("sparse: analyse (tokenise, stop words, stem)", "sparse analyse"),
    ("sparse: build postings (before) / merge + reweight (after)", "sparse build|sparse merge"),
    ("sparse: save the file (whole npz)", "sparse save"),
    ("sparse, all", "sparse"),
    ("total", "total"),
]


def run(args: argparse.Namespace, out: Report) -> None:
    from modular_rag.index import SparseIndex
    from modular_rag.links import LinkTable

    rounds, docs = args.rounds, args.docs
    t0 = time.perf_counter()
    chunks = _synthetic_chunks(args.dataset, args.size + 2 * rounds * docs, seed=args.seed)
    bulk, fresh = chunks[: args.size], chunks[args.size :]
    out(f"corpus: {args.size:,} synthetic SciFact chunks ({sum(len(c['text']) for c in bulk) / len(bulk):,.0f} "
        f"characters each on average; made in {time.perf_counter() - t0:.0f}s); {rounds} rounds, each adding "
        f"{docs} new documents (one chunk each) the old way and {docs} others the new way, alternating which goes "
        f"first; {os.cpu_count()} CPU cores")  # fmt: skip
    cache = ROOT / ".modular_rag" / "perf-add" / f"{args.size}-{args.seed}"
    env = _bulk_index(cache, bulk, fresh, args.seed, out)
    index = env.index
    sparse_file, links_file = index.sparse_file, index.sparse_file.with_suffix(".links.json")
    backup = sparse_file.with_suffix(".base.npz")
    import shutil

    shutil.copy2(sparse_file, backup)
    queries = scifact_queries(args.dataset, 50)
    added: list[str] = []
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    checks: list[str] = []
    try:
        index.encoder.encode(["load the model"])
        t0 = time.perf_counter()
        postings = len(SparseIndex.load(sparse_file).scorer.indices)
        load_seconds = time.perf_counter() - t0
        index.sparse  # noqa: B018 - held in memory, as in a process that has searched or indexed already
        for r in range(rounds):
            batches = {"before": fresh[2 * r * docs : (2 * r + 1) * docs],
                       "after": fresh[(2 * r + 1) * docs : (2 * r + 2) * docs]}  # fmt: skip
            for run in ("before", "after") if r % 2 == 0 else ("after", "before"):
                batch = batches[run]
                added += [c["chunk_id"] for c in batch]
                gc.collect()
                if run == "after":
                    runs[run].append(_add_incrementally(index, batch))
                    continue
                previous = index.sparse
                runs[run].append(_add_by_full_rebuild(index, batch))
                same = previous.updated([c["chunk_id"] for c in batch], [c["text"] for c in batch],
                                        [dict(c["metadata"]) for c in batch])  # fmt: skip
                checks.append(_same_index(same, index.sparse, queries))
        final = index.sparse
        t0 = time.perf_counter()
        LinkTable.build(final.texts, final.metadatas, digest=final.digest)
        links_seconds = time.perf_counter() - t0
        file_mb = sparse_file.stat().st_size / 2**20
    finally:  # leave the cached bulk index as it was
        index.dense.delete(added)
        shutil.move(backup, sparse_file)
        links_file.unlink(missing_ok=True)

    rows: list[list[Any]] = []
    median: dict[str, dict[str, float]] = {}
    for label, keys in _ADD_ROWS:
        cells = []
        for run in ("before", "after"):
            values = [sum(st.get(k, 0.0) for k in keys.split("|")) for st in runs[run]]
            has = any(k in st for st in runs[run] for k in keys.split("|"))
            median.setdefault(run, {})[keys] = statistics.median(values) if has else 0.0
            cells.append(round(statistics.median(values), 3) if has else "")
        ratio = (median["before"][keys] / median["after"][keys]) if median["after"][keys] > 0.001 else ""
        rows.append([label, *cells, round(ratio, 1) if isinstance(ratio, float) else ""])
    out()
    out(f"adding {docs} documents to {args.size:,} chunks ({postings:,} postings; BM25 file {file_mb:,.0f} MiB), "
        f"median seconds over {rounds} rounds")  # fmt: skip
    out(table(["stage", "before: add, then rebuild_sparse()", "after: add (incremental)", "before / after"], rows))
    before, after = median["before"], median["after"]
    out(f"total: {before['total']:.2f}s before, {after['total']:.2f}s after: {before['total'] / after['total']:.1f}x "
        f"faster; sparse step: {before['sparse']:.2f}s -> {after['sparse']:.2f}s "
        f"({before['sparse'] / after['sparse']:.1f}x)")  # fmt: skip
    out(f"after: saving the whole file is {after['sparse save']:.2f}s, {after['sparse save'] / after['sparse']:.0%} of "
        f"the sparse step and {after['sparse save'] / after['total']:.0%} of the add (I/O and JSON of every text, "
        f"proportional to the index); analysing the new texts {after['sparse analyse']:.3f}s; merging the postings "
        f"and recomputing every weight {after['sparse build|sparse merge']:.2f}s")  # fmt: skip
    bad = [c for c in checks if c]
    out(f"check at full size: updating the previous index with the same chunks equals the full rebuild "
        f"(ids, texts, metadata, digest, vocabulary, postings, weights, top 10 of {len(queries)} SciFact queries) in "
        f"{len(checks) - len(bad)}/{len(checks)} rounds" + (f"; differs in: {'; '.join(bad)}" if bad else ""))
    out(f"link table: LinkTable.build over the final {len(final.ids):,} chunks takes {links_seconds:.1f}s; it is not "
        f"part of add (KnowledgeIndex.links rebuilds it when the digest changed, so the next multi-hop query pays it "
        f"after either kind of add)")  # fmt: skip
    out(f"loading the BM25 file (SparseIndex.load, what a fresh process pays before its first add): "
        f"{load_seconds:.2f}s")
