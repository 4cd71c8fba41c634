"""``python -m benchmarks.perf sparse``: BM25 at 100k and 1M chunks, the kit's scorer beside bm25s and rank_bm25.

The kit's scorer is what ``KnowledgeIndex.search_sparse`` runs (:class:`~modular_rag.segments.SegmentedBM25`):
postings in memory-mapped segments on disk, written as ``modular-rag index`` writes them (one segment per 4,096
chunks, the two smallest adjacent ones merged while there are more than 12), document frequencies and lengths read
from the SQLite catalog at each query (its ``terms`` and ``stats`` tables, filled with the corpus's counts), BM25's
weights computed at query time. Its rows time what a query costs there: the catalog reads (IDFs, average length)
and the top 10 over the segments. A second row times the same postings compacted into one segment.

bm25s (``bm25s.BM25(k1, b, method="lucene")``): its numpy and, when numba is installed, its numba retrieval over the
same build. rank_bm25 (``BM25Okapi``, Okapi's IDF, so not checked for exactness) at sizes up to 200k only, as the
speed of a plain Python scorer. Query latency: the same analysed queries, scorers interleaved in alternating order;
build time (from the analysed term lists to a queryable index); memory (resident set growth while the index is held,
after garbage collection, and the index's arrays: on disk for the kit, in memory for bm25s); exactness: how often
each top 10 equals that of an exhaustive scorer; and what adding 10 chunks costs (the kit writes a segment; bm25s
has no add: it indexes the whole corpus again).

Every scorer is given the same analysed terms (the kit's analyzer: lower case, English stop words, Snowball stemmer),
so what is compared is the scorers, not the tokenisers. The kit and bm25s use the same BM25: k1 1.2, b 0.75, Lucene's
IDF ``log(1 + (N - df + 0.5) / (df + 0.5))`` (bm25s's lucene scores are the kit's divided by k1 + 1: the same
ranking).

The exhaustive scorer: every posting of each query term weighted in float64 from the raw term frequency and document
length (held in :class:`~modular_rag.sparse.PostingsBM25`'s arrays, another implementation, whose lengths and
frequencies are checked against the corpus), summed over all documents; a top 10 agrees with it when its documents'
exhaustive scores equal the exhaustive top 10's scores to within 1e-5 (relative), so documents tied at the 10th
place, or within float32 rounding of it, may be swapped.

The synthetic corpus: the SciFact abstracts (title + text) analysed by the kit's analyzer; chunk ``i`` is a copy of
abstract ``i mod 5183``. Copy 0 is the abstract itself; in copy ``r >= 1`` each term is replaced, with probability 0.2,
by a term drawn from the corpus's unigram distribution (numpy ``default_rng(seed)``, one stream for the whole corpus),
so lengths, vocabulary and the Zipf shape of term frequencies are kept and no two copies are equal. Deterministic for a
given ``--seed``. Target: p50 <= 10 ms at 1M chunks.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import tempfile
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
            terms[hit] = np.minimum(
                np.searchsorted(cumulative, rng.random(int(hit.sum())), side="right"), len(vocab) - 1
            )
        as_words = words[terms].tolist()
        for d in range(min(len(base), n - len(out))):
            out.append(as_words[offsets[d] : offsets[d + 1]])
        copy += 1
    return out


K = 10
"""Documents per query."""


class _Bm25s:
    """bm25s over the same analysed terms, retrieving through its public ``retrieve``; numpy scoring, or numba's
    when ``numba`` is true (the same arrays: a second retriever reads the first one's index)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    @classmethod
    def build(cls, corpus: Sequence[Sequence[str]], *, k1: float, b: float) -> _Bm25s:
        import bm25s

        model = bm25s.BM25(k1=k1, b=b, method="lucene", backend="numpy")
        model.index(list(corpus), show_progress=False)
        return cls(model)

    def with_numba(self) -> _Bm25s:
        import bm25s

        model = bm25s.BM25(k1=self.model.k1, b=self.model.b, method="lucene", backend="numba")
        for name in ("scores", "vocab_dict", "unique_token_ids_set", "nonoccurrence_array"):
            setattr(model, name, getattr(self.model, name))
        return _Bm25s(model)

    def top_k(self, terms: Sequence[str], k: int) -> tuple[Any, Any]:
        found = self.model.retrieve([list(terms)], k=k, show_progress=False, n_threads=0)
        docs, scores = found.documents[0], found.scores[0]
        return docs[scores > 0], scores[scores > 0]  # bm25s fills a top k with zero-score documents

    @property
    def nbytes(self) -> int:
        return sum(self.model.scores[name].nbytes for name in ("data", "indices", "indptr"))


class _Exhaustive:
    """Every posting of the query's terms weighted in float64 from the raw frequencies and lengths (see the module
    docstring); ``top_k`` and ``scores`` of any documents."""

    def __init__(self, postings: Any, corpus: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        import numpy as np

        lengths = np.fromiter(map(len, corpus), dtype=np.int64, count=len(corpus))
        if postings.doc_len is None or not np.array_equal(postings.doc_len, lengths):
            raise AssertionError("the postings' document lengths are not the corpus's")
        if int(postings.tf.sum()) != int(lengths.sum()):
            raise AssertionError("the postings' term frequencies do not add up to the corpus's terms")
        self.p, self.k1, self.b = postings, k1, b
        self.norm = k1 * (1 - b + b * lengths / lengths.mean())

    def scores(self, terms: Sequence[str]) -> Any:
        import numpy as np

        n = self.p.n_docs
        total = np.zeros(n, dtype=np.float64)
        for term in terms:  # a repeated term counts as often as it occurs, as in both scorers
            col = self.p.vocab.get(term)
            if col is None:
                continue
            start, end = int(self.p.indptr[col]), int(self.p.indptr[col + 1])
            docs, tf = self.p.indices[start:end], self.p.tf[start:end].astype(np.float64)
            idf = np.log(1.0 + (n - (end - start) + 0.5) / ((end - start) + 0.5))
            total[docs] += idf * tf * (self.k1 + 1) / (tf + self.norm[docs])
        return total

    def agrees(self, full: Any, docs: Sequence[int]) -> bool:
        """Whether ``docs`` are an exhaustive top 10 of the scores ``full`` (ties and float32 rounding allowed)."""
        import numpy as np

        best = np.sort(full[full > 0])[::-1][:K]
        got = np.sort(full[np.asarray(docs, dtype=np.int64)])[::-1]
        return len(got) == len(best) and bool(np.allclose(got, best, rtol=1e-5, atol=0))


class _Kit:
    """The kit's BM25 as a query runs it: IDFs and the average length from the catalog, the top k over the
    segments; :meth:`build` writes them as ``index`` does."""

    def __init__(self, folder: Path) -> None:
        from modular_rag.catalog import Catalog
        from modular_rag.segments import SegmentedBM25

        self.folder = folder
        self.postings = SegmentedBM25(folder / "bm25")
        self.catalog = Catalog(folder / "catalog.sqlite")

    @classmethod
    def build(cls, folder: Path, corpus: Sequence[Sequence[str]], *, batch: int = 4096) -> _Kit:
        """Segments of ``batch`` chunks (merged as they come, by the segments' own rule), and the catalog's term counts
        and statistics."""
        import numpy as np

        kit = cls(folder)
        for start in range(0, len(corpus), batch):
            kit.postings.add(start, corpus[start : start + batch])
        terms: list[Any] = []
        counts: list[Any] = []
        for seg in kit.postings.segments:  # the document frequencies the catalog holds after those adds
            terms.append(np.asarray(seg.terms))
            counts.append(np.diff(np.asarray(seg.indptr)))
        vocab, where = np.unique(np.concatenate(terms), return_inverse=True)
        df = np.bincount(where, weights=np.concatenate(counts)).astype(np.int64)
        with kit.catalog.transaction() as db:
            db.executemany(
                "INSERT INTO terms (term, df) VALUES (?, ?)",
                zip((t.decode("utf-8") for t in vocab.tolist()), df.tolist(), strict=True),
            )
            db.executemany(
                "INSERT INTO stats (key, value) VALUES (?, ?)",
                [("chunks", len(corpus)), ("length", float(sum(map(len, corpus))))],
            )
        return kit

    def compacted_copy(self, folder: Path) -> tuple[_Kit, float]:
        """A copy with its segments merged into one, and the seconds the merge took."""
        shutil.copytree(self.folder, folder)
        copy = _Kit(folder)
        t0 = time.perf_counter()
        copy.postings.compact()
        return copy, time.perf_counter() - t0

    def top_k(self, terms: Sequence[str], k: int) -> tuple[Any, Any]:
        from modular_rag.segments import lucene_idf

        n, length = self.catalog.stats()
        idf = {t: lucene_idf(df, n) for t, df in self.catalog.document_frequencies(terms).items()}
        return self.postings.top_k(terms, k, idf, length / n)

    @property
    def disk_mib(self) -> float:
        return sum(f.stat().st_size for f in (self.folder / "bm25").rglob("*.npy")) / 2**20


def run(args: argparse.Namespace, out: Report) -> None:
    from modular_rag.sparse import PostingsBM25, RankBM25

    try:
        import bm25s  # noqa: F401 - an optional comparison: pip install bm25s (and numba for its fast path)
    except ImportError:
        have_bm25s = False
        out("bm25s is not installed (pip install bm25s numba): its rows are left out")
    else:
        have_bm25s = True
    have_numba = have_bm25s and importlib.util.find_spec("numba") is not None
    base, analyzer = _analysed_scifact(args.dataset)
    queries = [analyzer(q) for q in scifact_queries(args.dataset, args.queries)]
    queries = [q for q in queries if q]
    out(
        f"base: SciFact, {len(base)} abstracts, {sum(map(len, base)) / len(base):.0f} terms each on average; "
        f"{len(queries)} SciFact queries (dev + train), analysed once, the same terms given to every scorer; top {K}"
    )
    scratch = Path(tempfile.mkdtemp(prefix="perf-sparse-", dir=args.scratch))
    rows = []
    notes = []
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            rows += _one_size(
                size,
                base,
                queries,
                args,
                scratch,
                notes,
                have_bm25s=have_bm25s,
                have_numba=have_numba,
                reference=RankBM25 if size <= 200_000 else None,
                exhaustive_arrays=PostingsBM25.build,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out()
    out(
        table(
            [
                "corpus",
                "scorer",
                "queries",
                "p50 ms",
                "p95 ms",
                "build s",
                "add 10 chunks s",
                "RSS growth MiB",
                "index MiB",
                f"exhaustive top {K}",
            ],
            rows,
        )
    )
    for note in notes:
        out(note)
    out(
        "kit: IDFs and average length read from the catalog (SQLite) at each query, top 10 over the memory-mapped "
        "segments; build: segments written 4,096 chunks at a time and merged as they come (compacted: then into one), "
        "plus the catalog's term counts; index MiB: its .npy files on disk (mapped; the pages a query touches are "
        "read). bm25s: vocabulary, ids, CSC matrix of weights in memory (its numba rows read the numpy build's "
        "arrays); add 10 chunks: bm25s has no add, so its figure is its build over the whole corpus. RSS growth: "
        "while the index is held, after garbage collection"
    )
    out(f"process peak RSS: {_peak_rss_mb():,.0f} MiB")


def _one_size(
    size: int,
    base: Sequence[Sequence[str]],
    queries: Sequence[Sequence[str]],
    args: argparse.Namespace,
    scratch: Path,
    notes: list[str],
    *,
    have_bm25s: bool,
    have_numba: bool,
    reference: Any,
    exhaustive_arrays: Any,
) -> list[list[Any]]:
    """The rows of one corpus size (see the module docstring)."""
    gc.collect()
    t0 = time.perf_counter()
    corpus = synthetic_corpus(base, size, seed=args.seed)
    made = time.perf_counter() - t0
    label = f"{size:,} chunks ({sum(map(len, corpus)) / 1e6:.0f}M terms)"
    builders: dict[str, Any] = {"kit": lambda c: _Kit.build(scratch / f"kit-{size}", c)}
    if have_bm25s:
        builders["bm25s"] = lambda c: _Bm25s.build(c, k1=1.2, b=0.75)
    if reference is not None:
        builders["rank_bm25"] = reference
    built: dict[str, tuple[Any, float, float]] = {}
    for backend, build in builders.items():
        gc.collect()
        before = _rss_mb()
        t0 = time.perf_counter()
        scorer: Any = build(corpus)
        seconds = time.perf_counter() - t0
        gc.collect()
        built[backend] = (scorer, seconds, _rss_mb() - before)
    kit: _Kit = built["kit"][0]
    segments = len(kit.postings.segments)
    compacted, compact_s = kit.compacted_copy(scratch / f"kit-{size}-one")
    exhaustive = _Exhaustive(exhaustive_arrays(corpus), corpus)
    runs: dict[str, Any] = {f"kit ({segments} segments)": kit, "kit (compacted: 1 segment)": compacted}
    if have_bm25s:
        runs["bm25s (numpy)"] = built["bm25s"][0]
        if have_numba:
            runs["bm25s (numba)"] = built["bm25s"][0].with_numba()
            runs["bm25s (numba)"].top_k(queries[0], K)  # compiles the jitted retrieval once
    if reference is not None:
        runs["rank_bm25"] = built["rank_bm25"][0]
    slow_n = min(len(queries), args.slow_queries * 5)
    lat: dict[str, list[float]] = {run: [] for run in runs}
    agree: dict[str, int] = {run: 0 for run in runs if run != "rank_bm25"}
    for i, q in enumerate(queries):
        names = list(runs) if i < slow_n else [r for r in runs if r != "rank_bm25"]
        full = exhaustive.scores(q)
        for run in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            docs = runs[run].top_k(q, K)[0]
            lat[run].append((time.perf_counter() - t0) * 1000)
            if run in agree:
                agree[run] += exhaustive.agrees(full, docs)
    t0 = time.perf_counter()  # adding 10 chunks (copies of the first 10 with a new term) to the kit's postings
    kit.postings.add(size, [[*c, "zzznew"] for c in corpus[:10]])
    add_s = time.perf_counter() - t0
    del corpus
    arrays = {"kit": kit.disk_mib}
    if have_bm25s:
        arrays["bm25s"] = built["bm25s"][0].nbytes / 2**20
    rows = []
    for run, values in lat.items():
        backend = run.split(" ")[0]
        _, seconds, grew = built[backend]
        own = run.startswith("kit (") and "segments" in run or run in ("bm25s (numpy)", "rank_bm25")
        build_s: Any = seconds if own else compact_s if run.startswith("kit (compacted") else ""
        add: Any = add_s if own and backend == "kit" else seconds if own and backend == "bm25s" else ""
        rows.append(
            [
                label,
                run,
                len(values),
                _pct(values, 50),
                _pct(values, 95),
                build_s,
                add,
                grew if own else "",
                round(arrays[backend]) if own and backend in arrays else "",
                f"{agree[run]}/{len(queries)}" if run in agree else "(okapi IDF)",
            ]
        )
    notes.append(
        f"{label}: corpus made in {made:.0f}s; the kit's compacted row: its build s is the compaction of "
        f"the {segments} segments; rank_bm25 timed on the first {slow_n} queries"
        if reference is not None
        else f"{label}: corpus made in {made:.0f}s; the kit's compacted row: its build s is the compaction "
        f"of the {segments} segments; rank_bm25 left out above 200k chunks"
    )
    if size >= 1_000_000:
        p50 = _pct(lat[f"kit ({segments} segments)"], 50)
        notes.append(f"target at {size:,} chunks: kit p50 {p50:.2f} ms <= 10 ms: {verdict(p50 <= 10)}")
    kit.catalog.close()
    compacted.catalog.close()
    del built, runs, kit, compacted, scorer, exhaustive
    gc.collect()
    return rows


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
