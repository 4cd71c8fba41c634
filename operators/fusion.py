"""Orchestration / fusion: merging ranked lists from parallel retrievers or branches.

The merge functions are shared by hybrid retrieval (dense + BM25), multi-query retrieval and the branching
pattern's fusion operators:

* :func:`rrf` - reciprocal rank fusion, ``sum_i w_i / (k + rank_i(d))`` (k = 60 by default); robust when the
  lists' scores are not comparable.
* :func:`score_fusion` with ``norm="minmax"`` - convex combination of min-max normalised scores
  (``alpha * dense + (1 - alpha) * sparse`` for two lists).
* :func:`score_fusion` with ``norm="zscore"`` - weighted sum of standardised scores (distribution-based fusion).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from modular_rag.state import Hit

__all__ = ["rrf", "score_fusion", "fuse"]

Norm = Literal["minmax", "zscore"]


def _weights(n: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) < n:
        # extra lists get the last weight
        return list(weights) + [weights[-1] if weights else 1.0] * (n - len(weights))
    return list(weights[:n])


def _merged(first: dict[str, Hit], scores: dict[str, float], k: int | None, channel: str) -> list[Hit]:
    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    if k is not None:
        ordered = ordered[:k]
    return [
        Hit(chunk_id=cid, text=first[cid]["text"], score=float(score), channel=channel,
            metadata=dict(first[cid]["metadata"]))
        for cid, score in ordered
    ]  # fmt: skip


def rrf(
    lists: Sequence[Sequence[Hit]],
    *,
    k: int | None = None,
    weights: Sequence[float] | None = None,
    rrf_k: int = 60,
    channel: str = "rrf",
) -> list[Hit]:
    """Reciprocal rank fusion of ranked hit lists.

    Args:
        lists: Ranked lists (best first).
        k: Keep the best ``k`` (all when ``None``).
        weights: Per-list weights (default equal).
        rrf_k: The rank constant (60 in the original paper).
        channel: The channel name the fused hits carry.
    """
    w = _weights(len(lists), weights)
    first: dict[str, Hit] = {}
    scores: dict[str, float] = {}
    for weight, hits in zip(w, lists, strict=True):
        for rank, hit in enumerate(hits, start=1):
            cid = hit["chunk_id"]
            first.setdefault(cid, hit)
            scores[cid] = scores.get(cid, 0.0) + weight / (rrf_k + rank)
    return _merged(first, scores, k, channel)


def _normalise(values: np.ndarray, norm: Norm) -> np.ndarray:
    if len(values) == 0:
        return values
    if norm == "minmax":
        lo, hi = float(values.min()), float(values.max())
        return np.ones_like(values) if hi - lo < 1e-12 else (values - lo) / (hi - lo)
    std = float(values.std())
    return np.zeros_like(values) if std < 1e-12 else (values - values.mean()) / std


def score_fusion(
    lists: Sequence[Sequence[Hit]],
    *,
    k: int | None = None,
    weights: Sequence[float] | None = None,
    norm: Norm = "minmax",
    channel: str = "fused",
) -> list[Hit]:
    """Weighted sum of per-list normalised scores; a hit missing from a list gets that list's minimum.

    With ``norm="minmax"`` and weights ``(alpha, 1 - alpha)`` this is the convex combination of normalised scores.
    """
    w = _weights(len(lists), weights)
    first: dict[str, Hit] = {}
    per_list: list[dict[str, float]] = []
    for hits in lists:
        values = _normalise(np.array([h["score"] for h in hits], dtype=np.float64), norm)
        per_list.append({h["chunk_id"]: float(v) for h, v in zip(hits, values, strict=True)})
        for h in hits:
            first.setdefault(h["chunk_id"], h)
    scores: dict[str, float] = {}
    for weight, table in zip(w, per_list, strict=True):
        floor = min(table.values()) if table else 0.0
        for cid in first:
            scores[cid] = scores.get(cid, 0.0) + weight * table.get(cid, floor)
    return _merged(first, scores, k, channel)


FusionMethod = Literal["rrf", "convex", "weighted"]


def fuse(
    lists: Sequence[Sequence[Hit]],
    method: FusionMethod,
    *,
    k: int | None = None,
    weights: Sequence[float] | None = None,
    rrf_k: int = 60,
    channel: str = "fused",
) -> list[Hit]:
    """Fuse ranked lists by ``rrf``, ``convex`` (min-max normalised) or ``weighted`` (z-score normalised)."""
    if len(lists) == 1 and weights is None:
        hits = list(lists[0])
        return hits[:k] if k is not None else hits
    if method == "rrf":
        return rrf(lists, k=k, weights=weights, rrf_k=rrf_k, channel=channel)
    return score_fusion(lists, k=k, weights=weights, norm="minmax" if method == "convex" else "zscore", channel=channel)
