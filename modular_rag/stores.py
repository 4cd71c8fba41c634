"""The dense stores the knowledge index writes chunk vectors to: the :class:`DenseStore` protocol, a Chroma
collection (:class:`ChromaStore`: persistent folder, server or in memory) and any LangChain ``VectorStore``
(:class:`LangChainStore`), with the Chroma-style ``where`` filter evaluated locally (:func:`matches_where`, also used
by the sparse index). Milvus, which holds dense vectors and BM25 together, is in :mod:`modular_rag.milvus`; the index
that keeps a store and the sparse BM25 index in agreement is :class:`~modular_rag.index.KnowledgeIndex`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from modular_rag.errors import ConfigError, ProviderError
from modular_rag.state import Hit

__all__ = ["DenseStore", "ChromaStore", "LangChainStore", "matches_where"]


class DenseStore(Protocol):
    """Where chunk vectors live. Hits carry cosine similarity as the score."""

    def add(
        self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], vectors: np.ndarray
    ) -> None: ...

    def existing(self, ids: Sequence[str]) -> set[str]: ...

    def query(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]: ...

    def count(self) -> int: ...

    def dump(self) -> tuple[list[str], list[str], list[dict[str, Any]]]: ...

    def delete_all(self) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...


# --------------------------------------------------------------------------------------------------- metadata filter

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
    "$in": lambda a, b: a in b,
    "$nin": lambda a, b: a not in b,
}


def matches_where(metadata: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Evaluate a Chroma ``where`` filter against one chunk's metadata (the same language Chroma accepts:
    ``{"year": {"$gte": 2020}}``, ``{"$and": [...]}``, ``{"$or": [...]}``, ``{"source": "manual"}``).

    Raises:
        ConfigError: If the filter uses an operator Chroma does not have.
    """
    for key, cond in where.items():
        if key == "$and":
            if not all(matches_where(metadata, c) for c in cond):
                return False
        elif key == "$or":
            if not any(matches_where(metadata, c) for c in cond):
                return False
        elif isinstance(cond, Mapping):
            for op, value in cond.items():
                if op not in _COMPARE:
                    raise ConfigError("filter", f"unknown operator {op!r}; operators: {', '.join(_COMPARE)}")
                try:
                    if not _COMPARE[op](metadata.get(key), value):
                        return False
                except TypeError:
                    return False
        elif metadata.get(key) != cond:
            return False
    return True


# ------------------------------------------------------------------------------------------------------- dense stores


class ChromaStore:
    """A Chroma collection used with the kit's own vectors (never Chroma's downloading default embedder).

    Args:
        path: Persistent folder; ignored when ``host`` is set or ``in_memory``.
        host, port: A Chroma server.
        in_memory: An ephemeral in-process store.
        collection: Collection name.
    """

    def __init__(
        self,
        *,
        path: str | None = None,
        host: str | None = None,
        port: int = 8000,
        in_memory: bool = False,
        collection: str = "modular_rag",
    ) -> None:
        self.path, self.host, self.port, self.in_memory = path, host, port, in_memory
        self.collection_name = collection
        self._collection: Any = None
        self._client: Any = None
        self._lock = threading.Lock()

    def describe(self) -> str:
        """Where the store lives, for messages."""
        if self.host:
            return f"chroma server {self.host}:{self.port}/{self.collection_name}"
        if self.in_memory:
            return f"in-memory chroma/{self.collection_name}"
        return f"chroma {self.path}/{self.collection_name}"

    @property
    def collection(self) -> Any:
        """The Chroma collection (client created on first use)."""
        if self._collection is None:
            with self._lock:
                if self._collection is None:
                    self._collection = self._open()
        return self._collection

    def _open(self) -> Any:
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        try:
            if self.host:
                client = chromadb.HttpClient(host=self.host, port=self.port, settings=settings)
            elif self.in_memory or not self.path:
                client = chromadb.EphemeralClient(settings=settings)
            else:
                Path(self.path).mkdir(parents=True, exist_ok=True)
                client = chromadb.PersistentClient(path=self.path, settings=settings)
            self._client = client
            return client.get_or_create_collection(
                self.collection_name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
            )
        except Exception as exc:  # chromadb raises many types; say where
            raise ProviderError(f"cannot open {self.describe()}: {exc}") from exc

    @property
    def max_batch(self) -> int:
        """The largest add Chroma accepts in one call."""
        self.collection  # noqa: B018 - opens the client
        try:
            return int(self._client.get_max_batch_size())
        except Exception:  # pragma: no cover - older servers
            return 5000

    def add(
        self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], vectors: np.ndarray
    ) -> None:
        """Upsert chunks with precomputed vectors, in Chroma's maximum batch size. Texts that are all empty are not
        sent (the kit's catalog holds them: Chroma then keeps vectors and metadata only)."""
        step = self.max_batch
        with_text = any(texts)
        for i in range(0, len(ids), step):
            self.collection.upsert(
                ids=list(ids[i : i + step]),
                documents=list(texts[i : i + step]) if with_text else None,
                metadatas=[_chroma_meta(m) for m in metadatas[i : i + step]],
                embeddings=vectors[i : i + step],
            )

    def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are stored."""
        found: set[str] = set()
        step = self.max_batch
        for i in range(0, len(ids), step):
            found.update(self.collection.get(ids=list(ids[i : i + step]), include=[])["ids"])
        return found

    def query(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` nearest chunks by cosine similarity, optionally filtered (fewer when fewer are stored)."""
        if k <= 0:
            return []
        # Chroma caps n_results at what the collection holds; asking count() first cost a round trip per query
        res = self.collection.query(
            query_embeddings=np.asarray(vector, dtype=np.float32)[None, :],
            n_results=k,
            where=dict(where) if where else None,
            include=["documents", "metadatas", "distances"],
        )
        return [
            Hit(chunk_id=cid, text=doc or "", score=float(1.0 - dist), channel="dense", metadata=dict(meta or {}))
            for cid, doc, meta, dist in zip(
                res["ids"][0], res["documents"][0], res["metadatas"][0], res["distances"][0], strict=True
            )
        ]

    def count(self) -> int:
        """Number of stored chunks."""
        return int(self.collection.count())

    def dump(self) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        """Every chunk's id, text and metadata, sorted by id."""
        ids: list[str] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        total, step = self.count(), 10_000
        for offset in range(0, total, step):
            got = self.collection.get(include=["documents", "metadatas"], limit=step, offset=offset)
            ids.extend(got["ids"])
            texts.extend(d or "" for d in got["documents"])
            metas.extend(dict(m or {}) for m in got["metadatas"])
        order = sorted(range(len(ids)), key=ids.__getitem__)
        return [ids[i] for i in order], [texts[i] for i in order], [metas[i] for i in order]

    def get(self, ids: Sequence[str], *, metadata: bool = True) -> list[Hit]:
        """The stored chunks of these ids (text and, with ``metadata``, metadata), read by key; ids not stored are
        left out."""
        if not ids:
            return []
        got = self.collection.get(ids=list(ids), include=["documents", "metadatas"] if metadata else ["documents"])
        metas = got["metadatas"] if metadata else [None] * len(got["ids"])
        return [
            Hit(chunk_id=cid, text=doc or "", score=0.0, channel="link", metadata=dict(meta or {}))
            for cid, doc, meta in zip(got["ids"], got["documents"], metas, strict=True)
        ]

    def get_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of the given chunk ids (missing ids are left out)."""
        if not ids:
            return {}
        got = self.collection.get(ids=list(ids), include=["embeddings"])
        return {cid: np.asarray(vec, dtype=np.float32) for cid, vec in zip(got["ids"], got["embeddings"], strict=True)}

    def delete(self, ids: Sequence[str]) -> None:
        """Delete the chunks with these ids (ids not stored are ignored), in Chroma's maximum batch size."""
        step = self.max_batch
        for i in range(0, len(ids), step):
            self.collection.delete(ids=list(ids[i : i + step]))

    def delete_all(self) -> None:
        """Drop the collection and start empty."""
        self.collection  # noqa: B018
        self._client.delete_collection(self.collection_name)
        self._collection = None


def _chroma_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    # Chroma metadata values are str/int/float/bool; keep the rest as JSON text
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, str | int | float | bool) else json.dumps(value, ensure_ascii=False)
    return out


class LangChainStore:
    """Any LangChain ``VectorStore`` as the dense store. It embeds with its own embedding function."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._ids: dict[str, tuple[str, dict[str, Any]]] = {}

    def describe(self) -> str:
        """The store's class, for messages."""
        return f"LangChain {type(self.store).__name__}"

    def add(
        self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], vectors: np.ndarray
    ) -> None:
        """Add texts (the store embeds them; ``vectors`` are not used)."""
        new = [i for i, cid in enumerate(ids) if cid not in self._ids]
        if not new:
            return
        self.store.add_texts(
            [texts[i] for i in new], metadatas=[_chroma_meta(metadatas[i]) for i in new], ids=[ids[i] for i in new]
        )
        for i in new:
            self._ids[ids[i]] = (texts[i], dict(metadatas[i]))

    def existing(self, ids: Sequence[str]) -> set[str]:
        """Which ids were added through this adapter or can be fetched from the store."""
        found = {cid for cid in ids if cid in self._ids}
        rest = [cid for cid in ids if cid not in found]
        if rest:
            with contextlib.suppress(NotImplementedError):
                found.update(d.id for d in self.store.get_by_ids(rest) if d.id)
        return found

    def query_text(self, text: str, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """Search by text with the store's relevance scores (its raw scores when it has no relevance function, as
        ``InMemoryVectorStore``). The Chroma-style ``where`` filter is passed as the store's ``filter``;
        ``InMemoryVectorStore`` takes a predicate, so it gets one evaluating the filter."""
        from langchain_core.vectorstores import InMemoryVectorStore

        kwargs: dict[str, Any] = {"filter": dict(where)} if where else {}
        if where and isinstance(self.store, InMemoryVectorStore):
            kwargs["filter"] = lambda doc: matches_where(doc.metadata, where)
        try:
            pairs = self.store.similarity_search_with_relevance_scores(text, k=k, **kwargs)
        except NotImplementedError:
            pairs = self.store.similarity_search_with_score(text, k=k, **kwargs)
        hits = []
        for doc, score in pairs:
            cid = doc.id or doc.metadata.get("chunk_id") or hashlib.sha1(doc.page_content.encode()).hexdigest()[:20]
            hits.append(
                Hit(
                    chunk_id=cid,
                    text=doc.page_content,
                    score=float(score),
                    channel="dense",
                    metadata=dict(doc.metadata),
                )
            )
        return hits

    def count(self) -> int:
        """Chunks added through this adapter."""
        return len(self._ids)

    def dump(self) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        """Chunks added through this adapter, sorted by id."""
        ids = sorted(self._ids)
        return ids, [self._ids[i][0] for i in ids], [self._ids[i][1] for i in ids]

    def delete(self, ids: Sequence[str]) -> None:
        """Delete the chunks with these ids from the store."""
        if ids:
            self.store.delete(ids=list(ids))
        for cid in ids:
            self._ids.pop(cid, None)

    def delete_all(self) -> None:
        """Delete the chunks added through this adapter."""
        if self._ids:
            self.store.delete(ids=list(self._ids))
        self._ids.clear()
