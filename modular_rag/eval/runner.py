"""Run flows over BEIR datasets: index the corpus once per embedding / chunking setting, run queries, score them.

Indexes are cached under ``$MODULAR_RAG_HOME/eval`` (default ``.modular_rag/eval``), keyed by the corpus file,
the embeddings and the chunker, so a second run of the same setting reuses the index. The BM25 settings
(``providers.sparse``: k1, b, stemmer, stop words) are not part of the key: encoding is what is slow, so a run
with other BM25 settings keeps the dense vectors and the index rebuilds BM25 from the stored chunks (seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modular_rag.config import ChromaConfig, FlowConfig, MilvusConfig, OperatorSpec, ProvidersConfig, load_config
from modular_rag.eval.datasets import BeirDataset, Query
from modular_rag.eval.metrics import retrieval_metrics
from modular_rag.providers import Providers

__all__ = [
    "eval_home",
    "index_folder",
    "config_chunker",
    "dataset_providers",
    "doc_ranking",
    "retrieved_docs",
    "RetrievalResult",
    "run_retrieval",
    "QueryRecord",
    "FlowResult",
    "evaluate_flow",
    "answered_right",
    "judge_right",
]


def eval_home() -> Path:
    """Where evaluation indexes are cached."""
    return Path(os.environ.get("MODULAR_RAG_HOME", ".modular_rag")) / "eval"


def _setting_key(dataset: BeirDataset, providers: ProvidersConfig, chunker: OperatorSpec) -> str:
    # the sparse settings are not part of the key: the index rebuilds BM25 from the stored chunks when they differ
    # the embedding backend is not either: ONNX Runtime and torch give the same vectors (to within 1e-5)
    embeddings = providers.embeddings.model_dump_json(exclude={"backend"})
    from modular_rag.ingest import CHUNK_FORMAT

    parts = [dataset.fingerprint(), embeddings, chunker.model_dump_json(), f"chunks v{CHUNK_FORMAT}"]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


def index_folder(
    dataset: BeirDataset, providers: ProvidersConfig, chunker: OperatorSpec, *, cache: Path | None = None
) -> Path:
    """Where :func:`dataset_providers` keeps the index of this corpus, embedder and chunker (``complete.json`` in
    it once the index is built)."""
    label = dataset.corpus_file.resolve().parent.name if dataset.corpus_file.exists() else dataset.name
    folder = (cache or eval_home()) / f"{label}-{_setting_key(dataset, providers, chunker)}"
    if isinstance(providers.vectorstore, MilvusConfig):  # the index is in that Milvus; the folder keeps its catalog
        server = hashlib.sha1(providers.vectorstore.uri.encode()).hexdigest()[:8]
        return folder.with_name(f"{folder.name}-milvus-{server}")
    return folder


def _eval_store(providers: ProvidersConfig, folder: Path) -> ChromaConfig | MilvusConfig:
    """The store an evaluation indexes into: a Chroma folder of the cache, or, when the config names a Milvus, a
    collection of that Milvus named after the cache folder, with its catalog in that folder."""
    vs = providers.vectorstore
    if isinstance(vs, MilvusConfig):
        collection = "eval_" + re.sub(r"\W", "_", folder.name)
        return vs.model_copy(update={"collection": collection, "catalog": str(folder / "catalog")})
    return ChromaConfig(path=str(folder), collection="beir")


def config_chunker(config: FlowConfig, default: str) -> OperatorSpec:
    """The chunker an evaluation indexes a config's corpus with: the config's ``indexing.chunker`` when the config
    sets one (a ``tune`` result indexes passages, say), else ``default`` (the dataset's: ``document`` for BEIR rows,
    ``recursive`` for folders of documents)."""
    if "indexing" in config.model_fields_set and "chunker" in config.indexing.model_fields_set:
        return config.indexing.chunker
    return OperatorSpec(name=default)


def dataset_providers(
    dataset: BeirDataset,
    providers: ProvidersConfig | None = None,
    *,
    chunker: OperatorSpec | None = None,
    cache: Path | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    sentences: bool = True,
) -> Providers:
    """Providers whose index holds the dataset's corpus, indexing it on first use.

    Args:
        dataset: The dataset.
        providers: LLM / embeddings / sparse settings. The vector store is replaced by the cached index: a Chroma
            folder under ``cache``, or, when ``providers.vectorstore`` is a Milvus, a collection in that Milvus
            named after the setting (``eval_<dataset>_<key>_milvus_<uri hash>``) with its catalog under ``cache``.
        chunker: How to chunk (default: ``document`` for BEIR rows, one chunk per row; ``recursive`` for folders).
        cache: Cache folder (default :func:`eval_home`).
        progress: Show a progress bar while indexing.
        log: Receives one line when indexing happens.
        sentences: Store each chunk's sentence vectors, which the evidence scorer reads (a retrieval-only run needs
            none: without them, SciFact indexes in about a third of the time). An index cached without them gets them
            when a later call asks for them.
    """
    from modular_rag.ingest import index_paths

    base = providers or ProvidersConfig()
    spec = chunker or OperatorSpec(name=dataset.default_chunker)
    folder = index_folder(dataset, base, spec, cache=cache)
    cfg = base.model_copy(update={"vectorstore": _eval_store(base, folder)})
    env = Providers(cfg)
    marker = folder / "complete.json"
    made = json.loads(marker.read_text()) if marker.exists() else None
    held = env.index.count() if made is not None and isinstance(cfg.vectorstore, MilvusConfig) else None
    if held is not None and made is not None and held != made["chunks"]:
        if log:  # the server lost or changed the collection since: index again
            log(f"{env.index.dense.describe()} holds {held} chunks, not {made['chunks']}: indexing again")
        env.index.clear()
        made = None
    if made is None or (sentences and not made.get("sentences", True)):
        env.index.sentences.store = sentences
        start = time.perf_counter()
        summary = index_paths(dataset.corpus_paths, env, chunker=spec, progress=progress)  # a rerun backfills them
        info = {
            "chunks": summary.index_chunks,
            "seconds": round(time.perf_counter() - start, 1),
            "sentences": sentences,
        }
        marker.write_text(json.dumps(info))
        if log:
            log(
                f"indexed {dataset.name}: {summary.documents} documents, {summary.index_chunks} chunks in "
                f"{info['seconds']}s -> {folder}"
            )
    return env


def doc_ranking(hits: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Chunk hits -> document ranking: each document at the rank of its best chunk (scores = reverse rank)."""
    ranking: dict[str, float] = {}
    for hit in hits:
        doc = str(hit["metadata"].get("doc_id", hit["chunk_id"]))
        if doc not in ranking:
            ranking[doc] = float(len(hits) - len(ranking))
    return ranking


@dataclass
class RetrievalResult:
    """A config's retrieval run on a dataset and its metrics."""

    name: str
    run: dict[str, dict[str, float]]
    metrics: dict[str, dict[str, float]]
    ms_per_query: float
    ledger: dict[str, float] = field(default_factory=dict)

    @property
    def mean(self) -> dict[str, float]:
        """Mean metrics over the queries."""
        return self.metrics["mean"]


def run_retrieval(
    config: FlowConfig | Mapping[str, Any],
    dataset: BeirDataset,
    env: Providers,
    *,
    name: str | None = None,
    progress: bool = False,
) -> RetrievalResult:
    """Run a flow's retrieval part on every query and score the document rankings.

    The flow is built with ``providers=env`` (the dataset's index); set ``generate: none`` in the config to skip
    generation. Milliseconds per query exclude one untimed warm-up query (model and index loads).
    """
    from modular_rag.builder import build_flow
    from modular_rag.trace import totals

    cfg = load_config(config)
    flow = build_flow(cfg, providers=env)
    run: dict[str, dict[str, float]] = {}
    cost: dict[str, float] = {}
    queries = dataset.queries
    iterator: Any = queries
    if progress:
        from tqdm import tqdm

        iterator = tqdm(queries, desc=name or cfg.name or cfg.pattern, leave=False)
    if queries:  # warm-up, untimed: model and index loads are not per-query costs
        flow.invoke({"query": queries[0].text})
    start = time.perf_counter()
    for q in iterator:
        out = flow.invoke({"query": q.text})
        run[q.id] = doc_ranking(out.get("candidates") or [])
        for key, value in totals(out.get("ledger")).items():
            cost[key] = cost.get(key, 0.0) + value
    elapsed = (time.perf_counter() - start) * 1000 / max(len(queries), 1)
    per_query = {k: v / max(len(queries), 1) for k, v in cost.items()}
    metrics = retrieval_metrics(dataset.qrels, run, recall_at=(5, 10, 100))
    return RetrievalResult(name or cfg.name or cfg.pattern, run, metrics, elapsed, per_query)


def retrieved_docs(result: Mapping[str, Any]) -> tuple[list[str], str]:
    """The documents a run returned, in its order, and which list they come from: the evidence pack the model was
    shown when there is one, else the candidates (a retrieval-only flow). Candidates the model never saw are not
    scored."""
    for key in ("evidence", "candidates"):
        hits = list(result.get(key) or [])
        if hits:
            return list(doc_ranking(hits)), key
    return [], "none"


@dataclass
class QueryRecord:
    """One query's outcome: answer, scores, cost."""

    qid: str
    answer: str
    refused: bool
    em: float
    f1: float
    docs: list[str]
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    retrievals: int
    ms: float
    supported: float | None = None
    contains: float = 0.0
    citations: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    scored: str = "none"

    @property
    def backed(self) -> bool:
        """Whether at least one citation of the answer is supported by the passage it names."""
        return any(c.get("verdict") == "supported" for c in self.citations)


@dataclass
class FlowResult:
    """A config's run over a dataset: per-query records, retrieval metrics over the documents the flow returned
    (:func:`retrieved_docs`; :attr:`scored` says which list), answer metrics, and cost per query."""

    name: str
    pattern: str
    records: list[QueryRecord]
    retrieval: dict[str, float]
    seconds: float
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each query's retrieval metrics (nDCG@10, MRR@10, recall@5/10), whose means :attr:`retrieval` holds."""

    @property
    def scored(self) -> str:
        """Which list the retrieval metrics scored: ``evidence`` (what the model was shown), ``candidates`` (a
        retrieval-only flow), or both in query order of first use."""
        return ", ".join(dict.fromkeys(r.scored for r in self.records if r.error is None)) or "none"

    def summary(self) -> dict[str, float]:
        """Means (and maxima of cost) over the queries."""
        from modular_rag.eval.metrics import mean

        recs = self.records
        out = {
            "queries": float(len(recs)),
            "answered": mean(float(bool(r.answer) or r.refused) for r in recs),
            "errors": float(sum(r.error is not None for r in recs)),
            "em": mean(r.em for r in recs),
            "f1": mean(r.f1 for r in recs),
            "contains": mean(r.contains for r in recs),
            "contains_backed": mean(float(r.contains and r.backed) for r in recs),
            "supported": mean(r.supported for r in recs if r.supported is not None),
            "refused": mean(float(r.refused) for r in recs),
            "llm_calls": mean(r.llm_calls for r in recs),
            "llm_calls_max": float(max((r.llm_calls for r in recs), default=0)),
            "retrievals": mean(r.retrievals for r in recs),
            "retrievals_max": float(max((r.retrievals for r in recs), default=0)),
            "tokens": mean(r.prompt_tokens + r.completion_tokens for r in recs),
            "ms": mean(r.ms for r in recs),
        }
        out.update(self.retrieval)
        return out


def _record(query: Query, out: Mapping[str, Any] | BaseException, ms: float) -> QueryRecord:
    from modular_rag.answers import strip_citations
    from modular_rag.eval.metrics import best_answer_scores, contains_answer
    from modular_rag.trace import totals
    from operators.generation import check_answer

    if isinstance(out, BaseException):
        return QueryRecord(query.id, "", False, 0.0, 0.0, [], 0, 0, 0, 0, ms, error=f"{type(out).__name__}: {out}")
    answer: Any = out.get("answer") or {}
    text = str(answer.get("text", ""))
    said = strip_citations(text)  # the answer without its [n] markers: they are not part of what it says
    em, f1 = best_answer_scores(said, query.answers) if query.answers else (0.0, 0.0)
    contains = contains_answer(said, query.answers) if query.answers and not answer.get("refused") else 0.0
    cost = totals(out.get("ledger"))
    evidence = list(out.get("evidence") or [])
    if answer and not answer.get("refused") and "supported" not in answer:  # a generator that ran no check
        answer = check_answer(answer, query.text, evidence)
    by_ref = {e["ref"]: e for e in evidence}
    citations = [
        {
            "ref": c["ref"],
            "chunk_id": c["chunk_id"],
            "method": c["method"],
            "doc_id": str(by_ref.get(c["ref"], {}).get("metadata", {}).get("doc_id", "")),
            **{k: c[k] for k in ("verdict", "reason") if k in c},
        }
        for c in answer.get("citations") or []
    ]
    supported = None if not answer or answer.get("refused") else answer.get("supported")
    docs, scored = retrieved_docs(out)
    return QueryRecord(
        query.id,
        text,
        bool(answer.get("refused")),
        em,
        f1,
        docs,
        int(cost["llm_calls"]),
        int(cost["prompt_tokens"]),
        int(cost["completion_tokens"]),
        int(cost["retrievals"]),
        ms,
        supported,
        contains,
        citations,
        scored=scored,
    )


def evaluate_flow(
    config: FlowConfig | Mapping[str, Any],
    dataset: BeirDataset,
    env: Providers,
    *,
    name: str | None = None,
    concurrency: int = 1,
    progress: bool = False,
    on_record: Callable[[QueryRecord], None] | None = None,
) -> FlowResult:
    """Run a flow on every query of a dataset and score it.

    Retrieval metrics are computed over the documents each run returned, in its order (:func:`retrieved_docs`: the
    evidence pack the model saw, else the candidates); answer EM / F1 use the dataset's ``answers`` when it has
    them. A query whose run raises is recorded with its error and scores zero.

    Args:
        config: The flow config (its providers are replaced by ``env``, the dataset's index).
        dataset: The dataset.
        env: Providers over the dataset's index (:func:`dataset_providers`).
        name: Label for reports (default: the config's name or pattern).
        concurrency: Queries in flight (``batch`` with ``max_concurrency``); 1 runs them one by one.
        progress: Show a progress bar.
        on_record: Called with each query's record as it is scored (a page's progress).
    """
    from modular_rag.builder import build_flow
    from modular_rag.eval.metrics import retrieval_metrics

    cfg = load_config(config)
    flow = build_flow(cfg, providers=env)
    label = name or cfg.name or cfg.pattern
    queries = dataset.queries
    records: list[QueryRecord] = []
    start = time.perf_counter()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(queries), desc=label, leave=False)
    if concurrency <= 1:
        for q in queries:
            t0 = time.perf_counter()
            try:
                out: Any = flow.invoke({"query": q.text})
            except Exception as exc:  # recorded per query; the run goes on
                out = exc
            records.append(_record(q, out, (time.perf_counter() - t0) * 1000))
            if on_record:
                on_record(records[-1])
            if bar:
                bar.update(1)
    else:
        outs = flow.batch(
            [{"query": q.text} for q in queries], {"max_concurrency": concurrency}, return_exceptions=True
        )
        from modular_rag.trace import totals

        for q, out in zip(queries, outs, strict=True):
            ms = 0.0 if isinstance(out, BaseException) else totals(out.get("ledger"))["ms"]
            records.append(_record(q, out, ms))
            if on_record:
                on_record(records[-1])
        if bar:
            bar.update(len(queries))
    if bar:
        bar.close()
    run = {r.qid: {d: float(len(r.docs) - i) for i, d in enumerate(r.docs)} for r in records}
    per_query = retrieval_metrics(dataset.qrels, run, recall_at=(5, 10))
    metrics = per_query.pop("mean")
    metrics["all@5"] = _all_at(dataset.qrels, records, 5)
    if any(q.answers for q in queries):
        metrics["right"] = answered_right(dataset, records)
    return FlowResult(label, cfg.pattern, records, metrics, time.perf_counter() - start, per_query)


def answered_right(dataset: BeirDataset, records: Sequence[QueryRecord]) -> float:
    """The share of questions answered right, as a user judges an answer: a question with gold answers is right when
    the answer holds one (``contains``) and cites a passage of a gold document (when the dataset names gold
    documents for it); a question with neither gold answers nor gold documents (unanswerable) when it is refused. A
    question with gold documents and no gold answer (a test set's inverse cloze: retrieval only) is not judged
    (:func:`judge_right` judges each)."""
    from modular_rag.eval.metrics import mean

    by_id = {q.id: q for q in dataset.queries}
    judged = [judge_right(by_id.get(r.qid), dataset.qrels.get(r.qid, {}), r)[0] for r in records]
    return mean(v for v in judged if v is not None)


def judge_right(query: Query | None, gold: Mapping[str, int], record: QueryRecord) -> tuple[float | None, list[str]]:
    """One question's part of :func:`answered_right`: 1.0 (right), 0.0 (wrong) or ``None`` (not judged: gold
    documents and no gold answer), and why it is not right (empty when it is): the run failed, it refused an
    answerable question, it answered an unanswerable one, the answer holds no gold value, no citation names a gold
    document; when the gold documents are known and none was among those the run showed, that is said too.

    Args:
        query: The question (``None``: a record of a question the dataset does not hold, judged wrong).
        gold: The question's gold documents (document id -> relevance).
        record: The run's record.
    """
    if query is None:
        return 0.0, [f"{record.qid} is not a question of the dataset"]
    if not query.answers and gold:  # an inverse cloze: retrieval only
        return None, []
    if record.error is not None:
        return 0.0, [f"the run failed: {record.error}"]
    if not query.answers:  # neither gold answers nor gold documents: the corpus does not answer it
        return (1.0, []) if record.refused else (0.0, ["answered a question the set says the corpus cannot answer"])
    why: list[str] = []
    if record.refused:
        why.append("refused a question the set answers")
    elif not record.contains:
        why.append("no gold value: the answer holds none of the gold answers")
    if gold and not any(gold.get(c.get("doc_id", ""), 0) > 0 for c in record.citations):
        why.append("no gold citation: no citation names a passage of a gold document")
    if why and gold and not any(gold.get(d, 0) > 0 for d in record.docs):
        shown = "showed the model" if record.scored == "evidence" else "retrieved"
        why.append(f"gold document not retrieved: none was among the {len(record.docs)} documents the run {shown}")
    return (0.0 if why else 1.0), why


def _all_at(qrels: Mapping[str, Mapping[str, int]], records: Sequence[QueryRecord], k: int) -> float:
    """Share of queries with every relevant document among the first ``k`` shown (multi-hop support coverage)."""
    from modular_rag.eval.metrics import mean

    by_id = {r.qid: set(r.docs[:k]) for r in records}
    return mean(float(all(d in by_id.get(q, set()) for d, s in rel.items() if s > 0)) for q, rel in qrels.items())
