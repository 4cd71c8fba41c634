"""The write path of the knowledge index: an add (catalog first, then the dense store in background batches, then
the BM25 postings), a removal, the postings brought level with the catalog, and a clear; a mixin of
:class:`~modular_rag.index.KnowledgeIndex`, which holds the state and the read path."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from modular_rag.catalog import Catalog, StoredChunk
from modular_rag.errors import IndexingError
from modular_rag.milvus import MilvusStore
from modular_rag.segments import SegmentedBM25
from modular_rag.sentences import SentenceVectors
from modular_rag.state import Chunk, Hit
from modular_rag.stores import ChromaStore, LangChainStore, _chroma_meta
from modular_rag.text import Analyzer

if TYPE_CHECKING:
    from modular_rag.index import Encoder

__all__ = ["WRITE_BATCHES", "AddReport", "IndexWrites", "WRITER_LOCK"]


WRITE_BATCHES = 8
"""Embedding batches per dense-store write (2,048 chunks at the default batch size): Chroma inserts into its HNSW
graph faster in big writes (measured on 20k chunks: 596 against 474 chunks/s for writes of 256, without documents;
413 with them)."""


WRITER_LOCK = "writer.lock"
"""The file in the index's folder that one writer at a time holds (an OS lock, released when its process ends, even
by SIGKILL); ``writer.lock.json`` beside it says who holds it."""


@dataclass
class AddReport:
    """What :meth:`KnowledgeIndex.add` did; ``stages`` splits its seconds (``embed``, ``dense write wait``: time
    spent waiting for the background writes, ``catalog``: texts, statistics and link rows written, ``sentence
    vectors``: the chunks' sentences embedded, ``sparse``: the BM25 segment written)."""

    chunks: int
    added: int
    existing: int
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)
    removed: int = 0
    added_ids: frozenset[str] = frozenset()
    """The ids of the chunks written to the dense store by this add."""


class IndexWrites:
    """The write path of :class:`~modular_rag.index.KnowledgeIndex` (which sets these attributes and defines the
    reads declared here)."""

    catalog: Catalog
    dense: ChromaStore | LangChainStore | MilvusStore
    encoder: Encoder | None
    analyzer: Analyzer
    postings: SegmentedBM25
    sentences: SentenceVectors
    _lock: Any
    _backfilled: bool
    folder: Any
    _writer: Any = None

    if TYPE_CHECKING:

        def _prepare(self) -> None: ...

        def _stored_links(self) -> Any: ...

        def chunks(self, ids: Sequence[str]) -> dict[str, Hit]: ...

        @property
        def texts_in_store(self) -> bool: ...

    # ----------------------------------------------------------------------------------------------------- writing

    @contextmanager
    def writing(self, wait_s: float = 0.0) -> Iterator[None]:
        """Hold the index's one-writer lock (:data:`WRITER_LOCK` in its folder) while the block runs: a second
        writer, in this process or another, waits up to ``wait_s`` seconds for it, then fails. Reentrant: an add
        inside an indexing run that holds it goes on. Readers never take it.

        Raises:
            IndexingError: If another writer holds the lock for longer than ``wait_s`` (the message says which
                process, since when).
        """
        from filelock import FileLock, Timeout

        with self._lock:
            if self._writer is None:
                self._writer = FileLock(str(self.folder / WRITER_LOCK))
        info = self.folder / f"{WRITER_LOCK}.json"
        try:
            self._writer.acquire(timeout=wait_s, poll_interval=0.1)
        except Timeout:
            raise IndexingError(
                f"another indexer is writing this index ({_holder(info)}; lock {self.folder / WRITER_LOCK}): one "
                f"writer at a time{f' (waited {wait_s:g} s)' if wait_s else ''}; let it finish, or wait for it "
                "(modular-rag index --wait SECONDS, index_paths(wait_s=...))"
            ) from None
        try:
            if self._writer.lock_counter == 1:  # taken now, not re-entered
                info.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
            yield
        finally:
            self._writer.release()

    def add(
        self,
        chunks: Sequence[Chunk],
        *,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
        prune: bool = False,
    ) -> AddReport:
        """Add the chunks the index lacks: their texts, statistics and link rows to the catalog, their vectors to the
        dense store, their postings as one BM25 segment.

        Re-adding chunks that are already stored costs one id lookup per batch (no embedding). Dense writes run on a
        background thread while the next batch is embedded.

        Args:
            chunks: Chunks to add (duplicates by id are dropped).
            batch_size: Chunks embedded per batch.
            progress: Called with the number of chunks handled after each batch.
            prune: Afterwards delete every stored chunk that is not among ``chunks``, so the index holds exactly
                them (LangChain ``index(cleanup="full")`` semantics).

        Raises:
            IndexingError: If embedding or a dense write fails (what was written stays; rerun to resume).
        """
        start = time.perf_counter()
        self._prepare()
        with self.writing(), self._lock:
            embedded = self.sentences.seconds
            if not self._backfilled:  # an index written before sentence vectors, or with another encoder
                self.sentences.backfill()
                self._backfilled = True
            unique: dict[str, Chunk] = {}
            for ch in chunks:
                unique.setdefault(ch["chunk_id"], ch)
            todo = list(unique.values())
            stages: dict[str, float] = {}
            t0 = time.perf_counter()
            in_catalog = self.catalog.positions([c["chunk_id"] for c in todo])
            fresh = [c for c in todo if c["chunk_id"] not in in_catalog]
            analysed = self._catalog_add(fresh)
            stages["sentence vectors"] = self.sentences.seconds - embedded
            stages["catalog"] = time.perf_counter() - t0 - stages["sentence vectors"]
            # only chunks the catalog held before can be in the store already (the catalog is written first): a run
            # killed after its catalog write, a re-index; a new chunk is not looked up
            present = self.dense.existing([c["chunk_id"] for c in todo if c["chunk_id"] in in_catalog])
            new = [c for c in todo if c["chunk_id"] not in present]
            if progress and present:
                progress(len(todo) - len(new))
            stages.update(self._write_dense(new, batch_size, progress))
            t0 = time.perf_counter()
            self.sync_postings(analysed)
            stages["sparse"] = time.perf_counter() - t0
            removed = 0
            if prune:
                stale = [cid for cid in self.catalog.ids() if cid not in unique]
                removed = self.remove(stale)
        return AddReport(
            len(todo),
            len(new),
            len(present),
            time.perf_counter() - start,
            stages,
            removed,
            frozenset(c["chunk_id"] for c in new),
        )

    def _catalog_add(self, chunks: Sequence[Chunk], *, sentences: bool = True) -> dict[int, list[str]]:
        """Texts (unless the store keeps them), term statistics, link rows and (with ``sentences``) sentence vectors
        of new chunks, in one transaction. Returns their analysed terms by the positions they were given (what their
        postings are made of)."""
        if not chunks:
            return {}
        terms = self.analyzer.many([c["text"] for c in chunks])
        metas = [self._stored_meta(c["metadata"]) for c in chunks]
        embedded = None
        if sentences and self.sentences.enabled:
            try:
                embedded = self.sentences.embed([c["text"] for c in chunks], metas)
            except Exception as exc:
                raise IndexingError(f"embedding sentences failed: {exc}") from exc
        rows = [
            (
                c["chunk_id"],
                str(c["metadata"].get("doc_id", c["chunk_id"])),
                "" if self.texts_in_store else c["text"],
                meta,
            )
            for c, meta in zip(chunks, metas, strict=True)
        ]
        with self.catalog.transaction() as db:
            positions = self.catalog.add_chunks(rows, [len(t) for t in terms], terms, db)
            self._stored_links().added(
                db, positions, [c["text"] for c in chunks], metas, find=self._containing, texts_of=self._texts
            )
            if embedded is not None:
                self.sentences.write(db, positions, embedded)
        return dict(zip(positions, terms, strict=True))

    def _containing(self, aliases: Sequence[Sequence[str]]) -> list[list[int]]:
        """For each alias, the positions of held chunks whose text may contain its words (every analysed term of
        them): the BM25 postings' intersection."""
        terms = [self.analyzer(" ".join(words)) for words in aliases]
        return [
            found.tolist() if t else [] for t, found in zip(terms, self.postings.containing_many(terms), strict=True)
        ]

    def sync_postings(self, analysed: Mapping[int, list[str]] | None = None) -> None:
        """Write the BM25 postings of every catalog chunk the postings do not cover yet (the chunks just added, and
        any a killed run left behind), as one segment. A position whose chunk was removed before its postings were
        written gets none.

        Args:
            analysed: The analysed terms of chunks in hand, by position (an add's): those are not read back (on
                Milvus that would be one read of the texts from the store per chunk).
        """
        analysed = analysed or {}
        start, end = self.postings.next_position, self.catalog.next_position()
        if start >= end:
            return
        terms: list[list[str]] = [[] for _ in range(end - start)]
        missing: list[StoredChunk] = []
        held: list[int] = []
        if all(pos in analysed for pos in range(start, end)):
            held = list(range(start, end))  # an add's chunks only: no catalog read
        else:
            for part in self.catalog.scan(start=start):
                held.extend(c.pos for c in part)
                missing.extend(c for c in part if c.pos not in analysed)
        for pos in held:
            if pos in analysed:
                terms[pos - start] = analysed[pos]
        for i in range(0, len(missing), 2000):  # a killed run's leftovers, or a catalog read from the store
            part = missing[i : i + 2000]
            for c, found in zip(part, self.analyzer.many(self._texts(part)), strict=True):
                terms[c.pos - start] = found
        self.postings.add(start, terms)

    def remove(self, ids: Sequence[str]) -> int:
        """Remove chunks by id from the catalog (texts, statistics, link rows), the postings and the dense store.
        Returns how many were held."""
        if not ids:
            return 0
        with self.writing(), self._lock:
            at = self.catalog.positions(list(ids))
            held = self.catalog.at(sorted(at.values()))
            self.postings.remove([c.pos for c in held])
            texts = self._texts(held)
            with self.catalog.transaction() as db:
                self.catalog.remove_chunks([c.pos for c in held], self.analyzer.many(texts), db)
            self.dense.delete(list(ids))
        return len(held)

    def _texts(self, chunks: Sequence[StoredChunk]) -> list[str]:
        if not self.texts_in_store:
            return [c.text for c in chunks]
        read = self.dense.get([c.id for c in chunks], metadata=False)  # type: ignore[union-attr]
        found = {h["chunk_id"]: h["text"] for h in read}
        return [found.get(c.id, "") for c in chunks]

    def _stored_meta(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """A chunk's metadata as the dense store gives it back."""
        if isinstance(self.dense, ChromaStore):
            return _chroma_meta(meta)
        return {k: v for k, v in meta.items() if v is not None}

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
        keep_text = self.texts_in_store or isinstance(self.dense, LangChainStore)
        pending: list[Future[None]] = []
        buffered: list[tuple[Sequence[Chunk], np.ndarray]] = []

        def submit(writer: ThreadPoolExecutor) -> None:
            """One store write of the buffered batches (the store's HNSW insert costs less in big writes)."""
            chunks = [c for batch, _ in buffered for c in batch]
            vectors = np.vstack([v for _, v in buffered]) if embed_here else np.zeros((len(chunks), 0))
            texts = [c["text"] for c in chunks] if keep_text else [""] * len(chunks)
            pending.append(
                writer.submit(
                    self.dense.add, [c["chunk_id"] for c in chunks], texts, [c["metadata"] for c in chunks], vectors
                )
            )
            buffered.clear()

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
                buffered.append((batch, vectors))
                if len(buffered) >= WRITE_BATCHES:
                    while pending and (len(pending) >= 2 or pending[0].done()):
                        self._settle(pending.pop(0))
                    submit(writer)
                stages["dense write wait"] += time.perf_counter() - t1
                if progress:
                    progress(len(batch))
            t1 = time.perf_counter()
            if buffered:
                submit(writer)
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
        """Delete every chunk from the dense store, the catalog and the postings."""
        with self.writing(), self._lock:
            self.dense.delete_all()
            self.catalog.clear()
            self.postings.clear()


def _batches(items: Sequence[Chunk], size: int) -> Iterator[Sequence[Chunk]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _holder(info: Any) -> str:
    """Who holds the writer lock, as its ``writer.lock.json`` says."""
    try:
        held = json.loads(info.read_text())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(held["since"])))
        return f"process {held['pid']} on {held['host']}, since {since}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not said who it is"
