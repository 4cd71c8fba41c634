"""A sentence-transformers cross-encoder (query-passage relevance), loaded on first use; the ``cross_encoder``
reranker (:mod:`operators.post_retrieval`) scores with it."""

from __future__ import annotations

import threading
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from modular_rag.errors import MissingDependencyError, ProviderError

__all__ = ["CrossEncoderScorer"]


class CrossEncoderScorer:
    """A sentence-transformers ``CrossEncoder`` loaded on first use."""

    def __init__(self, model: str, *, max_length: int = 512, cache: Any = None) -> None:
        self.model_name, self.max_length = model, max_length
        self.cache = cache
        self._lock = threading.Lock()

    @cached_property
    def model(self) -> Any:
        """The loaded cross-encoder."""
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:
            raise MissingDependencyError(
                "cross_encoder needs sentence-transformers: pip install 'modular-rag[local]'"
            ) from exc
        try:
            return CrossEncoder(self.model_name, device="cpu", max_length=self.max_length)
        except Exception as exc:
            where = "folder" if Path(self.model_name).exists() else "model (not a local folder; no network here?)"
            raise ProviderError(f"cannot load cross-encoder {where} {self.model_name!r}: {exc}") from exc

    def score(self, query: str, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Relevance scores of ``(query, text)`` pairs (cached by content when a cache is set)."""
        from modular_rag.cache import content_key
        from modular_rag.trace import record

        keys = [content_key(self.model_name, self.max_length, query, t) for t in texts]
        cached = [self.cache.get("rerank", k) if self.cache is not None else None for k in keys]
        todo = [i for i, c in enumerate(cached) if c is None]
        if len(todo) < len(texts):
            record(cache_hits=len(texts) - len(todo))
        if todo:
            record(embed_calls=1)
            with self._lock:
                raw = self.model.predict(
                    [(query, texts[i]) for i in todo], batch_size=batch_size, show_progress_bar=False
                )
            fresh = np.asarray(raw, dtype=np.float32).reshape(len(todo), -1)[:, -1]
            for i, value in zip(todo, fresh.tolist(), strict=True):
                cached[i] = value
                if self.cache is not None:
                    self.cache.put("rerank", keys[i], value)
        return np.asarray(cached, dtype=np.float32)
