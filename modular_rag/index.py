"""The knowledge index: a dense store (Chroma, or any LangChain ``VectorStore``) and a sparse BM25 index, written
together and kept in agreement.

The dense store is the source of truth. The sparse index (postings, vocabulary, and the chunk texts and metadata
in the same order) is one file beside it, replaced atomically, and stamped with the count and a digest of the
chunk ids it was built from. When it does not match the dense store (an indexing run was killed between the
two writes, or another process added chunks to a shared Chroma server) it is rebuilt from the dense store on
load. Chunk ids come from content, so re-adding the same chunks is a no-op and a killed run resumes cleanly.

The dense stores themselves (and the ``where`` filter :func:`matches_where`) are in :mod:`modular_rag.stores`;
their names are re-exported here.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import math
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from modular_rag.errors import IndexingError, ProviderError
from modular_rag.links import LinkTable
from modular_rag.milvus import MilvusStore
from modular_rag.sparse import SparseScorer, build_scorer
from modular_rag.state import Chunk, Hit
from modular_rag.stores import ChromaStore, DenseStore, LangChainStore, _chroma_meta, matches_where
from modular_rag.text import Analyzer
from modular_rag.trace import record

__all__ = [
    "Encoder",
    "DenseStore",
    "ChromaStore",
    "LangChainStore",
    "SparseIndex",
    "KnowledgeIndex",
    "AddReport",
    "matches_where",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    @property
    def dim(self) -> int | None: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_query(self, text: str) -> np.ndarray: ...


# ------------------------------------------------------------------------------------------------------ sparse index


def _digest(ids: Sequence[str]) -> str:
    """SHA-1 of the ids, each followed by a NUL byte (hashed in one call: the same bytes as one update per id)."""
    return hashlib.sha1(("\x00".join(ids) + "\x00").encode() if ids else b"").hexdigest()


def _spliced(items: list[_T], removed: Sequence[int], added: Sequence[_T], inserted_at: Sequence[int]) -> list[_T]:
    """``items`` without the positions ``removed`` (ascending), with ``added`` at the final positions
    ``inserted_at`` (ascending); copied slice by slice, so the cost in Python is per change, not per item."""
    if removed:
        bounds = zip([0, *(r + 1 for r in removed)], [*removed, len(items)], strict=True)
        items = list(chain.from_iterable(items[start:end] for start, end in bounds))
    out: list[_T] = []
    done = 0
    for j, (at, item) in enumerate(zip(inserted_at, added, strict=True)):
        out.extend(items[done : at - j])  # the kept items before this one
        out.append(item)
        done = at - j
    out.extend(items[done:])
    return out


@dataclass
class SparseIndex:
    """BM25 scorer plus the chunk texts and metadata in scorer order, saved as one file."""

    ids: list[str]
    texts: list[str]
    metadatas: list[dict[str, Any]]
    scorer: SparseScorer
    analyzer: Analyzer
    digest: str = ""
    _mask_cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _df: dict[str, int] | None = field(default=None, repr=False)
    _position: dict[str, int] | None = field(default=None, repr=False)

    def document_frequency(self, term: str) -> int:
        """How many chunks contain the analysed ``term`` (from the scorer's postings when it keeps them)."""
        if self._df is None:
            vocab, indptr = getattr(self.scorer, "vocab", None), getattr(self.scorer, "indptr", None)
            if vocab is not None and indptr is not None:
                counts = np.diff(np.asarray(indptr))
                self._df = {t: int(counts[col]) for t, col in vocab.items()}
            else:
                df: dict[str, int] = {}
                for terms in self.analyzer.many(self.texts):
                    for t in set(terms):
                        df[t] = df.get(t, 0) + 1
                self._df = df
        return self._df.get(term, 0)

    def idf(self, term: str) -> float:
        """Lucene's BM25 IDF of an analysed term over the indexed chunks; a term no chunk has gets the highest."""
        n = len(self.ids)
        df = self.document_frequency(term)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    @classmethod
    def build(
        cls,
        ids: list[str],
        texts: list[str],
        metadatas: list[dict[str, Any]],
        *,
        analyzer: Analyzer,
        backend: str = "sparse",
        k1: float = 1.2,
        b: float = 0.75,
        idf: str = "lucene",
        timings: dict[str, float] | None = None,
    ) -> SparseIndex:
        """Analyse the texts and build the scorer.

        Args:
            ids, texts, metadatas: The chunks, in the order the index keeps them.
            analyzer, backend, k1, b, idf: The sparse settings.
            timings: When given, the seconds spent are added to its ``analyse`` and ``build`` keys.
        """
        t0 = time.perf_counter()
        terms = analyzer.many(texts)
        t1 = time.perf_counter()
        scorer = build_scorer(backend, terms, k1=k1, b=b, idf=idf)  # type: ignore[arg-type]
        built = cls(ids, texts, metadatas, scorer, analyzer, _digest(ids))
        if timings is not None:
            timings["analyse"] = timings.get("analyse", 0.0) + t1 - t0
            timings["build"] = timings.get("build", 0.0) + time.perf_counter() - t1
        return built

    def updated(
        self,
        add_ids: Sequence[str],
        add_texts: Sequence[str],
        add_metas: Sequence[Mapping[str, Any]],
        remove_ids: Sequence[str] = (),
        *,
        timings: dict[str, float] | None = None,
    ) -> SparseIndex:
        """This index with chunks added and removed, analysing only the added texts.

        The result is what :meth:`build` gives over the final chunks in id order (ids, texts, metadata, weights,
        digest, search results); this index is left as it was. An added id the index already holds replaces that
        chunk; removed ids the index does not hold are ignored. Postings saved by an older version keep no term
        frequencies: then the scorer is built again from the kept texts (logged at info level).

        Args:
            add_ids, add_texts, add_metas: The chunks to add (any order).
            remove_ids: Ids of chunks to drop.
            timings: When given, the seconds spent are added to its ``analyse`` and ``merge`` keys (``analyse`` and
                ``build`` on the fallback).

        Raises:
            ValueError: If the index's ids are not in ascending order (as :class:`KnowledgeIndex` keeps them), the
                added lists differ in length, or an id is added twice.
        """
        if not len(add_ids) == len(add_texts) == len(add_metas):
            raise ValueError(f"add_ids, add_texts and add_metas must have one entry per chunk; got {len(add_ids)}, "
                             f"{len(add_texts)} and {len(add_metas)}")  # fmt: skip
        if len(set(add_ids)) != len(add_ids):
            raise ValueError("add_ids holds an id more than once; give each chunk once")
        if not all(map(operator.lt, self.ids, islice(self.ids, 1, None))):
            raise ValueError("updating a sparse index needs its ids in ascending order (as KnowledgeIndex keeps "
                             "them); build it again from the sorted chunks instead")  # fmt: skip
        t0 = time.perf_counter()
        removed = sorted({at for cid in chain(remove_ids, add_ids) if (at := self._find(cid)) is not None})
        order = sorted(range(len(add_ids)), key=add_ids.__getitem__)
        ids = [add_ids[i] for i in order]
        texts = [add_texts[i] for i in order]
        metas = [dict(add_metas[i]) for i in order]
        # final position of added j: the kept ids before it (ids before it, less the removed ones) plus j
        before = np.array([bisect.bisect_left(self.ids, cid) for cid in ids], dtype=np.int64)
        inserted_at = before - np.searchsorted(np.asarray(removed, dtype=np.int64), before) + np.arange(len(ids))
        final_ids = _spliced(self.ids, removed, ids, inserted_at.tolist())
        final_texts = _spliced(self.texts, removed, texts, inserted_at.tolist())
        final_metas = _spliced(self.metadatas, removed, metas, inserted_at.tolist())
        if not self.scorer.updatable:
            log.info("the sparse index was saved without term frequencies (an older version); analysing all %d "
                     "chunks again this once", len(final_ids))  # fmt: skip
            scorer = self.scorer
            return SparseIndex.build(final_ids, final_texts, final_metas, analyzer=self.analyzer,
                                     backend=scorer.backend, k1=getattr(scorer, "k1", 1.2),
                                     b=getattr(scorer, "b", 0.75), idf=getattr(scorer, "idf", "lucene"),
                                     timings=timings)  # fmt: skip
        t1 = time.perf_counter()
        terms = self.analyzer.many(texts)
        t2 = time.perf_counter()
        kept = np.delete(np.arange(len(self.ids), dtype=np.int64), removed)
        scorer = self.scorer.updated(kept, terms, inserted_at)
        result = SparseIndex(final_ids, final_texts, final_metas, scorer, self.analyzer, _digest(final_ids))
        if timings is not None:
            timings["analyse"] = timings.get("analyse", 0.0) + t2 - t1
            timings["merge"] = timings.get("merge", 0.0) + time.perf_counter() - t2 + t1 - t0
        return result

    def _find(self, chunk_id: str) -> int | None:
        """The position of ``chunk_id`` by binary search in the ascending ids, or ``None``."""
        at = bisect.bisect_left(self.ids, chunk_id)
        return at if at < len(self.ids) and self.ids[at] == chunk_id else None

    def search(self, query: str, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` best chunks for ``query`` by BM25, optionally filtered by metadata."""
        mask = self._mask(where) if where else None
        docs, scores = self.scorer.top_k(self.analyzer(query), k, mask)
        return [
            Hit(chunk_id=self.ids[d], text=self.texts[d], score=float(s), channel="bm25",
                metadata=dict(self.metadatas[d]))
            for d, s in zip(docs.tolist(), scores.tolist(), strict=True)
        ]  # fmt: skip

    def score(self, query: str, chunk_ids: Sequence[str]) -> np.ndarray:
        """The BM25 scores of the given chunks for ``query`` (chunks not in the index score 0); rescoring what is
        already in hand, not a retrieval."""
        position = self._positions()
        known = [(i, position[c]) for i, c in enumerate(chunk_ids) if c in position]
        out = np.zeros(len(chunk_ids), dtype=np.float32)
        if known:
            scores = self.scorer.score_docs(self.analyzer(query), [p for _, p in known])
            out[[i for i, _ in known]] = scores
        return out

    def _positions(self) -> dict[str, int]:
        if self._position is None:
            self._position = {cid: i for i, cid in enumerate(self.ids)}
        return self._position

    def _mask(self, where: Mapping[str, Any]) -> np.ndarray:
        key = json.dumps(where, sort_keys=True, default=str)
        mask = self._mask_cache.get(key)
        if mask is None:
            mask = np.fromiter((matches_where(m, where) for m in self.metadatas), dtype=bool, count=len(self.ids))
            if len(self._mask_cache) > 64:
                self._mask_cache.clear()
            self._mask_cache[key] = mask
        return mask

    def save(self, file: Path) -> None:
        """Write everything to ``file`` atomically (a temporary file, then ``os.replace``)."""
        import tempfile

        file.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=file.parent) as tmp:
            folder = Path(tmp)
            self.scorer.save(folder)
            payload = {
                "ids": self.ids,
                "texts": self.texts,
                "metadatas": self.metadatas,
                "digest": self.digest,
                "analyzer": {"stemmer": self.analyzer.stemmer_name, "stopwords": self.analyzer.stopwords_name},
            }
            blobs = {p.name: np.frombuffer(p.read_bytes(), dtype=np.uint8) for p in folder.iterdir()}
            blobs["docs.json"] = np.frombuffer(json.dumps(payload, ensure_ascii=False).encode(), dtype=np.uint8)
            tmp_file = folder / "sparse.npz"
            with open(tmp_file, "wb") as fh:
                # numpy's stub types **kwds beside the keyword-only allow_pickle: bool, so a dict of arrays is refused
                np.savez(fh, **{name.replace(".", "__"): blob for name, blob in blobs.items()})  # type: ignore[arg-type]
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp_file, file)

    @classmethod
    def load(cls, file: Path) -> SparseIndex:
        """Read what :meth:`save` wrote."""
        import tempfile

        from modular_rag.sparse import load_scorer

        with np.load(file) as npz, tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            payload: dict[str, Any] = {}
            for name in npz.files:
                data = npz[name].tobytes()
                real = name.replace("__", ".")
                if real == "docs.json":
                    payload = json.loads(data)
                else:
                    (folder / real).write_bytes(data)
            scorer = load_scorer(folder)
        analyzer = Analyzer(**payload["analyzer"])
        return cls(payload["ids"], payload["texts"], payload["metadatas"], scorer, analyzer, payload["digest"])


# --------------------------------------------------------------------------------------------------- knowledge index


@dataclass
class AddReport:
    """What :meth:`KnowledgeIndex.add` did; ``stages`` splits its seconds (``embed``, ``dense write wait``: time
    spent waiting for the background writes, ``sparse``: updating or building BM25 and saving it), and
    ``sparse_stages`` splits ``sparse``: ``analyse`` (the texts analysed), ``merge`` (postings merged and weights
    recomputed) or ``dump`` + ``build`` (a full rebuild: every chunk read from the dense store, the scorer built),
    ``save`` (the file written). ``sparse_path`` says which way it went: ``incremental``, ``full`` or ``first``
    (the store was empty)."""

    chunks: int
    added: int
    existing: int
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)
    removed: int = 0
    sparse_stages: dict[str, float] = field(default_factory=dict)
    sparse_path: str = ""


class KnowledgeIndex:
    """Dense store + sparse BM25 index + the encoder that fills the dense store.

    Args:
        dense: The dense store.
        encoder: Embeds chunks and queries (not used for a LangChain store, which embeds itself).
        sparse_file: Where the sparse index is saved; ``None`` keeps it in memory only.
        analyzer, backend, k1, b, idf: Sparse index settings.
    """

    def __init__(
        self,
        dense: ChromaStore | LangChainStore | MilvusStore,
        encoder: Encoder | None,
        *,
        sparse_file: Path | None,
        analyzer: Analyzer,
        backend: str = "sparse",
        k1: float = 1.2,
        b: float = 0.75,
        idf: str = "lucene",
    ) -> None:
        self.dense, self.encoder, self.sparse_file = dense, encoder, sparse_file
        self.analyzer, self.backend, self.k1, self.b, self.idf = analyzer, backend, k1, b, idf
        self._sparse: SparseIndex | None = None
        self._links: LinkTable | None = None
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------------------------------- reading

    @property
    def sparse(self) -> SparseIndex:
        """The sparse index, loaded (or rebuilt from the dense store when stale) on first use."""
        if self._sparse is None:
            with self._lock:
                if self._sparse is None:
                    self._sparse = self._load_sparse()
        return self._sparse

    @property
    def links(self) -> LinkTable:
        """The link table of the indexed chunks (titles, mentions, document graph), kept in agreement with the
        sparse index: loaded from beside its file when saved for the same chunks, else built from them (and saved)."""
        sparse = self.sparse
        links = self._links
        if links is not None and links.digest == sparse.digest:
            return links
        with self._lock:
            if self._links is not None and self._links.digest == sparse.digest:
                return self._links
            file = self.sparse_file.with_suffix(".links.json") if self.sparse_file is not None else None
            loaded = LinkTable.load(file) if file is not None and file.exists() else None
            if loaded is None or loaded.digest != sparse.digest:
                loaded = LinkTable.build(sparse.texts, sparse.metadatas, digest=sparse.digest)
                if file is not None:
                    loaded.save(file)
            self._links = loaded
            return loaded

    def _load_sparse(self) -> SparseIndex:
        saved = self._saved_sparse(self.dense.count())
        return saved if saved is not None else self.rebuild_sparse()

    def _saved_sparse(self, count: int) -> SparseIndex | None:
        """The saved sparse index when it holds ``count`` chunks and has this index's settings; else ``None`` (and
        the reason logged)."""
        if self.sparse_file is None or not self.sparse_file.exists():
            return None
        try:
            loaded = SparseIndex.load(self.sparse_file)
        except Exception as exc:  # a truncated or foreign file: rebuild rather than fail
            log.warning("sparse index %s unreadable (%s); rebuilding from the dense store", self.sparse_file, exc)
            return None
        if len(loaded.ids) == count and self._same_settings(loaded):
            return loaded
        if len(loaded.ids) == count:
            log.info("sparse index was built with other BM25 settings; rebuilding from the dense store")
        else:
            log.warning(
                "sparse index has %d chunks, dense store %d; rebuilding from the dense store", len(loaded.ids), count
            )
        return None

    def _agreeing_sparse(self, count: int) -> SparseIndex | None:
        """The sparse index in memory, or else the saved one (then kept in memory), when it agrees with a dense
        store of ``count`` chunks (the checks loading does); ``None`` when neither does."""
        held = self._sparse
        if held is not None:
            return held if len(held.ids) == count and self._same_settings(held) else None
        saved = self._saved_sparse(count)
        if saved is not None:
            self._sparse = saved
        return saved

    def _same_settings(self, loaded: SparseIndex) -> bool:
        scorer = loaded.scorer
        return (
            scorer.backend == self.backend
            and getattr(scorer, "k1", self.k1) == self.k1
            and getattr(scorer, "b", self.b) == self.b
            and getattr(scorer, "idf", self.idf) == self.idf
            and loaded.analyzer.stemmer_name == self.analyzer.stemmer_name
            and loaded.analyzer.stopwords_name == self.analyzer.stopwords_name
        )

    def rebuild_sparse(
        self,
        chunks: tuple[list[str], list[str], list[dict[str, Any]]] | None = None,
        *,
        timings: dict[str, float] | None = None,
    ) -> SparseIndex:
        """Rebuild the sparse index from the dense store (or from ``chunks`` given as sorted id/text/meta lists)
        and save it.

        Args:
            chunks: The chunks to build from, instead of every chunk of the dense store.
            timings: When given, the seconds spent are added to its ``dump`` (reading the dense store),
                ``analyse``, ``build`` and ``save`` keys.
        """
        with self._lock:
            t0 = time.perf_counter()
            ids, texts, metas = chunks if chunks is not None else self.dense.dump()
            if timings is not None and chunks is None:
                timings["dump"] = timings.get("dump", 0.0) + time.perf_counter() - t0
            sparse = SparseIndex.build(ids, texts, metas, analyzer=self.analyzer, backend=self.backend, k1=self.k1,
                                       b=self.b, idf=self.idf, timings=timings)  # fmt: skip
            self._store_sparse(sparse, timings)
            return sparse

    def _store_sparse(self, sparse: SparseIndex, timings: dict[str, float] | None) -> None:
        """Save ``sparse`` (when the index has a file) and make it the one in use."""
        t0 = time.perf_counter()
        if self.sparse_file is not None:
            sparse.save(self.sparse_file)
        if timings is not None:
            timings["save"] = timings.get("save", 0.0) + time.perf_counter() - t0
        self._sparse = sparse

    def count(self) -> int:
        """Chunks in the dense store."""
        return self.dense.count()

    def search_dense(
        self, query: str, k: int, where: Mapping[str, Any] | None = None, vector: np.ndarray | None = None
    ) -> list[Hit]:
        """Dense retrieval (records one retrieval in the current node's ledger)."""
        record(retrievals=1)
        if isinstance(self.dense, LangChainStore):
            return self.dense.query_text(query, k, where)
        if vector is None:
            if self.encoder is None:
                raise ProviderError("dense retrieval needs an embeddings provider")
            vector = self.encoder.encode_query(query)
        return self.dense.query(vector, k, where)

    def search_sparse(self, query: str, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """BM25 retrieval (records one retrieval in the current node's ledger): ranked in the store when it runs
        BM25 itself (Milvus), so chunks other processes added are found; else over the local sparse index."""
        record(retrievals=1)
        if isinstance(self.dense, MilvusStore):
            return self.dense.search_sparse(query, k, where)
        return self.sparse.search(query, k, where)

    def metadata_fields(self) -> dict[str, set[type]]:
        """The metadata fields the indexed chunks have, with the value types seen (for filter validation)."""
        fields: dict[str, set[type]] = {}
        for meta in self.sparse.metadatas:
            for key, value in meta.items():
                fields.setdefault(key, set()).add(type(value))
        return fields

    # ----------------------------------------------------------------------------------------------------- writing

    def add(
        self,
        chunks: Sequence[Chunk],
        *,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
        prune: bool = False,
    ) -> AddReport:
        """Embed and add the chunks the dense store lacks, then bring the sparse index up to date.

        Dense writes run on a background thread while the next batch is embedded. Re-adding chunks that are
        already stored costs one id lookup per batch (no embedding). When the sparse index in memory or on disk
        agrees with the dense store before the write (the checks loading does), it is updated with the new chunks
        and the pruned ids only (:meth:`SparseIndex.updated`: the other texts are not read or analysed again);
        otherwise it is rebuilt from every chunk of the dense store. Either way the file is written whole.

        Args:
            chunks: Chunks to add (duplicates by id are dropped).
            batch_size: Chunks embedded per batch.
            progress: Called with the number of chunks handled after each batch.
            prune: Afterwards delete every stored chunk that is not among ``chunks``, so the index holds exactly
                them (LangChain ``index(cleanup="full")`` semantics); the sparse index and the link table follow.

        Raises:
            IndexingError: If embedding or a dense write fails (what was written stays; rerun to resume).
        """
        start = time.perf_counter()
        with self._lock:
            unique: dict[str, Chunk] = {}
            for ch in chunks:
                unique.setdefault(ch["chunk_id"], ch)
            todo = list(unique.values())
            had_before = self.dense.count()
            present = self.dense.existing([c["chunk_id"] for c in todo]) if had_before else set()
            new = [c for c in todo if c["chunk_id"] not in present]
            if progress and present:
                progress(len(todo) - len(new))
            base = self._agreeing_sparse(had_before) if had_before else None
            stale: list[str] = []
            if prune and had_before:
                base = base if base is not None else self.sparse  # rebuilt from the dense store: its ids are needed
                stale = sorted(set(base.ids) - unique.keys())
            stages = self._write_dense(new, batch_size, progress)
            if stale:
                self.dense.delete(stale)
            sparse_start = time.perf_counter()
            timings: dict[str, float] = {}
            if had_before == 0 and not present:
                path = "first"
                order = sorted(range(len(todo)), key=lambda i: todo[i]["chunk_id"])
                chunks_in_order = (
                    [todo[i]["chunk_id"] for i in order],
                    [todo[i]["text"] for i in order],
                    [self._stored_meta(todo[i]["metadata"]) for i in order],
                )
                self.rebuild_sparse(chunks_in_order, timings=timings)
            elif base is not None:
                path = "incremental"
                if new or stale:
                    ids, texts = [c["chunk_id"] for c in new], [c["text"] for c in new]
                    metas = [self._stored_meta(c["metadata"]) for c in new]
                    self._store_sparse(base.updated(ids, texts, metas, stale, timings=timings), timings)
                elif self.sparse_file is not None and not self.sparse_file.exists():
                    self._store_sparse(base, timings)
            else:
                path = "full"
                self.rebuild_sparse(timings=timings)
            stages["sparse"] = time.perf_counter() - sparse_start
        return AddReport(len(todo), len(new), len(present), time.perf_counter() - start, stages, len(stale),
                         timings, path)  # fmt: skip

    def _stored_meta(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """A chunk's metadata as the dense store gives it back (what a rebuild from the store would hold)."""
        if isinstance(self.dense, ChromaStore):
            return _chroma_meta(meta)
        if isinstance(self.dense, MilvusStore):  # its JSON field keeps every value but None
            return {k: v for k, v in meta.items() if v is not None}
        return dict(meta)

    def _write_dense(
        self, new: list[Chunk], batch_size: int, progress: Callable[[int], None] | None
    ) -> dict[str, float]:
        """Embed in batches (longest texts first, so each batch holds texts of similar length and the encoder pads
        little) and write each batch on a background thread while the next is embedded. Returns the seconds spent
        embedding and waiting for writes."""
        stages = {"embed": 0.0, "dense write wait": 0.0}
        if not new:
            return stages
        embed_here = not isinstance(self.dense, LangChainStore)
        if embed_here and self.encoder is None:
            raise IndexingError("indexing needs an embeddings provider")
        new = sorted(new, key=lambda c: -len(c["text"]))
        pending: list[Future[None]] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dense-write") as writer:
            for batch in _batches(new, batch_size):
                texts = [c["text"] for c in batch]
                t0 = time.perf_counter()
                try:
                    vectors = self.encoder.encode(texts) if embed_here and self.encoder else np.zeros((len(batch), 0))
                except Exception as exc:
                    raise IndexingError(f"embedding failed: {exc}") from exc
                t1 = time.perf_counter()
                stages["embed"] += t1 - t0
                while pending and (len(pending) >= 2 or pending[0].done()):
                    self._settle(pending.pop(0))
                stages["dense write wait"] += time.perf_counter() - t1
                pending.append(
                    writer.submit(
                        self.dense.add,
                        [c["chunk_id"] for c in batch],
                        texts,
                        [c["metadata"] for c in batch],
                        vectors,
                    )
                )
                if progress:
                    progress(len(batch))
            t1 = time.perf_counter()
            for fut in pending:
                self._settle(fut)
            stages["dense write wait"] += time.perf_counter() - t1
        return stages

    def _settle(self, fut: Future[None]) -> None:
        try:
            fut.result()
        except Exception as exc:
            raise IndexingError(f"writing to {self.dense.describe()} failed: {exc}") from exc

    def clear(self) -> None:
        """Delete every chunk from the dense store and the sparse index."""
        with self._lock:
            self.dense.delete_all()
            if self.sparse_file is not None and self.sparse_file.exists():
                self.sparse_file.unlink()
            self._sparse = None


def _batches(items: Sequence[Chunk], size: int) -> Iterator[Sequence[Chunk]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
