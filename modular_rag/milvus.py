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

import json
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from modular_rag.errors import ConfigError, MissingDependencyError, ProviderError
from modular_rag.milvus_terms import META_FIELD, lite_analyzer, milvus_analyzer, where_to_expr
from modular_rag.state import Hit

__all__ = ["BM25_SINCE", "MilvusStore", "SERVER_FUSIONS"]

log = logging.getLogger(__name__)

SERVER_FUSIONS = ("rrf", "weighted")
"""The hybrid fusions Milvus runs itself: ``rrf`` (RRFRanker, equal weights) and ``weighted`` (WeightedRanker)."""

BM25_SINCE = (2, 5)
"""The first Milvus release with the BM25 function (and the analyzers and sparse vectors it needs)."""

Consistency = Literal["Strong", "Bounded", "Session", "Eventually"]

_ID, _TEXT, _META, _VECTOR, _SPARSE = "id", "text", META_FIELD, "vector", "sparse"
_OUTPUT = [_TEXT, _META]
_MAX_ID = 512
_MAX_TEXT = 65_535  # bytes: Milvus's VARCHAR limit
_MAX_LIMIT = 16_384  # Milvus's cap on a search's limit (topk)
_BATCH_ROWS, _BATCH_BYTES = 1000, 16 * 1024 * 1024
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
# gRPC status codes a busy or restarting server answers with; every request of the store is idempotent (upserts and
# deletes by primary key, reads), so it is sent again, after a pause, this many times before the error is raised
_TRANSIENT = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE", "RESOURCE_EXHAUSTED"})
_RETRIES, _BACKOFF_S = 2, 2.0


def _pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError as exc:
        raise MissingDependencyError(
            "vectorstore 'milvus' needs pymilvus (and milvus-lite for a local server): "
            "pip install 'modular-rag[milvus]'"
        ) from exc
    return pymilvus


class _NoMvccWarning(logging.Filter):
    """Milvus Lite returns no MVCC timestamp to query iterators; pymilvus then warns on every dump that it uses the
    client's clock instead, which is harmless for a full read. Only that one message is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "mvccTs" not in record.getMessage()


logging.getLogger("pymilvus.client.iterator.query_iterator").addFilter(_NoMvccWarning())


# ------------------------------------------------------------------------------------------------------------- store


class MilvusStore:
    """A Milvus collection holding chunks with the kit's vectors, ranked by cosine, BM25 or both in Milvus.

    Opening is lazy: the client connects on first use, and the collection is created by the first write (its
    vector size is that of the first vectors written). Reads of a collection that does not exist yet find nothing.

    Args:
        uri: ``http(s)://host:port`` of a Milvus server (or ``milvus-lite server``), or a local ``*.db`` path for
            Milvus Lite inside this process (one process per file).
        collection: Collection name (letters, digits, underscores; not starting with a digit).
        token: ``user:password`` or an API key, for servers with authentication.
        analyzer: Milvus ``analyzer_params`` of the text field (default
            :func:`~modular_rag.milvus_terms.milvus_analyzer`); used when the collection is created.
        k1, b: BM25 parameters of the sparse index (used when the collection is created).
        consistency: Milvus consistency level of every read; ``Strong`` sees every write acknowledged before it.
        timeout_s: Per-request timeout.
        bm25: Where BM25 ranks (:attr:`ranks_bm25`): ``milvus``, ``kit`` (the caller's own postings) or ``auto``.
        search_params: Index parameters of every dense search (``{"ef": 128}`` for HNSW, ``{"level": 2}`` for
            AUTOINDEX on Milvus).
    """

    def __init__(
        self,
        *,
        uri: str,
        collection: str = "modular_rag",
        token: str | None = None,
        analyzer: Mapping[str, Any] | None = None,
        k1: float = 1.2,
        b: float = 0.75,
        consistency: Consistency = "Strong",
        timeout_s: float = 30.0,
        bm25: Literal["auto", "milvus", "kit"] = "auto",
        search_params: Mapping[str, Any] | None = None,
    ) -> None:
        if not _NAME.match(collection):
            raise ConfigError("providers.vectorstore.collection", f"{collection!r} is not a Milvus collection name: "
                              "letters, digits and underscores, not starting with a digit, at most 255")  # fmt: skip
        self.uri, self.collection_name, self.token = uri, collection, token
        self.analyzer = dict(analyzer) if analyzer is not None else milvus_analyzer()
        self.k1, self.b, self.consistency, self.timeout_s = k1, b, consistency, timeout_s
        if bm25 not in ("auto", "milvus", "kit"):
            raise ConfigError("providers.vectorstore.bm25", f"{bm25!r} is not one of auto, milvus, kit")
        self.bm25 = bm25
        self._dense_params: dict[str, Any] = {"metric_type": "COSINE"}
        if search_params:
            self._dense_params["params"] = dict(search_params)
        self._client: Any = None
        self._ready = False
        self._dim: int | None = None
        self._applied: dict[str, Any] | None = None
        self._lite: bool | None = None
        self._version: tuple[int, int] | None = None
        self._sparse_field: bool | None = None  # whether the adopted collection has the BM25 field
        self._unflushed = False
        self._lock = threading.RLock()

    # ------------------------------------------------------------------------------------------------- connection

    def describe(self) -> str:
        """Where the store lives and how its BM25 analyses text, for messages (never the token)."""
        where = f"milvus {self.uri}/{self.collection_name}"
        if not self._applied:  # not yet read, or a collection without Milvus's BM25 (made on a Milvus before 2.5)
            return where
        filters = [f if isinstance(f, str) else str(f.get("type")) for f in self._applied.get("filter") or []]
        return f"{where} (BM25 analyzer: {self._applied.get('tokenizer', 'standard')} {'+'.join(filters)})"

    @property
    def client(self) -> Any:
        """The ``pymilvus.MilvusClient`` (connected on first use)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._connect()
        return self._client

    def _connect(self) -> Any:
        pymilvus = _pymilvus()
        local = not re.match(r"^[a-z]+://", self.uri)
        if local:
            if not self.uri.endswith(".db"):
                raise ConfigError("providers.vectorstore.uri", f"{self.uri!r} is neither a server address "
                                  "(http://host:19530) nor a Milvus Lite file (a path ending in .db)")  # fmt: skip
            Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
        try:
            return pymilvus.MilvusClient(uri=self.uri, token=self.token or "", timeout=self.timeout_s)
        except Exception as exc:
            if local:
                hint = ("a Milvus Lite file serves one process: is it open in another? Share an index through "
                        "`milvus-lite server --data-dir DIR --host 127.0.0.1 --port 19530` and uri: http://...")
            else:
                hint = ("start a server (`milvus-server --data DIR --proxy-port 19530`, the milvus-server extra; "
                        "`milvus-lite server --data-dir DIR --host 127.0.0.1 --port 19530`; or a Milvus; one just "
                        "started answers after some seconds) or fix providers.vectorstore.uri")
            raise ProviderError(f"cannot reach Milvus at {self.uri}: {exc}; {hint}") from exc

    def server_version(self) -> str:
        """The server's version string (``milvus_lite-3.2.2`` for Milvus Lite, ``v2.3.5-lite`` for the PyPI
        ``milvus`` package's standalone server, ``v2.5.4`` for a Milvus release)."""
        return str(self._call("get_server_version", lambda c: c.get_server_version(timeout=self.timeout_s)))

    def _ask_version(self) -> None:
        if self._lite is None:
            text = self.server_version()
            self._lite = text.startswith("milvus_lite")
            self._version = None if self._lite else _release(text)

    @property
    def lite(self) -> bool:
        """Whether the server is Milvus Lite (asked once)."""
        self._ask_version()
        return bool(self._lite)

    @property
    def bm25_function(self) -> bool:
        """Whether the server computes BM25 itself (Milvus's BM25 function and sparse vectors: Milvus 2.5 and later,
        and Milvus Lite). A version string with no release number in it (a managed service's) counts as able."""
        self._ask_version()
        return bool(self._lite) or self._version is None or self._version >= BM25_SINCE

    @property
    def ranks_bm25(self) -> bool:
        """Whether BM25 queries rank in Milvus (``bm25: milvus``), not over the kit's postings (``kit``). ``auto``
        ranks in Milvus unless the server cannot (a Milvus before 2.5 has no BM25 function, a collection created
        there has no BM25 field) or would drop part of the analysis asked for (Milvus Lite applies neither stemming
        nor accent folding); then the kit's postings (the same analysis as the embedded default) rank.

        Raises:
            ConfigError: If ``bm25: milvus`` is asked of a server or collection without Milvus's BM25.
        """
        able = self.bm25_function and self._sparse_field is not False
        if self.bm25 == "milvus" and not able:
            self._refuse_bm25()
        if self.bm25 != "auto":
            return self.bm25 == "milvus"
        return able and not (self.lite and lite_analyzer(self.analyzer)[1])

    def _refuse_bm25(self) -> None:
        why = (f"the server is Milvus {self.server_version()}, and Milvus computes BM25 only from 2.5"
               if not self.bm25_function else "the collection was created without a BM25 field (on a Milvus before "
               "2.5); index into a new collection to rank BM25 in Milvus")  # fmt: skip
        raise ConfigError("providers.vectorstore.bm25", f"bm25: milvus cannot rank in {self.describe()}: {why}; use "
                          "bm25: kit (or auto), which ranks BM25 over the kit's postings in the catalog folder while "
                          "dense search stays in Milvus")  # fmt: skip

    def flush(self, timeout_s: float | None = None) -> None:
        """Seal the rows written so far into a segment, waiting up to ``timeout_s`` (default: the store's timeout).

        Milvus Lite searches sealed segments through cached indexes but rebuilds the BM25 index of unsealed rows on
        every search (about 2 s a query at 5,000 rows), so on Milvus Lite the store flushes by itself before it next
        reads after writing: an indexing run ends in one flush, one segment (Milvus Lite's BM25 statistics are per
        segment). On Milvus the store never flushes by itself: Milvus seals segments on its own."""
        with self._lock:
            self._unflushed = False
            if self._exists():
                wait = self.timeout_s if timeout_s is None else timeout_s
                self._call("flush", lambda c: c.flush(self.collection_name, timeout=wait))

    def _settle(self) -> None:
        """Flush this process's writes before a read, on Milvus Lite (see :meth:`flush`)."""
        if self._unflushed:
            self.flush()

    def _call(self, what: str, fn: Any) -> Any:
        """``fn(client)``, sent again when the server answers with a transient gRPC status (a deadline passed while
        it was busy, unavailable while it restarts), up to ``_RETRIES`` times; any other failure, or the last, is a
        :class:`ProviderError` naming the store and the request."""
        for attempt in range(_RETRIES + 1):
            try:
                return fn(self.client)
            except (ConfigError, ProviderError, MissingDependencyError):
                raise
            except Exception as exc:  # pymilvus raises MilvusException and grpc errors; say where and what
                status = _grpc_status(exc)
                if status not in _TRANSIENT or attempt == _RETRIES:
                    raise ProviderError(f"{self.describe()}: {what} failed: {exc}") from exc
                log.warning("%s: %s answered %s; sending it again (%d of %d)", self.describe(), what, status,
                            attempt + 1, _RETRIES)  # fmt: skip
                time.sleep(_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _exists(self) -> bool:
        """Whether the collection exists (checked with the server until it does, then remembered)."""
        if self._ready:
            return True
        with self._lock:
            if not self._ready and self._call("has_collection", lambda c: c.has_collection(self.collection_name)):
                self._adopt()
        return self._ready

    def _adopt(self) -> None:
        """Read an existing collection's vector size and analyzer, and make sure it is loaded for search."""
        info = self._call("describe_collection", lambda c: c.describe_collection(self.collection_name))
        fields = {f["name"]: f for f in info.get("fields", [])}
        missing = [n for n in (_ID, _TEXT, _META, _VECTOR) if n not in fields]
        if missing:
            raise ProviderError(f"{self.describe()}: the collection exists but was not made by the kit (no "
                                f"{', '.join(missing)} field); name another collection")  # fmt: skip
        params = fields[_VECTOR].get("params", {})
        self._dim = int(params["dim"]) if "dim" in params else None
        analyzer = fields[_TEXT].get("params", {}).get("analyzer_params")
        self._applied = json.loads(analyzer) if isinstance(analyzer, str) else dict(analyzer or {})
        self._sparse_field = _SPARSE in fields
        self._call("load_collection", lambda c: c.load_collection(self.collection_name))
        self._ready = True

    def _create(self, dim: int) -> None:
        pymilvus = _pymilvus()
        if self.bm25 == "milvus" and not self.bm25_function:
            self._refuse_bm25()
        bm25 = self.bm25_function  # the field is made wherever Milvus can fill it, so bm25: milvus can rank later
        analyzer = dict(self.analyzer)
        if self.lite:
            analyzer, dropped = lite_analyzer(analyzer)
            if dropped and self.ranks_bm25:  # bm25: milvus asked for Milvus's own ranking; auto ranks in the kit
                log.warning("Milvus Lite applies only the tokenizer, lower-casing and stop words; %s created "
                            "without %s (BM25 there matches unstemmed words)", self.describe(), ", ".join(dropped))
        schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(_ID, pymilvus.DataType.VARCHAR, is_primary=True, max_length=_MAX_ID)
        index = pymilvus.MilvusClient.prepare_index_params()
        index.add_index(field_name=_VECTOR, index_type="AUTOINDEX", metric_type="COSINE")
        if bm25:
            schema.add_field(_TEXT, pymilvus.DataType.VARCHAR, max_length=_MAX_TEXT, enable_analyzer=True,
                             analyzer_params=analyzer)  # fmt: skip
        else:  # a Milvus before 2.5 has neither analyzers nor sparse vectors: the text is a plain field
            schema.add_field(_TEXT, pymilvus.DataType.VARCHAR, max_length=_MAX_TEXT)
        schema.add_field(_META, pymilvus.DataType.JSON)
        schema.add_field(_VECTOR, pymilvus.DataType.FLOAT_VECTOR, dim=dim)
        if bm25:
            schema.add_field(_SPARSE, pymilvus.DataType.SPARSE_FLOAT_VECTOR)
            schema.add_function(pymilvus.Function(name="bm25", function_type=pymilvus.FunctionType.BM25,
                                                  input_field_names=[_TEXT], output_field_names=[_SPARSE]))
            index.add_index(field_name=_SPARSE, index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                            params={"bm25_k1": self.k1, "bm25_b": self.b})  # fmt: skip
        try:
            self.client.create_collection(self.collection_name, schema=schema, consistency_level=self.consistency,
                                          timeout=self.timeout_s)  # fmt: skip
        except Exception as exc:
            # another process may have created it first; anything else is a real failure
            if not self._call("has_collection", lambda c: c.has_collection(self.collection_name)):
                raise ProviderError(f"{self.describe()}: creating the collection failed: {exc}") from exc
        else:
            # sync=False: the collection is empty, and load_collection (in _adopt) waits for its indexes anyway
            self._call("create_index", lambda c: c.create_index(self.collection_name, index, sync=False,
                                                                timeout=self.timeout_s))  # fmt: skip
        self._adopt()

    def _ensure(self, dim: int) -> None:
        with self._lock:
            if not self._exists():
                self._create(dim)
        if self._dim is not None and self._dim != dim:
            raise ProviderError(f"{self.describe()} holds {self._dim}-dim vectors, these are {dim}-dim (another "
                                "embedder?): index into another collection, or clear this one first")  # fmt: skip

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
            raise ProviderError(f"{self.describe()}: add needs one vector per chunk (got {vectors.shape} for "
                                f"{len(ids)} chunks)")  # fmt: skip
        self._ensure(int(vectors.shape[1]))
        rows: list[dict[str, Any]] = []
        size = 0
        for cid, text, meta, vec in zip(ids, texts, metadatas, vectors, strict=True):
            n = len(text.encode("utf-8"))
            if n > _MAX_TEXT or len(cid.encode("utf-8")) > _MAX_ID:
                raise ProviderError(f"chunk {cid[:80]!r} does not fit a Milvus row (text {n} bytes, at most "
                                    f"{_MAX_TEXT}; id at most {_MAX_ID}): use a smaller chunk size")  # fmt: skip
            rows.append({_ID: cid, _TEXT: text, _META: {k: v for k, v in meta.items() if v is not None},
                         _VECTOR: vec.tolist()})  # fmt: skip
            size += n + 4 * len(vec)
            if len(rows) >= _BATCH_ROWS or size >= _BATCH_BYTES:
                self._upsert(rows)
                rows, size = [], 0
        if rows:
            self._upsert(rows)

    def _upsert(self, rows: list[dict[str, Any]]) -> None:
        self._call("upsert", lambda c: c.upsert(self.collection_name, rows, timeout=self.timeout_s))
        self._unflushed = self._unflushed or self.lite

    def delete(self, ids: Sequence[str]) -> None:
        """Delete the chunks with these ids (ids not stored are ignored)."""
        if not ids or not self._exists():
            return
        for i in range(0, len(ids), _BATCH_ROWS):
            batch = list(ids[i : i + _BATCH_ROWS])
            self._call("delete", lambda c, b=batch: c.delete(self.collection_name, ids=b, timeout=self.timeout_s))
        self._unflushed = self._unflushed or self.lite

    def delete_all(self) -> None:
        """Drop the collection; the next write creates it again."""
        with self._lock:
            if self._exists():
                self._call("drop_collection", lambda c: c.drop_collection(self.collection_name))
            self._ready, self._dim, self._applied, self._unflushed = False, None, None, False
            self._sparse_field = None

    # ---------------------------------------------------------------------------------------------------- reading

    def _read_args(self) -> dict[str, Any]:
        """The keyword arguments of a read, after flushing this process's writes on Milvus Lite (see :meth:`flush`)."""
        self._settle()
        return {"timeout": self.timeout_s, "consistency_level": self.consistency}

    def count(self) -> int:
        """Number of stored chunks (an exact ``count(*)``)."""
        if not self._exists():
            return 0
        res = self._call("count", lambda c: c.query(self.collection_name, filter="", output_fields=["count(*)"],
                                                    **self._read_args()))  # fmt: skip
        return int(res[0]["count(*)"]) if res else 0

    def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are stored."""
        if not ids or not self._exists():
            return set()
        found: set[str] = set()
        for i in range(0, len(ids), _BATCH_ROWS):
            batch = list(ids[i : i + _BATCH_ROWS])
            rows = self._call("get", lambda c, b=batch: c.get(self.collection_name, ids=b, output_fields=[_ID],
                                                              **self._read_args()))  # fmt: skip
            found.update(str(r[_ID]) for r in rows)
        return found

    def dump(self) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        """Every chunk's id, text and metadata, sorted by id (read with a query iterator)."""
        if not self._exists():
            return [], [], []
        rows: list[dict[str, Any]] = []

        def read(c: Any) -> None:
            it = c.query_iterator(self.collection_name, batch_size=_BATCH_ROWS, filter="",
                                  output_fields=[_ID, _TEXT, _META], **self._read_args())  # fmt: skip
            try:
                while batch := it.next():
                    rows.extend(batch)
            finally:
                it.close()

        self._call("dump", read)
        rows.sort(key=lambda r: str(r[_ID]))
        return ([str(r[_ID]) for r in rows], [str(r.get(_TEXT) or "") for r in rows],
                [dict(r.get(_META) or {}) for r in rows])  # fmt: skip

    def get(self, ids: Sequence[str]) -> list[Hit]:
        """The stored chunks of these ids (text and metadata), read by key; ids not stored are left out."""
        if not ids or not self._exists():
            return []
        out: list[Hit] = []
        for i in range(0, len(ids), _BATCH_ROWS):
            batch = list(ids[i : i + _BATCH_ROWS])
            rows = self._call("get", lambda c, b=batch: c.get(self.collection_name, ids=b,
                                                              output_fields=[_ID, *_OUTPUT], **self._read_args()))
            out.extend(Hit(chunk_id=str(r[_ID]), text=str(r.get(_TEXT) or ""), score=0.0, channel="link",
                           metadata=dict(r.get(_META) or {})) for r in rows)  # fmt: skip
        return out

    def get_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of the given chunk ids (missing ids are left out)."""
        if not ids or not self._exists():
            return {}
        rows = self._call("get", lambda c: c.get(self.collection_name, ids=list(ids), output_fields=[_VECTOR],
                                                 **self._read_args()))  # fmt: skip
        return {str(r[_ID]): np.asarray(r[_VECTOR], dtype=np.float32) for r in rows}

    def query(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` nearest chunks by cosine similarity, optionally filtered (fewer when fewer match)."""
        expr = where_to_expr(where) if where else ""
        if k <= 0 or not self._exists():
            return []
        data = [self._query_vector(vector)]
        res = self._call("search", lambda c: c.search(
            self.collection_name, data=data, anns_field=_VECTOR, limit=min(k, _MAX_LIMIT), filter=expr,
            output_fields=_OUTPUT, search_params=self._dense_params, **self._read_args()))  # fmt: skip
        return _hits(res, "dense")

    def search_sparse(self, query: str, k: int, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` best chunks for ``query`` by BM25, ranked in Milvus over the collection's analyzed text."""
        expr = where_to_expr(where) if where else ""
        if k <= 0 or not query.strip() or not self._exists():
            return []
        res = self._call("search", lambda c: c.search(
            self.collection_name, data=[query], anns_field=_SPARSE, limit=min(k, _MAX_LIMIT), filter=expr,
            output_fields=_OUTPUT, search_params={"metric_type": "BM25"}, **self._read_args()))  # fmt: skip
        return _hits(res, "bm25", absolute=True)

    def _query_vector(self, vector: np.ndarray) -> list[float]:
        flat = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self._dim is not None and flat.shape[0] != self._dim:
            raise ProviderError(f"{self.describe()} holds {self._dim}-dim vectors, the query's is {flat.shape[0]}-dim: "
                                "query with the embedder the collection was indexed with")  # fmt: skip
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
            raise ConfigError("operators.retrieve.params.fusion", f"Milvus runs {', '.join(SERVER_FUSIONS)} (rrf "
                              f"with equal weights) itself, not {fusion!r} with weights {tuple(weights)}")  # fmt: skip
        expr = where_to_expr(where) if where else ""
        if k <= 0 or not self._exists():
            return []
        pymilvus = _pymilvus()
        limit = min(pool, _MAX_LIMIT)
        dense = pymilvus.AnnSearchRequest(data=[self._query_vector(vector)], anns_field=_VECTOR,
                                          param=self._dense_params, limit=limit, expr=expr)  # fmt: skip
        if not query.strip():
            reqs = [dense]  # BM25 of an empty query finds nothing; Milvus wants a text, so leave the channel out
            weights = weights[:1]
        else:
            sparse = pymilvus.AnnSearchRequest(data=[query], anns_field=_SPARSE, param={"metric_type": "BM25"},
                                               limit=limit, expr=expr)  # fmt: skip
            reqs = [dense, sparse]
        ranker = (pymilvus.RRFRanker(rrf_k) if fusion == "rrf"
                  else pymilvus.WeightedRanker(*weights, norm_score=True))  # fmt: skip
        res = self._call("hybrid_search", lambda c: c.hybrid_search(
            self.collection_name, reqs, ranker, limit=min(k, _MAX_LIMIT), output_fields=_OUTPUT,
            **self._read_args()))  # fmt: skip
        return _hits(res, "hybrid")

    def warm(self, timeout_s: float = 3600.0) -> float:
        """Make the collection ready for readers: flush, load, one dense search and, when Milvus ranks BM25
        (:attr:`ranks_bm25`), one BM25 search, each allowed ``timeout_s``. Returns the seconds it took.

        A server builds what a search needs when the collection is first searched after a write or a restart (Milvus
        Lite builds its BM25 inverted index in memory then: 12 to 15 s at 100,000 chunks here), and a worker's
        first question would pay that, past its per-request timeout on a large collection. The indexer pays it
        instead, at the end of each ``index`` run (:func:`~operators.indexing.index_paths`); a restarted server
        pays it again on its first search (run ``modular-rag index`` once, or any search, after starting it).
        """
        start = time.perf_counter()
        if not self._exists():
            return 0.0
        with self._lock:
            self.flush(timeout_s)
            self._call("load_collection", lambda c: c.load_collection(self.collection_name, timeout=timeout_s))
            args = {**self._read_args(), "timeout": timeout_s}
            if self._dim:
                probe = [1.0] + [0.0] * (self._dim - 1)
                self._call("search", lambda c: c.search(self.collection_name, data=[probe], anns_field=_VECTOR,
                                                        limit=1, search_params=self._dense_params, **args))
            if self.ranks_bm25:  # else the kit's postings rank BM25: building Milvus's index would only cost memory
                self._call("search", lambda c: c.search(self.collection_name, data=["warm"], anns_field=_SPARSE,
                                                        limit=1, search_params={"metric_type": "BM25"}, **args))
        return time.perf_counter() - start

    def close(self) -> None:
        """Close the client's connection (the store reconnects on next use)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client, self._ready = None, False


def _release(version: str) -> tuple[int, int] | None:
    """The (major, minor) release a server's version string names (``v2.3.5-lite`` -> ``(2, 3)``), or None."""
    found = re.search(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _grpc_status(exc: BaseException) -> str | None:
    """The gRPC status name an error carries (``DEADLINE_EXCEEDED``), from the error or what it wraps."""
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "code", None)
        if callable(code):
            try:
                status = code()
            except Exception:  # a code() that needs arguments is not gRPC's
                pass
            else:
                return str(getattr(status, "name", status))
        seen = seen.__cause__ or seen.__context__
    return None


def _hits(res: Any, channel: str, *, absolute: bool = False) -> list[Hit]:
    """Milvus search results (one query) as hits. Milvus Lite reports BM25 scores negated (smaller is better in its
    engine) where Milvus reports them positive; ``absolute`` gives both the same sign."""
    out: list[Hit] = []
    for h in res[0] if res else []:
        entity = h.get("entity") or {}
        score = float(h.get("distance", 0.0))
        out.append(Hit(chunk_id=str(h.get("id")), text=str(entity.get(_TEXT) or ""),
                       score=abs(score) if absolute else score, channel=channel,
                       metadata=dict(entity.get(_META) or {})))  # fmt: skip
    return out
