"""``python -m benchmarks.perf sparse``: BM25 query latency (analysis + top 10) at 100k and 1M chunks for the default
``sparse`` backend and ``rank_bm25``, the same queries interleaved; build time and memory (resident set growth while
the index is held, and the postings' array bytes); and, on SciFact itself, whether both give the same top 10.

The synthetic corpus: the SciFact abstracts (title + text) analysed by the kit's analyzer; chunk ``i`` is a copy of
abstract ``i mod 5183``. Copy 0 is the abstract itself; in copy ``r >= 1`` each term is replaced, with probability 0.2,
by a term drawn from the corpus's unigram distribution (numpy ``default_rng(seed)``, one stream for the whole corpus),
so lengths, vocabulary and the Zipf shape of term frequencies are kept and no two copies are equal. Deterministic for a
given ``--seed``. Target: p50 <= 10 ms at 1M chunks.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import Report, scifact_queries, table, verdict


def _rss_mb() -> float:
    """This process's resident set size, MiB (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]



def _analysed_scifact(dataset: Path) -> tuple[list[list[str]], Any]:
    from modular_rag.text import Analyzer

    analyzer = Analyzer()
    texts = []
    with open(dataset / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(f"{row.get('title', '')}\n{row['text']}".strip())
    return analyzer.many(texts), analyzer


def synthetic_corpus(base: Sequence[Sequence[str]], n: int, *, seed: int = 0, replace: float = 0.2) -> list[list[str]]:
    """``n`` chunks made from ``base`` documents by the method in the module docstring (deterministic).

    Args:
        base: Analysed documents (term lists).
        n: Chunks to make.
        seed: Seed of the numpy generator that draws the replacements.
        replace: Probability that a term of a copy is replaced by a term drawn from the unigram distribution.
    """
    import numpy as np

    vocab: dict[str, int] = {}
    ids = [np.fromiter((vocab.setdefault(t, len(vocab)) for t in d), dtype=np.int32, count=len(d)) for d in base]
    words = np.array(list(vocab), dtype=object)
    flat = np.concatenate(ids)
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in ids])])
    cumulative = np.cumsum(np.bincount(flat, minlength=len(vocab))) / len(flat)
    rng = np.random.default_rng(seed)
    out: list[list[str]] = []
    copy = 0
    while len(out) < n:
        terms = flat.copy()
        if copy:
            hit = rng.random(len(terms)) < replace
            terms[hit] = np.minimum(np.searchsorted(cumulative, rng.random(int(hit.sum())), side="right"),
                                    len(vocab) - 1)  # fmt: skip
        as_words = words[terms].tolist()
        for d in range(min(len(base), n - len(out))):
            out.append(as_words[offsets[d] : offsets[d + 1]])
        copy += 1
    return out


def run(args: argparse.Namespace, out: Report) -> None:
    import numpy as np

    from modular_rag.sparse import PostingsBM25, RankBM25

    base, analyzer = _analysed_scifact(args.dataset)
    queries = [analyzer(q) for q in scifact_queries(args.dataset, args.queries)]
    queries = [q for q in queries if q]
    out(f"base: SciFact, {len(base)} abstracts, {sum(map(len, base)) / len(base):.0f} terms each on average; "
        f"{len(queries)} SciFact queries (dev + train), top 10")

    # 1. same top 10 on SciFact itself
    okapi, reference, lucene = PostingsBM25.build(base, idf="okapi"), RankBM25(base), PostingsBM25.build(base)
    same = overlap = 0
    worst = 0.0
    for q in queries:
        (a, sa), (b, sb) = okapi.top_k(q, 10), reference.top_k(q, 10)
        same += list(a) == list(b)
        worst = max(worst, float(np.max(np.abs(sa - sb) / np.maximum(np.abs(sb), 1e-9))) if len(sb) else 0.0)
        overlap += len(set(lucene.top_k(q, 10)[0].tolist()) & set(b.tolist()))
    out(f"SciFact: sparse (idf=okapi) and rank_bm25 give the same top 10, in the same order, for {same}/{len(queries)} "
        f"queries (largest relative score difference {worst:.1e}); the default sparse (idf=lucene) shares "
        f"{overlap / len(queries):.2f} of rank_bm25's top 10 on average")
    del okapi, reference, lucene

    rows = []
    notes = []
    for size in [int(s) for s in args.sizes.split(",")]:
        gc.collect()
        t0 = time.perf_counter()
        corpus = synthetic_corpus(base, size, seed=args.seed)
        made = time.perf_counter() - t0
        label = f"{size:,} chunks ({sum(map(len, corpus)) / 1e6:.0f}M terms)"
        built: dict[str, tuple[Any, float, float]] = {}
        for backend in ("sparse", "rank_bm25"):
            gc.collect()
            before = _rss_mb()
            t0 = time.perf_counter()
            scorer: Any = PostingsBM25.build(corpus) if backend == "sparse" else RankBM25(corpus)
            seconds = time.perf_counter() - t0
            gc.collect()
            built[backend] = (scorer, seconds, _rss_mb() - before)
        fast: Any = built["sparse"][0]
        fast.top_k(queries[0], 10)  # computes the MaxScore bounds once
        prune_above = fast.prune_above
        slow_n = min(len(queries), args.slow_queries if size > 200_000 else args.slow_queries * 5)
        lat: dict[str, list[float]] = {"sparse": [], "sparse, no pruning": [], "rank_bm25": []}
        agree = 0
        for i, q in enumerate(queries):
            runs = list(lat) if i < slow_n else ["sparse", "sparse, no pruning"]
            tops = {}
            for run in runs if i % 2 == 0 else runs[::-1]:
                scorer = built["rank_bm25" if run == "rank_bm25" else "sparse"][0]
                if run == "sparse, no pruning":
                    fast.prune_above = sys.maxsize
                t0 = time.perf_counter()
                tops[run] = scorer.top_k(q, 10)[0].tolist()
                lat[run].append((time.perf_counter() - t0) * 1000)
                fast.prune_above = prune_above
            agree += tops["sparse"] == tops["sparse, no pruning"]
        arrays = sum(a.nbytes for a in (fast.indptr, fast.indices, fast.data)) / 2**20
        for run, values in lat.items():
            backend = "rank_bm25" if run == "rank_bm25" else "sparse"
            _, seconds, grew = built[backend]
            speedup = _pct(lat["rank_bm25"], 50) / _pct(values[:slow_n], 50)
            own = run != "sparse, no pruning"  # the unpruned rows share the sparse index
            rows.append([label, run, len(values), _pct(values, 50), _pct(values, 95), seconds if own else "",
                         grew if own else "", round(speedup, 1) if run != "rank_bm25" else ""])  # fmt: skip
        notes.append(f"{label}: corpus made in {made:.0f}s; postings arrays {arrays:,.0f} MiB; MaxScore top 10 "
                     f"equals exhaustive scoring for {agree}/{len(queries)} queries; rank_bm25 timed on the first "
                     f"{slow_n} queries")  # fmt: skip
        if size >= 1_000_000:
            p50 = _pct(lat["sparse"], 50)
            notes.append(f"target at {size:,} chunks: sparse p50 {p50:.2f} ms <= 10 ms: {verdict(p50 <= 10)}")
        del built, corpus, fast, scorer
        gc.collect()
    out()
    out(table(["corpus", "backend", "queries", "p50 ms", "p95 ms", "build s", "RSS growth MiB",
                "rank_bm25 p50 / this p50"], rows))  # fmt: skip
    for note in notes:
        out(note)
    out(f"process peak RSS: {_peak_rss_mb():,.0f} MiB")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
