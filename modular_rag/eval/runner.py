"""Run flows over BEIR datasets: index the corpus once per embedding / chunking setting, run queries, score them.

Indexes are cached under ``$MODULAR_RAG_HOME/eval`` (default ``.modular_rag/eval``), keyed by the corpus file,
the embeddings, the sparse settings and the chunker, so a second run of the same setting reuses the index.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modular_rag.config import ChromaConfig, FlowConfig, OperatorSpec, ProvidersConfig, load_config
from modular_rag.eval.datasets import BeirDataset
from modular_rag.eval.metrics import retrieval_metrics
from modular_rag.providers import Providers

__all__ = ["eval_home", "dataset_providers", "doc_ranking", "RetrievalResult", "run_retrieval"]


def eval_home() -> Path:
    """Where evaluation indexes are cached."""
    return Path(os.environ.get("MODULAR_RAG_HOME", ".modular_rag")) / "eval"


def _setting_key(dataset: BeirDataset, providers: ProvidersConfig, chunker: OperatorSpec) -> str:
    parts = [dataset.fingerprint(), providers.embeddings.model_dump_json(), providers.sparse.model_dump_json(),
             chunker.model_dump_json()]  # fmt: skip
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


def dataset_providers(
    dataset: BeirDataset,
    providers: ProvidersConfig | None = None,
    *,
    chunker: OperatorSpec | None = None,
    cache: Path | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> Providers:
    """Providers whose index holds the dataset's corpus, indexing it on first use.

    Args:
        dataset: The dataset.
        providers: LLM / embeddings / sparse settings (the vector store is replaced by the cached index).
        chunker: How to chunk corpus rows (default: ``document``: one chunk per row, title first).
        cache: Cache folder (default :func:`eval_home`).
        progress: Show a progress bar while indexing.
        log: Receives one line when indexing happens.
    """
    from operators.indexing import index_paths

    base = providers or ProvidersConfig()
    spec = chunker or OperatorSpec(name="document")
    folder = (cache or eval_home()) / f"{dataset.name}-{_setting_key(dataset, base, spec)}"
    cfg = base.model_copy(update={"vectorstore": ChromaConfig(path=str(folder), collection="beir")})
    env = Providers(cfg)
    marker = folder / "complete.json"
    if not marker.exists():
        start = time.perf_counter()
        summary = index_paths([dataset.corpus_file], env, chunker=spec, progress=progress)
        info = {"chunks": summary.index_chunks, "seconds": round(time.perf_counter() - start, 1)}
        marker.write_text(json.dumps(info))
        if log:
            log(f"indexed {dataset.name}: {summary.documents} documents, {summary.index_chunks} chunks in "
                f"{info['seconds']}s -> {folder}")  # fmt: skip
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
    generation.
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
    start = time.perf_counter()
    for q in iterator:
        out = flow.invoke({"query": q.text})
        run[q.id] = doc_ranking(out.get("candidates") or [])
        for key, value in totals(out.get("ledger")).items():
            cost[key] = cost.get(key, 0.0) + value
    elapsed = (time.perf_counter() - start) * 1000 / max(len(queries), 1)
    per_query = {k: v / max(len(queries), 1) for k, v in cost.items()}
    return RetrievalResult(name or cfg.name or cfg.pattern, run, retrieval_metrics(dataset.qrels, run), elapsed, per_query)
