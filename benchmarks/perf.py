"""Performance benchmarks: framework overhead, indexing throughput, sparse retrieval at scale, concurrent batches,
start-up. Each subcommand runs the things it compares side by side in one process (interleaved, alternating their
order), so the ratios hold on a noisy shared machine, and prints a table with the ratio against its target.

    .venv/bin/python benchmarks/perf.py overhead    [--dataset DIR] [--queries 300] [--retrieve hybrid,bm25]
    .venv/bin/python benchmarks/perf.py indexing    [--dataset DIR] [--limit N]
    .venv/bin/python benchmarks/perf.py sparse      [--dataset DIR] [--sizes 100000,1000000] [--queries 1019]
    .venv/bin/python benchmarks/perf.py concurrency [--queries 64] [--concurrency 16] [--latency 1.0]
                                                    [--slots 4] [--local-queries 16]
    .venv/bin/python benchmarks/perf.py startup     [--runs 3]
    .venv/bin/python benchmarks/perf.py add         [--size 100000] [--docs 10] [--rounds 2]

Add ``--save`` to write the command line and its output to ``benchmarks/results/perf-<subcommand>.txt``.

What each measures:

* ``overhead``: the linear pattern with retrieval-only operators (``retrieve`` + ``context``; no LLM) built by the
  kit, against the same operator functions (taken from the same builder) called one after the other on a dict.
  Per query over SciFact queries (dev, then train), the two run back to back in rotating order, the query
  embedding cache cleared before each call so both embed the query. Target: ratio <= 1.05. Two more runs split
  the difference: the operators through the kit's per-operator wrapper without a graph, and the same functions
  as the nodes of a bare LangGraph ``StateGraph`` (LangGraph's own cost, no kit).
* ``indexing``: ``index_paths`` on the SciFact corpus (load, chunk, embed, write Chroma, build BM25) into a fresh
  store, with each embeddings backend (ONNX Runtime, torch), against the raw ``SentenceTransformer.encode()`` of
  the same chunk texts with the same batch size. The raw encode runs in two halves around the kit's runs
  (A-B-A), so slow drift on the machine falls on both.
  Target: kit throughput >= 0.90 of raw.
* ``sparse``: BM25 query latency (analysis + top 10) at 100k and 1M chunks for the default ``sparse`` backend
  and ``rank_bm25``, the same queries interleaved; build time and memory (resident set growth while the index is
  held, and the postings' array bytes); and, on SciFact itself, whether both give the same top 10.
  The synthetic corpus: the SciFact abstracts (title + text) analysed by the kit's analyzer; chunk ``i`` is a copy
  of abstract ``i mod 5183``. Copy 0 is the abstract itself; in copy ``r >= 1`` each term is replaced, with
  probability 0.2, by a term drawn from the corpus's unigram distribution (numpy ``default_rng(seed)``, one stream
  for the whole corpus), so lengths, vocabulary and the Zipf shape of term frequencies are kept and no two copies
  are equal. Deterministic for a given ``--seed``. Target: p50 <= 10 ms at 1M chunks.
* ``concurrency``: the linear demo flow (hybrid retrieval, cited answer) on many queries, serially
  (``invoke`` in a loop) and with bounded concurrency (``batch`` / ``abatch`` with ``max_concurrency``,
  ``modular-rag eval --concurrency N``), (a) against an OpenAI-compatible stub that takes ``--latency`` seconds per
  call (``tests/helpers/stub_llm.py``), target: 64 queries at concurrency 16 in <= 1/8 of the serial time; (b)
  against the local llama-server started with ``--slots`` parallel slots: throughput against serial.
* ``startup``: wall time from starting ``modular-rag run --config <linear template> QUESTION`` to its exit with
  the answer, over the demo index; and, in a fresh process doing the same steps, the split: interpreter, imports,
  flow build, model loads (embedder, Chroma, BM25), llama-server start, query; side by side with the embedder on
  torch instead of ONNX Runtime, and with llama-server started only when first needed.
* ``add``: adding ``--docs`` documents to a ``--size``-chunk index (a real persistent Chroma store and the BM25
  file beside it): before, the way ``KnowledgeIndex.add`` used to do it (embed, write Chroma, then
  ``rebuild_sparse()``: read every chunk back from Chroma, analyse every text, build the postings, save), called
  step by step through public calls; after, ``KnowledgeIndex.add`` as it is (the sparse index updated with the new
  chunks only). Each round runs both, each with its own new documents, in alternating order; the table has the
  median of each stage. Each before-round also checks, at full size, that updating the previous index with the same
  chunks gives exactly the full rebuild. Then the link table is rebuilt once for the final index (the cost the next
  multi-hop query pays after either kind of add, since the table follows the index's digest).
  The corpus: SciFact's title + abstract words (split on white space), made into ``--size`` + new documents by the
  ``sparse`` method (copy ``r`` of abstract ``i`` has 20% of its words replaced; deterministic for ``--seed``), one
  chunk per document, content ids as indexing makes them. Embedding 100k chunks with the bundled MiniLM on two
  cores would take over two hours (about 13 chunks/s), so the bulk is written to Chroma with random unit vectors of
  the model's size; only the new documents are embedded with MiniLM. The bulk index is built once and kept under
  ``.modular_rag/perf-add/`` (a run removes what it added, so the next run starts from the same index).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the stub LLM lives with the test helpers
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "scifact"
RESULTS = ROOT / "benchmarks" / "results"

__all__ = ["main"]


class _Report:
    """Collects what a subcommand prints, so ``--save`` can write it beside the command line."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned columns; numbers right-aligned (floats to 3 significant digits below 1, else 2 decimals)."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(isinstance(r[i], int | float) or r[i] == "" for r in rows)
               for i in range(len(headers))]  # fmt: skip
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    for row in cells:
        aligned = (c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric, strict=True))
        lines.append("  ".join(aligned))
    return "\n".join(line.rstrip() for line in lines)


def _rss_mb() -> float:
    """This process's resident set size, MiB (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def _scifact_queries(dataset: Path, limit: int | None) -> list[str]:
    from modular_rag.eval import load_beir

    texts = [q.text for q in load_beir(dataset).queries]
    if (dataset / "train_queries.jsonl").exists():
        texts += [q.text for q in load_beir(dataset, split="train").queries]
    return texts[:limit] if limit else texts


# ------------------------------------------------------------------------------------------------------- overhead


def _overhead(args: argparse.Namespace, out: _Report) -> None:
    from modular_rag.builder import FlowBuilder, build_flow
    from modular_rag.config import load_config
    from modular_rag.eval import load_beir
    from modular_rag.eval.runner import dataset_providers

    dataset = load_beir(args.dataset)
    env = dataset_providers(dataset, progress=False, log=lambda line: print(line, file=sys.stderr))
    queries = _scifact_queries(args.dataset, args.queries)
    encoder: Any = env.encoder  # the SentenceEncoder (its query cache is cleared before each call)
    out(f"SciFact index: {env.index.count()} chunks; {len(queries)} queries, each run the four ways below back to "
        "back, rotating which goes first; query embedding cache cleared before every call")
    rows = []
    for name in args.retrieve.split(","):
        config = load_config({"pattern": "linear", "name": f"overhead-{name}",
                              "operators": {"retrieve": {"name": name, "params": {"k": 10}}, "generate": "none"}})
        flow = build_flow(config, providers=env)
        builder = FlowBuilder(config, "linear", providers=env)
        nodes = [n for n in flow.get_graph().nodes if not n.startswith("__")]

        steps = [step for node in nodes for step in builder.steps(node)]
        fns = [step.fn for step in steps]

        def direct(query: str, fns: Sequence[Callable[..., dict[str, Any]]] = fns) -> dict[str, Any]:
            state: dict[str, Any] = {"query": query}
            for fn in fns:
                state.update(fn(state))
            return state

        def kit_steps(query: str, steps: Sequence[Any] = steps) -> dict[str, Any]:
            state: dict[str, Any] = {"query": query}
            for step in steps:  # the kit's per-operator wrapper (checks, trace, ledger) without a graph
                state.update(step.run(state)[0])
            return state

        bare = _bare_graph(nodes, fns)
        runs: dict[str, Callable[[str], Any]] = {
            "direct": direct,
            "kit steps": kit_steps,
            "bare": lambda query, bare=bare: bare.invoke({"query": query}),
            "graph": lambda query, flow=flow: flow.invoke({"query": query}),
        }
        for q in queries[:10]:  # warm-up: model, index and code paths
            for run in runs.values():
                run(q)
        times: dict[str, list[float]] = {label: [] for label in runs}
        order = list(runs.items())
        for i, q in enumerate(queries):
            for label, run in order[i % len(order):] + order[: i % len(order)]:  # rotate which goes first
                encoder.clear_cache()
                t0 = time.perf_counter()
                result = run(q)
                times[label].append((time.perf_counter() - t0) * 1000)
                assert result.get("evidence") is not None, label
        mean = {label: statistics.mean(t) for label, t in times.items()}
        ratio = sum(times["graph"]) / sum(times["direct"])
        rows.append([f"{name} ({' -> '.join(nodes)})", *(round(mean[label], 2) for label in runs),
                     round(sum(times["bare"]) / sum(times["direct"]), 3),
                     round(sum(times["graph"]) / sum(times["bare"]), 3), round(ratio, 3),
                     _verdict(ratio <= 1.05)])  # fmt: skip
    out()
    out(_table(["retrieval-only linear flow", "direct ms/q", "kit steps ms/q", "bare LangGraph ms/q",
                "kit graph ms/q", "bare LangGraph / direct", "kit graph / bare LangGraph",
                "kit graph / direct", "target <= 1.05"], rows))  # fmt: skip
    out("direct: the operator functions called one after the other on a dict; kit steps: the same through the kit's "
        "per-operator wrapper (checks, trace, ledger), no graph; bare LangGraph: the same functions as the nodes of "
        "a plain StateGraph (the kit's state schema, no wrapper); kit graph: the flow build_flow returns.")
    out()
    out(_framework_floor())


def _bare_graph(nodes: Sequence[str], fns: Sequence[Callable[..., dict[str, Any]]]) -> Any:
    """A plain LangGraph chain of ``fns`` as nodes, on the kit's state schema: LangGraph's own cost, no kit."""
    from langgraph.graph import END, START, StateGraph

    from modular_rag.state import RAGState

    graph = StateGraph(RAGState)
    previous = START
    for node, fn in zip(nodes, fns, strict=True):
        graph.add_node(node, fn)
        graph.add_edge(previous, node)
        previous = node
    graph.add_edge(previous, END)
    return graph.compile()


def _framework_floor() -> str:
    """The graph's fixed cost: the linear pattern's two retrieval-only nodes with operators that return at once."""
    from modular_rag.builder import _Step, make_node
    from modular_rag.config import OperatorSpec

    hits = [{"chunk_id": str(i), "text": "x" * 300, "score": 1.0, "channel": "bm25", "metadata": {}} for i in range(10)]

    def retrieve(state: Any) -> dict[str, Any]:
        return {"candidates": list(hits)}

    def context(state: Any) -> dict[str, Any]:
        return {"evidence": [{"ref": i + 1, **h} for i, h in enumerate(state["candidates"][:5])]}

    def direct() -> None:
        state: dict[str, Any] = {"query": "q"}
        state.update(retrieve(state))
        state.update(context(state))

    def traced(name: str, fn: Callable[[Any], dict[str, Any]]) -> Any:
        return make_node([_Step(name, name, fn, OperatorSpec(name=name))])

    names = ["retrieve", "context"]
    graphs = {"LangGraph alone": _bare_graph(names, [retrieve, context]),
              "LangGraph + kit tracing": _bare_graph(names, [traced("retrieve", retrieve), traced("context", context)])}

    def per_call(fn: Callable[[], Any], n: int = 400) -> float:
        for _ in range(20):
            fn()
        best = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best.append((time.perf_counter() - t0) * 1000 / n)
        return min(best)

    rows: list[list[Any]] = [["operators called directly", round(per_call(direct), 4)]]
    for label, compiled in graphs.items():
        rows.append([label, round(per_call(partial(compiled.invoke, {"query": "q"})), 3)])
    return "Fixed cost per query with operators that return at once (best of 3 x 400 calls):\n" + _table(
        ["two-node retrieval-only flow", "ms/query"], rows)


# ------------------------------------------------------------------------------------------------------- indexing


def _indexing(args: argparse.Namespace, out: _Report) -> None:
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
        out(_table(["run", "chunks", "seconds", "chunks/s", "of raw throughput"], rows))
        for backend, (seconds, _) in runs.items():
            ratio = raw_total / seconds
            out(f"kit ({backend}) / raw throughput: {ratio:.3f} (target >= 0.90: {_verdict(ratio >= 0.90)})")
        for backend, (_, summary) in runs.items():
            if summary.stages:
                out(f"inside the kit's {backend} run (seconds): "
                    + ", ".join(f"{k} {v:.1f}" for k, v in summary.stages.items()))  # fmt: skip
        dense: Any = env.index.dense
        out(f"embedding batches of {IndexingConfig().batch_size} chunks, longest texts first; each batch written to "
            f"Chroma on a background thread while the next is embedded (a write takes at most "
            f"{dense.max_batch:,} chunks, client.get_max_batch_size()); BM25 built once, after the last batch")


# --------------------------------------------------------------------------------------------------------- sparse


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


def _sparse(args: argparse.Namespace, out: _Report) -> None:
    import numpy as np

    from modular_rag.sparse import PostingsBM25, RankBM25

    base, analyzer = _analysed_scifact(args.dataset)
    queries = [analyzer(q) for q in _scifact_queries(args.dataset, args.queries)]
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
            notes.append(f"target at {size:,} chunks: sparse p50 {p50:.2f} ms <= 10 ms: {_verdict(p50 <= 10)}")
        del built, corpus, fast, scorer
        gc.collect()
    out()
    out(_table(["corpus", "backend", "queries", "p50 ms", "p95 ms", "build s", "RSS growth MiB",
                "rank_bm25 p50 / this p50"], rows))  # fmt: skip
    for note in notes:
        out(note)
    out(f"process peak RSS: {_peak_rss_mb():,.0f} MiB")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------------------------------- concurrency


def _demo_config(llm: dict[str, Any], index: str, *, max_tokens: int | None = None) -> Any:
    from modular_rag import template_path
    from modular_rag.config import load_config

    data = load_config(template_path("linear")).to_dict()
    data["providers"]["llm"] = llm
    data["providers"]["vectorstore"]["path"] = index
    if max_tokens is not None:
        data["operators"]["generate"] = {"name": "cited_answer", "params": {"max_tokens": max_tokens}}
    return load_config(data)


def _demo_queries(n: int) -> list[str]:
    from modular_rag.eval.datasets import load_demo

    base = [q.text for q in load_demo().queries]
    return [base[i % len(base)] + ("" if i < len(base) else f" (case {i // len(base)})") for i in range(n)]


def _clear_query_cache(env: Any) -> None:
    """Forget cached query embeddings, so every run embeds its queries."""
    env.encoder.clear_cache()


@contextmanager
def _timed(label: str, store: dict[str, float]) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    store[label] = time.perf_counter() - t0


def _concurrency(args: argparse.Namespace, out: _Report) -> None:
    import asyncio

    from modular_rag.builder import build_flow
    from modular_rag.providers import Providers
    from tests.helpers.stub_llm import StubLLM

    index = str(ROOT / ".modular_rag" / "demo")
    _ensure_demo_index(index)
    queries = _demo_queries(args.queries)
    n, c = len(queries), args.concurrency
    with StubLLM(latency_s=args.latency) as stub:
        config = _demo_config({"name": "openai", "model": "stub", "base_url": stub.url, "max_retries": 0}, index)
        env = Providers(config.providers)
        flow = build_flow(config, providers=env)
        flow.invoke({"query": "warm-up: load the embedder and the index"})
        inputs = [{"query": q} for q in queries]
        times: dict[str, float] = {}
        answers: dict[str, list[str]] = {}
        _clear_query_cache(env)
        with _timed("serial", times):
            answers["serial"] = [flow.invoke(x)["answer"]["text"] for x in inputs]
        _clear_query_cache(env)
        with _timed("batch", times):
            answers["batch"] = [r["answer"]["text"] for r in flow.batch(inputs, {"max_concurrency": c})]
        _clear_query_cache(env)
        with _timed("abatch", times):
            results = asyncio.run(flow.abatch(inputs, {"max_concurrency": c}))
            answers["abatch"] = [r["answer"]["text"] for r in results]
        peak = stub.max_in_flight
        eval_times = _eval_cli_times(stub.url, index, c)
    same = answers["serial"] == answers["batch"] == answers["abatch"]
    rows = [["invoke, one by one", 1, n, round(times["serial"], 2), round(n / times["serial"], 2), 1.0, ""]]
    for mode in ("batch", "abatch"):
        share = times[mode] / times["serial"]
        rows.append([f"{mode}(max_concurrency={c})", c, n, round(times[mode], 2), round(n / times[mode], 2),
                     round(share, 3), _verdict(share <= 1 / 8)])  # fmt: skip
    for conc, (seconds, count) in eval_times.items():
        share = seconds / eval_times[1][0]
        rows.append([f"modular-rag eval --dataset demo --concurrency {conc}", conc, count, round(seconds, 2),
                     round(count / seconds, 2), round(share, 3), ""])  # fmt: skip
    out(f"(a) linear demo flow (hybrid retrieval over the demo index, cited answer) against an OpenAI-compatible stub "
        f"that takes {args.latency:.2f}s per call; {n} distinct queries")
    out(_table(["run", "concurrency", "queries", "seconds", "queries/s", "time / serial", "target <= 0.125"], rows))
    out(f"answers identical and in query order across serial, batch and abatch: {same}; "
        f"most calls the stub had in flight at once: {peak}")
    out()
    _local_slots(args, index, out)


def _eval_cli_times(url: str, index: str, concurrency: int) -> dict[int, tuple[float, int]]:
    """``modular-rag eval --dataset demo`` with the stub, serially and with ``--concurrency``: seconds, queries."""
    import contextlib
    import io

    import yaml

    from modular_rag.cli import main as cli
    from modular_rag.eval.datasets import load_demo

    out: dict[int, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "stub.yaml"
        config.write_text(yaml.safe_dump(_demo_config({"name": "openai", "model": "stub", "base_url": url}, index)
                                         .to_dict()))  # fmt: skip
        for conc in (1, concurrency):
            with contextlib.redirect_stdout(io.StringIO()):
                t0 = time.perf_counter()
                status = cli(["eval", "--dataset", "demo", "--config", str(config), "--concurrency", str(conc),
                              "--quiet"])  # fmt: skip
                seconds = time.perf_counter() - t0
            if status != 0:
                raise RuntimeError(f"modular-rag eval --concurrency {conc} exited with {status}")
            out[conc] = (seconds, len(load_demo().queries))
    return out


def _local_slots(args: argparse.Namespace, index: str, out: _Report) -> None:
    from modular_rag.builder import build_flow
    from modular_rag.providers import Providers

    slots = args.slots
    config = _demo_config({"name": "local", "parallel": slots}, index, max_tokens=64)
    env = Providers(config.providers)
    flow = build_flow(config, providers=env)
    t0 = time.perf_counter()
    flow.invoke({"query": "warm-up: start the server"})
    started = time.perf_counter() - t0
    queries = _demo_queries(args.local_queries)
    inputs = [{"query": q} for q in queries]
    times: dict[str, float] = {}
    tokens: dict[str, int] = {}
    for label, run in (("serial", lambda: [flow.invoke(x) for x in inputs]),
                       ("batch", lambda: flow.batch(inputs, {"max_concurrency": slots}))):  # fmt: skip
        _clear_query_cache(env)
        t0 = time.perf_counter()
        results = run()
        times[label] = time.perf_counter() - t0
        tokens[label] = sum(e.get("completion_tokens", 0) for r in results for e in r.get("ledger", []))
    speedup = times["serial"] / times["batch"]
    rows = [["invoke, one by one", 1, len(inputs), round(times["serial"], 1), round(len(inputs) / times["serial"], 3),
             tokens["serial"], ""],
            [f"batch(max_concurrency={slots})", slots, len(inputs), round(times["batch"], 1),
             round(len(inputs) / times["batch"], 3), tokens["batch"], round(speedup, 2)]]  # fmt: skip
    out(f"(b) the same flow against the local llama-server (SmolLM2-135M, {slots} parallel slots, answers of up to "
        f"64 tokens, {os.cpu_count()} CPU cores; first query with server start {started:.1f}s, not counted)")
    out(_table(["run", "concurrency", "queries", "seconds", "queries/s", "completion tokens", "throughput x serial"],
               rows))  # fmt: skip


def _ensure_demo_index(path: str) -> None:
    from modular_rag import demo_corpus_path
    from modular_rag.config import ChromaConfig, ProvidersConfig
    from modular_rag.providers import Providers
    from operators.indexing import index_paths

    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=path, collection="demo")))
    if env.index.count() == 0:
        index_paths([demo_corpus_path()], env, progress=False)


# -------------------------------------------------------------------------------------------------------- startup

_PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
marks = {}
def mark(name):
    global t0
    now = time.perf_counter(); marks[name] = now - t0; t0 = now
from modular_rag.cli import main  # what the command imports first
mark("import modular_rag.cli")
from modular_rag.builder import build_flow  # what `run` imports
from modular_rag.config import load_config
from modular_rag.providers import Providers
mark("import builder, config, providers (langgraph, langchain-core)")
config = load_config(sys.argv[1])
env = Providers(config.providers)
if sys.argv[3] == "prestart":
    from modular_rag.cli import _prestart
    _prestart(config, env)
mark("load config (as run does: + launch llama-server, no wait)")
flow = build_flow(config, providers=env)
mark("build flow (operator and pattern plugins)")
env.encoder.encode_query(sys.argv[2])
mark("load embedder (MiniLM: ONNX Runtime session, or torch + sentence-transformers)")
env.index.count(); env.index.sparse
mark("open index (Chroma, BM25 file)")
env.llm  # the chat client (imports langchain-openai) on the local server, which it starts or waits for
mark("LLM client + llama-server: start it, or wait for the launched one")
result = flow.invoke({"query": sys.argv[2]})
assert result["answer"]["text"]
mark("query (retrieve + generate)")
print(json.dumps(marks))
"""


def _startup(args: argparse.Namespace, out: _Report) -> None:
    from modular_rag import template_path
    from modular_rag.cli import DEMO_QUESTION

    index = str(ROOT / ".modular_rag" / "demo")
    _ensure_demo_index(index)
    python = sys.executable
    binary = str(Path(python).parent / "modular-rag")
    with tempfile.TemporaryDirectory() as tmp:
        import yaml

        data = yaml.safe_load(template_path("linear").read_text())
        data["providers"]["vectorstore"]["path"] = index
        config = Path(tmp) / "linear.yaml"
        config.write_text(yaml.safe_dump(data))
        data["providers"]["embeddings"] = {"name": "minilm", "backend": "torch"}
        torch_config = Path(tmp) / "linear-torch.yaml"
        torch_config.write_text(yaml.safe_dump(data))
        variants = {  # column: (config, mode)
            "as run does it (s)": (config, "prestart"),
            "embeddings backend torch (s)": (torch_config, "prestart"),
            "server started on first use (s)": (config, "sequential"),
        }
        totals, interpreter = [], []
        phases: dict[str, list[dict[str, float]]] = {column: [] for column in variants}
        for i in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run([python, "-c", "pass"], check=True)
            interpreter.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            done = subprocess.run([binary, "run", "--config", str(config), DEMO_QUESTION], capture_output=True,
                                  text=True)  # fmt: skip
            totals.append(time.perf_counter() - t0)
            if done.returncode != 0 or "A:" not in done.stdout:
                raise RuntimeError(f"modular-rag run failed ({done.returncode}): {done.stderr[-500:]}")
            order = list(variants.items())
            for column, (cfg, mode) in order[i % len(order) :] + order[: i % len(order)]:
                child = subprocess.run([python, "-c", _PHASES, str(cfg), DEMO_QUESTION, mode], capture_output=True,
                                       text=True)  # fmt: skip
                if child.returncode != 0:
                    raise RuntimeError(f"start-up phases failed: {child.stderr[-800:]}")
                phases[column].append(json.loads(child.stdout.strip().splitlines()[-1]))
    cmd = f"modular-rag run --config <linear template over the demo index> {DEMO_QUESTION!r}"
    out(f"{cmd}: {args.runs} runs, median of each")
    out(f"whole command, start to exit with the answer: {statistics.median(totals):.2f}s "
        f"(runs: {', '.join(f'{t:.2f}' for t in totals)})")
    out()
    out("The same steps in a fresh process, timed one by one: as `run` does them (llama-server launched at once, so "
        "it loads while the rest does; the embedder on ONNX Runtime), with the embedder on torch + "
        "sentence-transformers instead, and with the server started only when first needed")
    first = next(iter(variants))
    rows: list[list[Any]] = [["python interpreter start (python -c pass)",
                              *[statistics.median(interpreter)] * len(variants)]]  # fmt: skip
    for name in phases[first][0]:
        rows.append([name, *(statistics.median(p[name] for p in phases[column]) for column in variants)])
    rows.append(["total", *(sum(r[j] for r in rows) for j in range(1, len(variants) + 1))])
    out(_table(["phase", *variants], rows))


# ------------------------------------------------------------------------------------------------------------ add

_ADD_FORMAT = 1
"""Bumped when the cached bulk index of ``add`` must be made again."""


def _synthetic_chunks(dataset: Path, n: int, *, seed: int) -> list[Any]:
    """``n`` chunks made from the SciFact abstracts' words by :func:`synthetic_corpus` (see ``add`` in the module
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


def _bulk_index(cache: Path, bulk: Sequence[Any], fresh: Sequence[Any], seed: int, out: _Report) -> Any:
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


def _add(args: argparse.Namespace, out: _Report) -> None:
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
    queries = _scifact_queries(args.dataset, 50)
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
    out(_table(["stage", "before: add, then rebuild_sparse()", "after: add (incremental)", "before / after"], rows))
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


# ------------------------------------------------------------------------------------------------------------ main

COMMANDS: dict[str, Callable[[argparse.Namespace, _Report], None]] = {
    "overhead": _overhead,
    "indexing": _indexing,
    "sparse": _sparse,
    "concurrency": _concurrency,
    "startup": _startup,
    "add": _add,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/perf.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("overhead", help="graph vs the same operator functions called directly")
    p.add_argument("--queries", type=int, default=300, help="SciFact queries (dev, then train); default 300")
    p.add_argument("--retrieve", default="hybrid,bm25", help="retrieval operators to compare (comma-separated)")
    p = sub.add_parser("indexing", help="index_paths vs raw encode() on the SciFact corpus")
    p.add_argument("--limit", type=int, help="only the first N documents (default: all)")
    p = sub.add_parser("sparse", help="BM25 latency at 100k / 1M chunks: sparse vs rank_bm25")
    p.add_argument("--sizes", default="100000,1000000", help="corpus sizes in chunks (comma-separated)")
    p.add_argument("--queries", type=int, help="SciFact queries (default: all of dev + train)")
    p.add_argument("--slow-queries", type=int, default=20,
                   help="queries rank_bm25 runs at sizes above 200k (5x this below); default 20")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus")
    p = sub.add_parser("concurrency", help="serial vs batch/abatch/eval --concurrency against slow endpoints")
    p.add_argument("--queries", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--latency", type=float, default=1.0, help="seconds per call of the stub endpoint")
    p.add_argument("--slots", type=int, default=4, help="llama-server parallel slots (and concurrency)")
    p.add_argument("--local-queries", type=int, default=16, help="queries against the local llama-server")
    p = sub.add_parser("startup", help="modular-rag run on the demo: total and split")
    p.add_argument("--runs", type=int, default=3)
    p = sub.add_parser("add", help="adding a few documents to a large index: full BM25 rebuild vs incremental")
    p.add_argument("--size", type=int, default=100_000, help="chunks in the index added to; default 100000")
    p.add_argument("--docs", type=int, default=10, help="documents added per run; default 10")
    p.add_argument("--rounds", type=int, default=2, help="rounds (each runs both ways); default 2")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus and the random vectors")
    for p in sub.choices.values():
        p.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="the SciFact folder (BEIR format)")
        p.add_argument("--save", action="store_true", help="also write benchmarks/results/perf-<command>.txt")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    out = _Report()
    COMMANDS[args.command](args, out)
    if args.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        file = RESULTS / f"perf-{args.command}.txt"
        command = "$ .venv/bin/python benchmarks/perf.py " + " ".join(shlex.quote(a) for a in argv)
        file.write_text(command + "\n" + "\n".join(out.lines) + "\n", encoding="utf-8")
        print(f"wrote {file.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
