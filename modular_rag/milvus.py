"""Milvus as the knowledge index's store: dense vectors and BM25 in one collection that several processes share.

``vectorstore: {name: milvus, uri: http://127.0.0.1:19530, collection: manuals}`` keeps every chunk in one Milvus
collection (a Milvus server or cluster, or ``milvus-lite server``; ``uri: ./index.db`` runs Milvus Lite inside the
process). The collection holds the chunk id (VARCHAR primary key), its text (VARCHAR with an analyzer), its metadata
(JSON), its vector (FLOAT_VECTOR, cosine) and a BM25 function output (SPARSE_FLOAT_VECTOR) that Milvus computes
from the text on insert. Dense search, BM25 search and their fusion (RRF or weighted, one ``hybrid_search`` call)
all run in Milvus, so what one process adds another retrieves by either channel at once.

The kit's Chroma-style ``where`` filters are translated to Milvus boolean expressions over the metadata JSON, and its
BM25 analysis to a Milvus analyzer, in :mod:`modular_rag.milvus_terms`; a filter that cannot be translated is refused
before anything is sent.

No process copies the collection: a question's texts are read from it by id (:meth:`MilvusStore.get`), and what the
kit keeps beside it, the term statistics of its own analyzer (the evidence scorer's IDFs) and the link table, are rows
of the catalog (:class:`~modular_rag.catalog.Catalog`), written with every add and removal and read by key.

Needs the ``milvus`` extra (``pip install 'modular-rag[milvus]'``: pymilvus and milvus-lite).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from modular_rag.errors import ConfigError, ProviderError
from modular_rag.milvus_connection import BM25_SINCE, MilvusConnection
from modular_rag.milvus_terms import where_to_expr
from modular_rag.milvus_wire import (
    BATCH_ROWS,
    ID,
    META,
    OUTPUT,
    SPARSE,
    TEXT,
    VECTOR,
    hits,
    hybrid_request,
    pymilvus_module,
    row_batches,
)
from modular_rag.state import Hit

__all__ = ["BM25_SINCE", "MilvusStore", "SERVER_FUSIONS"]


SERVER_FUSIONS = ("rrf", "weighted")
"""The hybrid fusions Milvus runs itself: ``rrf`` (RRFRanker, equal weights) and ``weighted`` (WeightedRanker)."""

# an index run writing at least this many rows ends in a flush on a Milvus server (see MilvusStore.warm): a bulk
# load, where sealing the rest lets Milvus build the collection's index over it; below, a flush seals a small segment
SEAL_ROWS = 10_000
_MAX_LIMIT = 16_384  # Milvus's cap on a search's limit (topk)


class MilvusStore(MilvusConnection):
    """A Milvus collection holding chunks with the kit's vectors, ranked by cosine, BM25 or both in Milvus.

    Opening is lazy: the client connects on first use, and the collection is created by the first write (its
    vector size is that of the first vectors written). Reads of a collection that does not exist yet find nothing.

    Reads are ``Session``-consistent by default: a read waits for this process's own writes to the collection (its
    next read sees what it added or deleted), and otherwise reads what the server has applied, without waiting.
    Another process's writes are applied within a time tick (0.2-0.4 s on Milvus 2.3); an index run, ``--sync``
    included, ends by reading its own writes (:meth:`warm`), so a worker that reads after the run returned sees them
    (with one replica of the collection; with several, each applies writes on its own: use ``Strong``). ``Strong``
    waits for every write acknowledged anywhere, so on a Milvus server every read waits for the next time tick
    (0.2-0.4 s on the 2.3.5 standalone, whatever the collection's size). ``Bounded`` waits only when the server is
    more than a few seconds behind (Milvus's ``gracefulTime``): it may miss the last writes of this process as of
    any other. ``Eventually`` never waits.

    Args:
        uri: ``http(s)://host:port`` of a Milvus server (or ``milvus-lite server``), or a local ``*.db`` path for
            Milvus Lite inside this process (one process per file).
        collection: Collection name (letters, digits, underscores; not starting with a digit).
        token: ``user:password`` or an API key, for servers with authentication.
        analyzer: Milvus ``analyzer_params`` of the text field (default
            :func:`~modular_rag.milvus_terms.milvus_analyzer`); used when the collection is created.
        k1, b: BM25 parameters of the sparse index (used when the collection is created).
        consistency: Milvus consistency level of every read (see above).
        timeout_s: Per-request timeout.
        bm25: Where BM25 ranks (:attr:`ranks_bm25`): ``milvus``, ``kit`` (the caller's own postings) or ``auto``.
        search_params: Index parameters of every dense search (``{"ef": 128}`` for HNSW, ``{"level": 2}`` for
            AUTOINDEX on Milvus).
    """

    # ---------------------------------------------------------------------------------------------------- writing

    def add(
        self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], vectors: np.ndarray
    ) -> None:
        """Upsert chunks with precomputed vectors (Milvus computes their BM25 terms from the text).

        Raises:
            ProviderError: If a chunk does not fit (id over 512 or text over 65,535 UTF-8 bytes: chunk smaller), the
                vectors have another size than the collection's, or Milvus refuses the write.
        """
        if not len(ids):
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(ids) or vectors.shape[1] == 0:
            raise ProviderError(
                f"{self.describe()}: add needs one vector per chunk (got {vectors.shape} for {len(ids)} chunks)"
            )
        self._ensure(int(vectors.shape[1]))
        for rows in row_batches(ids, texts, metadatas, vectors):
            self._upsert(rows)

    def _upsert(self, rows: list[dict[str, Any]]) -> None:
        self._call("upsert", lambda c: c.upsert(self.collection_name, rows, timeout=self.timeout_s))
        self._unflushed = self._unflushed or self.lite
        self._written += len(rows)

    def delete(self, ids: Sequence[str]) -> None:
        """Delete the chunks with these ids (ids not stored are ignored); returns once reads see the deletion. Milvus
        2.3 answers a delete with no timestamp, which Session reads would wait for (pymilvus waits for the last write
        it has a timestamp of), so one Strong read waits for the deletion instead."""
        if not ids or not self._exists():
            return
        for i in range(0, len(ids), BATCH_ROWS):
            batch = list(ids[i : i + BATCH_ROWS])
            self._call("delete", lambda c, b=batch: c.delete(self.collection_name, ids=b, timeout=self.timeout_s))
        self._unflushed = self._unflushed or self.lite
        if self.consistency != "Strong":
            args = {**self._read_args(), "consistency_level": "Strong"}
            self._call("get", lambda c: c.get(self.collection_name, ids=[ids[0]], output_fields=[ID], **args))

    def delete_all(self) -> None:
        """Drop the collection; the next write creates it again."""
        with self._lock:
            if self._exists():
                self._call("drop_collection", lambda c: c.drop_collection(self.collection_name))
            self._ready, self._dim, self._applied, self._unflushed = False, None, None, False
            self._sparse_field, self._written = None, 0

    # ---------------------------------------------------------------------------------------------------- reading

    def _read_args(self) -> dict[str, Any]:
        """The keyword arguments of a read, after flushing this process's writes on Milvus Lite (see :meth:`flush`)."""
        self._settle()
        return {"timeout": self.timeout_s, "consistency_level": self.consistency}

    def count(self) -> int:
        """Number of stored chunks (an exact ``count(*)``)."""
        if not self._exists():
            return 0
        res = self._call(
            "count", lambda c: c.query(self.collection_name, filter="", output_fields=["count(*)"], **self._read_args())
        )
        return int(res[0]["count(*)"]) if res else 0

    def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are stored."""
        if not ids or not self._exists():
            return set()
        found: set[str] = set()
        for i in range(0, len(ids), BATCH_ROWS):
            batch = list(ids[i : i + BATCH_ROWS])
            rows = self._call(
                "get", lambda c, b=batch: c.get(self.collection_name, ids=b, output_fields=[ID], **self._read_args())
            )
            found.update(str(r[ID]) for r in rows)
        return found

    def dump(self) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        """Every chunk's id, text and metadata, sorted by id (read with a query iterator)."""
        if not self._exists():
            return [], [], []
        rows: list[dict[str, Any]] = []

        def read(c: Any) -> None:
            it = c.query_iterator(
                self.collection_name,
                batch_size=BATCH_ROWS,
                filter="",
                output_fields=[ID, TEXT, META],
                **self._read_args(),
            )
            try:
                while batch := it.next():
                    rows.extend(batch)
            finally:
                it.close()

        self._call("dump", read)
        rows.sort(key=lambda r: str(r[ID]))
        return (
            [str(r[ID]) for r in rows],
            [str(r.get(TEXT) or "") for r in rows],
            [dict(r.get(META) or {}) for r in rows],
        )

    def get(self, ids: Sequence[str], *, metadata: bool = True) -> list[Hit]:
        """The stored chunks of these ids (text and, with ``metadata``, metadata), read by key; ids not stored are
        left out. Without metadata the reply carries less to decode: an add reads tens of thousands of older texts."""
        if not ids or not self._exists():
            return []
        fields = [ID, *OUTPUT] if metadata else [ID, TEXT]
        out: list[Hit] = []
        for i in range(0, len(ids), BATCH_ROWS):
            batch = list(ids[i : i + BATCH_ROWS])
            rows = self._call(
                "get",
                lambda c, b=batch: c.get(self.collection_name, ids=b, output_fields=fields, **self._read_args()),
            )
            out.extend(
                Hit(
                    chunk_id=str(r[ID]),
                    text=str(r.get(TEXT) or ""),
                    score=0.0,
                    channel="link",
                    metadata=dict(r.get(META) or {}),
                )
                for r in rows
            )
        return out

    def get_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of the given chunk ids (missing ids are left out)."""
        if not ids or not self._exists():
            return {}
        rows = self._call(
            "get", lambda c: c.get(self.collection_name, ids=list(ids), output_fields=[VECTOR], **self._read_args())
        )
        return {str(r[ID]): np.asarray(r[VECTOR], dtype=np.float32) for r in rows}

    def query(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` nearest chunks by cosine similarity, optionally filtered (fewer when fewer match)."""
        expr = where_to_expr(where) if where else ""
        if k <= 0 or not self._exists():
            return []
        data = [self._query_vector(vector)]
        res = self._call(
            "search",
            lambda c: c.search(
                self.collection_name,
                data=data,
                anns_field=VECTOR,
                limit=min(k, _MAX_LIMIT),
                filter=expr,
                output_fields=OUTPUT,
                search_params=self._dense_params,
                **self._read_args(),
            ),
        )
        return hits(res, "dense")

    def search_sparse(self, query: str, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` best chunks for ``query`` by BM25, ranked in Milvus over the collection's analyzed text."""
        expr = where_to_expr(where) if where else ""
        if k <= 0 or not query.strip() or not self._exists():
            return []
        res = self._call(
            "search",
            lambda c: c.search(
                self.collection_name,
                data=[query],
                anns_field=SPARSE,
                limit=min(k, _MAX_LIMIT),
                filter=expr,
                output_fields=OUTPUT,
                search_params={"metric_type": "BM25"},
                **self._read_args(),
            ),
        )
        return hits(res, "bm25", absolute=True)

    def _query_vector(self, vector: np.ndarray) -> list[float]:
        flat = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self._dim is not None and flat.shape[0] != self._dim:
            raise ProviderError(
                f"{self.describe()} holds {self._dim}-dim vectors, the query's is {flat.shape[0]}-dim: "
                "query with the embedder the collection was indexed with"
            )
        return flat.tolist()

    def fuses(self, fusion: str, weights: Sequence[float] = (1.0, 1.0)) -> bool:
        """Whether :meth:`search_hybrid` runs this fusion in Milvus: ``weighted`` always, ``rrf`` with equal weights
        (Milvus's RRFRanker has none); ``convex`` never. Callers fuse in Milvus only where BM25 ranks there
        (:attr:`ranks_bm25`)."""
        return fusion == "weighted" or (fusion == "rrf" and len(weights) == 2 and weights[0] == weights[1])

    def search_hybrid(
        self,
        vector: np.ndarray,
        query: str,
        k: int,
        *,
        pool: int,
        fusion: str = "rrf",
        weights: Sequence[float] = (1.0, 1.0),
        rrf_k: int = 60,
        where: Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """Dense and BM25 search, ``pool`` candidates each, fused in Milvus to ``k`` in one ``hybrid_search`` call.

        ``rrf`` is Milvus's RRFRanker (``1 / (rrf_k + rank)`` summed, as the kit's RRF with equal weights);
        ``weighted`` is its WeightedRanker over Milvus-normalised scores (cosine to ``(1 + cos) / 2``, BM25 to
        ``2 atan(s) / pi``), not the kit's z-scores.

        Raises:
            ConfigError: If the fusion is not one Milvus runs (see :meth:`fuses`) or the filter has no translation.
        """
        if not self.fuses(fusion, weights):
            raise ConfigError(
                "operators.retrieve.params.fusion",
                f"Milvus runs {', '.join(SERVER_FUSIONS)} (rrf "
                f"with equal weights) itself, not {fusion!r} with weights {tuple(weights)}",
            )
        expr = where_to_expr(where) if where else ""
        if k <= 0 or not self._exists():
            return []
        reqs, ranker = hybrid_request(
            pymilvus_module(),
            self._query_vector(vector),
            query,
            expr=expr,
            limit=min(pool, _MAX_LIMIT),
            dense_params=self._dense_params,
            fusion=fusion,
            weights=weights,
            rrf_k=rrf_k,
        )
        res = self._call(
            "hybrid_search",
            lambda c: c.hybrid_search(
                self.collection_name, reqs, ranker, limit=min(k, _MAX_LIMIT), output_fields=OUTPUT, **self._read_args()
            ),
        )
        return hits(res, "hybrid")

    def warm(self, timeout_s: float = 3600.0) -> float:
        """Make the collection ready for readers: load it, then one dense search and, when Milvus ranks BM25
        (:attr:`ranks_bm25`), one BM25 search, each allowed ``timeout_s``; flush first on Milvus Lite, or on a Milvus
        server after a bulk write (at least ``SEAL_ROWS`` rows since the last flush). Returns the seconds it took.

        A server builds what a search needs when the collection is first searched after a write or a restart (Milvus
        Lite builds its BM25 inverted index in memory then: 12 to 15 s at 100,000 chunks here), and a worker's
        first question would pay that, past its per-request timeout on a large collection. The indexer pays it
        instead, at the end of each ``index`` run (:func:`~modular_rag.ingest.index_paths`); a restarted server
        pays it again on its first search (run ``modular-rag index`` once, or any search, after starting it).

        A Milvus server searches unsealed rows through a temporary index and seals segments on its own as they
        fill; Milvus advises a flush only once a bulk load is done, as each flush seals a segment however small. So
        an ``index`` run that adds a few files leaves its rows unsealed (on the 2.3.5 standalone at 1M chunks, a
        flush after adding 1,000 chunks took 2.6 s, most of it pymilvus polling for the seal).
        """
        start = time.perf_counter()
        if not self._exists():
            return 0.0
        with self._lock:
            if self.lite or self._written >= SEAL_ROWS:
                self.flush(timeout_s)
            self._call("load_collection", lambda c: c.load_collection(self.collection_name, timeout=timeout_s))
            # the searches wait for this process's writes, so that readers of any level see them once this returns
            args = {
                **self._read_args(),
                "timeout": timeout_s,
                "consistency_level": "Strong" if self.consistency == "Strong" else "Session",
            }
            if self._dim:
                probe = [1.0] + [0.0] * (self._dim - 1)
                self._call(
                    "search",
                    lambda c: c.search(
                        self.collection_name,
                        data=[probe],
                        anns_field=VECTOR,
                        limit=1,
                        search_params=self._dense_params,
                        **args,
                    ),
                )
            if self.ranks_bm25:  # else the kit's postings rank BM25: building Milvus's index would only cost memory
                self._call(
                    "search",
                    lambda c: c.search(
                        self.collection_name,
                        data=["warm"],
                        anns_field=SPARSE,
                        limit=1,
                        search_params={"metric_type": "BM25"},
                        **args,
                    ),
                )
        return time.perf_counter() - start

    def close(self) -> None:
        """Close the client's connection (the store reconnects on next use)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client, self._ready = None, False
