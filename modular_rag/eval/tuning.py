"""Grid search of hybrid retrieval settings on a tuning split: BM25 k1 / b, fusion method, dense weight, pool.

Encoding is the slow part, so each channel is searched once per query and pool: the dense store once per pool
(its HNSW search is approximate, and the hits below the first few dozen change with the number asked for), and
BM25 once per (k1, b) at the deepest pool, over an index built in memory from the same chunks (exact, so a
shallower pool is a prefix). Every fusion setting is then scored by fusing those lists with
:func:`operators.fusion.fuse`, the function the ``hybrid`` retriever calls. A grid of a few hundred settings over
800 queries takes minutes. The ``tune`` command confirms the best setting with a real run of its flow.

Rerankers (``embedding`` re-score, ``mmr``) are tuned afterwards on the best setting's candidates by running the
registered operators themselves.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modular_rag.config import SparseConfig
from modular_rag.eval.datasets import BeirDataset
from modular_rag.eval.metrics import retrieval_metrics
from modular_rag.eval.runner import doc_ranking
from modular_rag.providers import Providers
from modular_rag.state import Hit

__all__ = [
    "HybridSetting",
    "HybridGrid",
    "TuneRow",
    "ChannelRuns",
    "channel_runs",
    "tune_hybrid",
    "tune_rerank",
    "hybrid_flow",
]

FUSIONS = ("rrf", "convex", "weighted")


@dataclass(frozen=True)
class HybridSetting:
    """One point of the grid: BM25 parameters and the hybrid retriever's fusion parameters."""

    k1: float
    b: float
    fusion: str
    dense_weight: float
    pool: int

    @property
    def weights(self) -> tuple[float, float]:
        """The retriever's ``(dense, sparse)`` weights."""
        return (self.dense_weight, round(1.0 - self.dense_weight, 6))

    def label(self) -> str:
        """A short description for tables."""
        return f"k1={self.k1} b={self.b} {self.fusion} w={self.weights[0]}/{self.weights[1]} pool={self.pool}"


def hybrid_flow(setting: HybridSetting, *, k: int, rerank: Sequence[Mapping[str, Any]] = (),
                name: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A retrieval-only linear flow config for a setting (BM25 parameters in ``providers.sparse``)."""
    operators: dict[str, Any] = {
        "retrieve": {"name": "hybrid", "params": {"k": k, "pool": setting.pool, "fusion": setting.fusion,
                                                  "weights": list(setting.weights)}},
        "context": "none",
        "generate": "none",
    }  # fmt: skip
    if rerank:
        operators["rerank"] = [dict(r) for r in rerank]
    return {"pattern": "linear", "name": name or setting.label(), "providers": {"sparse": {"k1": setting.k1,
            "b": setting.b}}, "operators": operators}  # fmt: skip


@dataclass(frozen=True)
class HybridGrid:
    """The values tried for each knob; the grid is their product."""

    k1: tuple[float, ...] = (0.9, 1.2, 1.5)
    b: tuple[float, ...] = (0.4, 0.6, 0.75, 0.9)
    fusion: tuple[str, ...] = FUSIONS
    dense_weight: tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7)
    pool: tuple[int, ...] = (100, 200)

    def __post_init__(self) -> None:
        from modular_rag.errors import ConfigError

        for name in ("k1", "b", "fusion", "dense_weight", "pool"):
            if not getattr(self, name):
                raise ConfigError(f"--{name.replace('_', '-')}", "give at least one value")
        unknown = [f for f in self.fusion if f not in FUSIONS]
        if unknown:
            raise ConfigError("--fusion", f"unknown fusion {unknown[0]!r}; fusions: {', '.join(FUSIONS)}")
        if any(not 0.0 < w < 1.0 for w in self.dense_weight):
            raise ConfigError("--dense-weight", f"weights must be strictly between 0 and 1 (got {self.dense_weight})")
        if any(not 0.0 <= k1 <= 10.0 for k1 in self.k1) or any(not 0.0 <= b <= 1.0 for b in self.b):
            raise ConfigError("--k1/--b", "k1 must be in [0, 10] and b in [0, 1]")
        if any(p <= 0 for p in self.pool):
            raise ConfigError("--pool", f"pools must be > 0 (got {self.pool})")

    @property
    def size(self) -> int:
        """Number of settings."""
        return len(self.k1) * len(self.b) * len(self.fusion) * len(self.dense_weight) * len(self.pool)

    def settings(self) -> Iterator[HybridSetting]:
        """Every setting, BM25 parameters outermost."""
        for k1, b, fusion, w, pool in itertools.product(self.k1, self.b, self.fusion, self.dense_weight, self.pool):
            yield HybridSetting(k1, b, fusion, w, pool)


@dataclass
class TuneRow:
    """A setting (or reranker) and its mean metrics on the tuning split."""

    label: str
    metrics: dict[str, float]
    setting: HybridSetting | None = None
    rerank: dict[str, Any] | None = None


@dataclass
class ChannelRuns:
    """Per pool, each query's dense hits; per ``(k1, b)``, each query's BM25 hits at the deepest pool."""

    dense: dict[int, dict[str, list[Hit]]]
    sparse: dict[tuple[float, float], dict[str, list[Hit]]]


def channel_runs(
    dataset: BeirDataset,
    env: Providers,
    grid: HybridGrid,
    *,
    progress: Callable[[str], None] | None = None,
) -> ChannelRuns:
    """Search each channel once per query: dense once per pool, BM25 once per ``(k1, b)`` at the deepest pool.

    The BM25 indexes are built in memory over the chunks of ``env``'s index with its analyser, exactly as the index
    rebuilds them when ``providers.sparse`` changes.
    """
    from modular_rag.index import SparseIndex

    depth = max(grid.pool)
    queries = dataset.queries
    dense = {pool: {q.id: env.index.search_dense(q.text, pool) for q in queries} for pool in sorted(set(grid.pool))}
    if progress:
        progress(f"dense: {len(queries)} queries searched at pools {sorted(dense)}")
    base = env.index.sparse
    sparse_cfg: SparseConfig = env.config.sparse
    sparse: dict[tuple[float, float], dict[str, list[Hit]]] = {}
    for k1, b in itertools.product(grid.k1, grid.b):
        index = SparseIndex.build(base.ids, base.texts, base.metadatas, analyzer=base.analyzer,
                                  backend=sparse_cfg.backend, k1=k1, b=b)  # fmt: skip
        sparse[(k1, b)] = {q.id: index.search(q.text, depth) for q in queries}
        if progress:
            progress(f"bm25 k1={k1} b={b}: built and searched")
    return ChannelRuns(dense, sparse)


def _score(dataset: BeirDataset, ranked: Mapping[str, list[Hit]]) -> dict[str, float]:
    run = {qid: doc_ranking(hits) for qid, hits in ranked.items()}
    return retrieval_metrics(dataset.qrels, run)["mean"]


def _fused(runs: ChannelRuns, setting: HybridSetting, qid: str, k: int, rrf_k: int) -> list[Hit]:
    from operators.fusion import fuse

    dense = runs.dense[setting.pool][qid]
    sparse = runs.sparse[(setting.k1, setting.b)][qid][: setting.pool]
    fused = fuse([dense, sparse], setting.fusion, k=setting.pool, weights=setting.weights, rrf_k=rrf_k,  # type: ignore[arg-type]
                 channel="hybrid")  # fmt: skip
    return fused[:k]


def tune_hybrid(
    dataset: BeirDataset,
    runs: ChannelRuns,
    grid: HybridGrid,
    *,
    k: int = 100,
    rrf_k: int = 60,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[TuneRow], list[TuneRow]]:
    """Score every setting of the grid, and each channel alone.

    Args:
        dataset: The tuning split.
        runs: The channels' hits (:func:`channel_runs`).
        grid: The settings.
        k: Hits kept after fusion (the retriever's ``k``).
        rrf_k: The RRF rank constant.
        progress: Called with (done, total) after each setting.

    Returns:
        The settings best first (by nDCG@10, then recall@100; grid order breaks ties), and the single channels
        (dense, then BM25 per ``(k1, b)``) at depth ``k``.
    """
    shallow = min(runs.dense)
    singles = [TuneRow("dense", _score(dataset, {q: h[:k] for q, h in runs.dense[shallow].items()}))]
    for (k1, b), per_query in runs.sparse.items():
        singles.append(TuneRow(f"bm25 k1={k1} b={b}", _score(dataset, {q: h[:k] for q, h in per_query.items()})))
    rows: list[TuneRow] = []
    total = grid.size
    for i, setting in enumerate(grid.settings(), start=1):
        ranked = {q.id: _fused(runs, setting, q.id, k, rrf_k) for q in dataset.queries}
        rows.append(TuneRow(setting.label(), _score(dataset, ranked), setting=setting))
        if progress:
            progress(i, total)
    order = sorted(range(len(rows)), key=lambda i: (-rows[i].metrics["ndcg@10"], -rows[i].metrics["recall@100"], i))
    return [rows[i] for i in order], singles


def tune_rerank(
    dataset: BeirDataset,
    env: Providers,
    runs: ChannelRuns,
    setting: HybridSetting,
    rerankers: Sequence[Mapping[str, Any]],
    *,
    k: int = 100,
    rrf_k: int = 60,
) -> list[TuneRow]:
    """Score rerankers on a setting's fused candidates, running the registered operators themselves.

    Args:
        dataset: The tuning split.
        env: Providers over the dataset's index (the rerankers read its stored vectors and encoder).
        runs: The channels' hits.
        setting: The hybrid setting whose candidates are reranked.
        rerankers: Operator specs ``{"name": "embedding", "params": {...}}`` for the ``rerank`` slot.
        k: Hits kept after fusion.
        rrf_k: The RRF rank constant.

    Returns:
        One row per reranker, in the given order.

    Raises:
        ConfigError: If a spec's parameters are invalid; RegistryError: if its name is unknown.
    """
    from modular_rag.config import validate_params
    from modular_rag.registry import Port, get_operator

    candidates = {q.id: _fused(runs, setting, q.id, k, rrf_k) for q in dataset.queries}
    rows: list[TuneRow] = []
    for i, spec in enumerate(rerankers):
        info = get_operator(Port.REFINE, str(spec["name"]))
        params = validate_params(info.params, spec.get("params") or {}, f"rerank.{i}.params")
        op = info.factory(params, env)
        ranked = {q.id: op({"query": q.text, "candidates": candidates[q.id]})["candidates"] for q in dataset.queries}
        label = f"{spec['name']} " + " ".join(f"{key}={value}" for key, value in (spec.get("params") or {}).items())
        rows.append(TuneRow(label.strip(), _score(dataset, ranked), setting=setting, rerank=dict(spec)))
    return rows
