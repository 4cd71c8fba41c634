"""The connection half of :class:`~modular_rag.milvus.MilvusStore`: the lazy client (Milvus Lite served on loopback
or a Milvus server), the server's version and what it can rank (BM25 in Milvus since 2.5, else the kit's postings),
requests retried on a transient status, flushes, and the collection adopted or created with the store's schema."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from modular_rag.errors import ConfigError, MissingDependencyError, ProviderError
from modular_rag.milvus_terms import lite_analyzer, milvus_analyzer
from modular_rag.milvus_wire import (
    ID,
    META,
    SPARSE,
    TEXT,
    VECTOR,
    collection_schema,
    grpc_status,
    pymilvus_module,
    release,
)

__all__ = ["BM25_SINCE", "Consistency", "MilvusConnection"]

log = logging.getLogger("modular_rag.milvus")  # the store's logger, as before the split

BM25_SINCE = (2, 5)
"""The first Milvus release with the BM25 function (and the analyzers and sparse vectors it needs)."""

Consistency = Literal["Strong", "Bounded", "Session", "Eventually"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
# gRPC status codes a busy or restarting server answers with; every request of the store is idempotent (upserts and
# deletes by primary key, reads), so it is sent again, after a pause, this many times before the error is raised
_TRANSIENT = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE", "RESOURCE_EXHAUSTED"})
_RETRIES, _BACKOFF_S = 2, 2.0
# pymilvus pings the server every 10 s even between requests; a gRPC server's default policy (Milvus Lite's) allows
# one ping per 5 minutes without data and answers the third early one with GOAWAY "too_many_pings", which can end a
# session mid-run. The kit's client pings every 6 minutes: within that policy, and still finds a dead connection.
_KEEPALIVE = {"grpc.keepalive_time_ms": 360_000, "grpc.keepalive_timeout_ms": 20_000}
# a Milvus standalone that has just restarted refuses writes and flushes with "node not match" (or "node not found")
# until its coordinator hands the previous data node's channels to the new one: minutes on Milvus 2.3.5 with a large
# collection. Such a request is sent again every _HANDOVER_POLL_S until _HANDOVER_WAIT_S have passed
_HANDOVER = re.compile(r"node not (match|found)", re.IGNORECASE)
_HANDOVER_WAIT_S, _HANDOVER_POLL_S = 600.0, 10.0


# ------------------------------------------------------------------------------------------------------------- store


class MilvusConnection:
    """A Milvus collection's client, server facts and schema; :class:`~modular_rag.milvus.MilvusStore` adds the
    writes and reads (its docstring lists the arguments)."""

    def __init__(
        self,
        *,
        uri: str,
        collection: str = "modular_rag",
        token: str | None = None,
        analyzer: Mapping[str, Any] | None = None,
        k1: float = 1.2,
        b: float = 0.75,
        consistency: Consistency = "Session",
        timeout_s: float = 30.0,
        bm25: Literal["auto", "milvus", "kit"] = "auto",
        search_params: Mapping[str, Any] | None = None,
    ) -> None:
        if not _NAME.match(collection):
            raise ConfigError(
                "providers.vectorstore.collection",
                f"{collection!r} is not a Milvus collection name: "
                "letters, digits and underscores, not starting with a digit, at most 255",
            )
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
        self._written = 0  # rows this process upserted since it last flushed
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
        pymilvus = pymilvus_module()
        local = not re.match(r"^[a-z]+://", self.uri)
        if local:
            if not self.uri.endswith(".db"):
                raise ConfigError(
                    "providers.vectorstore.uri",
                    f"{self.uri!r} is neither a server address "
                    "(http://host:19530) nor a Milvus Lite file (a path ending in .db)",
                )
            Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
        options = {} if local else {"grpc_options": dict(_KEEPALIVE)}
        for attempt in range(_RETRIES + 1):
            try:
                return pymilvus.MilvusClient(uri=self.uri, token=self.token or "", timeout=self.timeout_s, **options)
            except Exception as exc:  # a server busy or restarting answers UNAVAILABLE: a retry, not the run
                if local or attempt == _RETRIES or grpc_status(exc) not in _TRANSIENT:
                    raise ProviderError(f"cannot reach Milvus at {self.uri}: {exc}; {_connect_hint(local)}") from exc
                log.warning(
                    "connecting to Milvus at %s: %s; trying again (%d of %d)", self.uri, exc, attempt + 1, _RETRIES
                )
                time.sleep(_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def server_version(self) -> str:
        """The server's version string (``milvus_lite-3.2.2`` for Milvus Lite, ``v2.3.5-lite`` for the PyPI
        ``milvus`` package's standalone server, ``v2.5.4`` for a Milvus release)."""
        return str(self._call("get_server_version", lambda c: c.get_server_version(timeout=self.timeout_s)))

    def _ask_version(self) -> None:
        if self._lite is None:
            text = self.server_version()
            self._lite = text.startswith("milvus_lite")
            self._version = None if self._lite else release(text)

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
        why = (
            f"the server is Milvus {self.server_version()}, and Milvus computes BM25 only from 2.5"
            if not self.bm25_function
            else "the collection was created without a BM25 field (on a Milvus before "
            "2.5); index into a new collection to rank BM25 in Milvus"
        )
        raise ConfigError(
            "providers.vectorstore.bm25",
            f"bm25: milvus cannot rank in {self.describe()}: {why}; use "
            "bm25: kit (or auto), which ranks BM25 over the kit's postings in the catalog folder while "
            "dense search stays in Milvus",
        )

    def flush(self, timeout_s: float | None = None) -> None:
        """Seal the rows written so far into a segment, waiting up to ``timeout_s`` (default: the store's timeout).

        Milvus Lite searches sealed segments through cached indexes but rebuilds the BM25 index of unsealed rows on
        every search (about 2 s a query at 5,000 rows), so on Milvus Lite the store flushes by itself before it next
        reads after writing: an indexing run ends in one flush, one segment (Milvus Lite's BM25 statistics are per
        segment). On Milvus the store never flushes by itself: Milvus seals segments on its own."""
        with self._lock:
            self._unflushed, self._written = False, 0
            if self._exists():
                wait = self.timeout_s if timeout_s is None else timeout_s
                self._call("flush", lambda c: c.flush(self.collection_name, timeout=wait))

    def _settle(self) -> None:
        """Flush this process's writes before a read, on Milvus Lite (see :meth:`flush`)."""
        if self._unflushed:
            self.flush()

    def _call(self, what: str, fn: Any) -> Any:
        """``fn(client)``, sent again when the server answers with a transient gRPC status (a deadline passed while
        it was busy, unavailable while it restarts), up to ``_RETRIES`` times, or, for up to ``_HANDOVER_WAIT_S``,
        while a restarted server has not yet taken over its data channels ("node not match"); any other failure,
        or the last, is a :class:`ProviderError` naming the store and the request."""
        attempt, handover_until = 0, None
        while True:
            try:
                return fn(self.client)
            except (ConfigError, ProviderError, MissingDependencyError):
                raise
            except Exception as exc:  # pymilvus raises MilvusException and grpc errors; say where and what
                if _HANDOVER.search(str(exc)):
                    handover_until = handover_until or time.monotonic() + _HANDOVER_WAIT_S
                    if time.monotonic() >= handover_until:
                        raise ProviderError(
                            f"{self.describe()}: {what} failed: {exc} (still refused after {_HANDOVER_WAIT_S:.0f} s: "
                            "the server has not taken over its data channels since it restarted; check its logs)"
                        ) from exc
                    log.warning(
                        "%s: %s refused while the restarted server takes over its data channels (%s); waiting",
                        self.describe(),
                        what,
                        exc,
                    )
                    time.sleep(_HANDOVER_POLL_S)
                    continue
                status = grpc_status(exc)
                if status not in _TRANSIENT or attempt == _RETRIES:
                    raise ProviderError(f"{self.describe()}: {what} failed: {exc}") from exc
                attempt += 1
                log.warning(
                    "%s: %s answered %s; sending it again (%d of %d)", self.describe(), what, status, attempt, _RETRIES
                )
                time.sleep(_BACKOFF_S * attempt)

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
        missing = [n for n in (ID, TEXT, META, VECTOR) if n not in fields]
        if missing:
            raise ProviderError(
                f"{self.describe()}: the collection exists but was not made by the kit (no "
                f"{', '.join(missing)} field); name another collection"
            )
        params = fields[VECTOR].get("params", {})
        self._dim = int(params["dim"]) if "dim" in params else None
        analyzer = fields[TEXT].get("params", {}).get("analyzer_params")
        self._applied = json.loads(analyzer) if isinstance(analyzer, str) else dict(analyzer or {})
        self._sparse_field = SPARSE in fields
        self._call("load_collection", lambda c: c.load_collection(self.collection_name))
        self._ready = True

    def _create(self, dim: int) -> None:
        pymilvus = pymilvus_module()
        if self.bm25 == "milvus" and not self.bm25_function:
            self._refuse_bm25()
        bm25 = self.bm25_function  # the field is made wherever Milvus can fill it, so bm25: milvus can rank later
        analyzer = dict(self.analyzer)
        if self.lite:
            analyzer, dropped = lite_analyzer(analyzer)
            if dropped and self.ranks_bm25:  # bm25: milvus asked for Milvus's own ranking; auto ranks in the kit
                log.warning(
                    "Milvus Lite applies only the tokenizer, lower-casing and stop words; %s created "
                    "without %s (BM25 there matches unstemmed words)",
                    self.describe(),
                    ", ".join(dropped),
                )
        schema, index = collection_schema(pymilvus, dim, analyzer, bm25=bm25, k1=self.k1, b=self.b)
        try:
            self.client.create_collection(
                self.collection_name, schema=schema, consistency_level=self.consistency, timeout=self.timeout_s
            )
        except Exception as exc:
            # another process may have created it first; anything else is a real failure
            if not self._call("has_collection", lambda c: c.has_collection(self.collection_name)):
                raise ProviderError(f"{self.describe()}: creating the collection failed: {exc}") from exc
        else:
            # sync=False: the collection is empty, and load_collection (in _adopt) waits for its indexes anyway
            self._call(
                "create_index",
                lambda c: c.create_index(self.collection_name, index, sync=False, timeout=self.timeout_s),
            )
        self._adopt()

    def _ensure(self, dim: int) -> None:
        with self._lock:
            if not self._exists():
                self._create(dim)
        if self._dim is not None and self._dim != dim:
            raise ProviderError(
                f"{self.describe()} holds {self._dim}-dim vectors, these are {dim}-dim (another "
                "embedder?): index into another collection, or clear this one first"
            )


def _connect_hint(local: bool) -> str:
    """What to do when Milvus cannot be reached: a Milvus Lite file held by another process, or no server."""
    if local:
        return (
            "a Milvus Lite file serves one process: is it open in another? Share an index through "
            "`milvus-lite server --data-dir DIR --host 127.0.0.1 --port 19530` and uri: http://..."
        )
    return (
        "start a server (`milvus-server --data DIR --proxy-port 19530`, the milvus-server extra; "
        "`milvus-lite server --data-dir DIR --host 127.0.0.1 --port 19530`; or a Milvus; one just "
        "started answers after some seconds) or fix providers.vectorstore.uri"
    )
