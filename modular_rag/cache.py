"""Persistent, bounded caches in SQLite.

* :class:`KVCache` - content-keyed: the key is a hash of everything that determines the value (model, messages and
  options for an LLM call; model, query and passage for a reranker score). Least recently used entries are evicted
  past ``max_entries``.
* :class:`SemanticCache` - answers by query similarity: a new query whose embedding is within ``threshold`` cosine
  of a cached query's, in the same scope (the flow's config and the run's filter), gets the cached answer, but
  only if both queries name the same distinctive tokens (codes, numbers, names): "E07" never answers "E12".

Both survive across runs (one file) and are safe to share between threads.

A flow's ``answer_cache`` puts a :class:`SemanticCache` in front of the flow: :func:`flow_answer_cache` opens it for
a flow's config, :func:`answer_cache_steps` gives the ``cache_lookup`` and ``cache_store`` steps that
:class:`~modular_rag.builder.FlowBuilder` wires around the flow.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from modular_rag.errors import ConfigError
from modular_rag.text import distinctive_tokens

if TYPE_CHECKING:
    from modular_rag.config import FlowConfig
    from modular_rag.providers import Providers

__all__ = [
    "KVCache",
    "SemanticCache",
    "content_key",
    "distinctive_tokens",
    "answer_namespace",
    "flow_answer_cache",
    "answer_cache_steps",
]


def content_key(*parts: Any) -> str:
    """A SHA-256 over the JSON of ``parts`` (sorted keys): equal inputs, equal key."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class _Store:
    def __init__(self, path: str | Path | None, table: str, columns: str) -> None:
        self.path = str(path) if path else ":memory:"
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
        self.table = table

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0])

    def _evict(self, max_entries: int) -> None:
        excess = int(self._db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]) - max_entries
        if excess > 0:
            self._db.execute(
                f"DELETE FROM {self.table} WHERE rowid IN (SELECT rowid FROM {self.table} ORDER BY used LIMIT ?)",
                (excess,),
            )


class KVCache(_Store):
    """A content-keyed cache of JSON values, bounded to ``max_entries`` (least recently used evicted).

    Args:
        path: SQLite file (created with its folder); ``None`` keeps it in memory.
        max_entries: Bound on stored entries.
    """

    def __init__(self, path: str | Path | None, max_entries: int = 10_000) -> None:
        super().__init__(path, "kv", "ns TEXT, key TEXT, value TEXT, used REAL, PRIMARY KEY (ns, key)")
        self.max_entries = max_entries

    def get(self, namespace: str, key: str) -> Any | None:
        """The cached value, or ``None``; a hit refreshes the entry's recency."""
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE ns=? AND key=?", (namespace, key)).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE kv SET used=? WHERE ns=? AND key=?", (time.time(), namespace, key))
        return json.loads(row[0])

    def put(self, namespace: str, key: str, value: Any) -> None:
        """Store a JSON-serialisable value, evicting the least recently used entries past the bound."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO kv VALUES (?, ?, ?, ?)", (namespace, key, json.dumps(value), time.time())
            )
            self._evict(self.max_entries)


class SemanticCache(_Store):
    """Answers keyed by query embedding: a query within ``threshold`` cosine of a cached one is a hit.

    Args:
        path: SQLite file; ``None`` keeps it in memory.
        threshold: Cosine similarity needed for a hit.
        max_entries: Bound on stored answers (least recently used evicted).
        namespace: Separates flows sharing a file (the flow's config hash).
    """

    def __init__(
        self, path: str | Path | None, *, threshold: float = 0.95, max_entries: int = 1000, namespace: str = ""
    ) -> None:
        super().__init__(path, "answers", "ns TEXT, query TEXT, vector BLOB, value TEXT, used REAL")
        self.threshold, self.max_entries, self.namespace = threshold, max_entries, namespace

    def _ns(self, scope: str) -> str:
        return f"{self.namespace}|{scope}" if scope else self.namespace

    def lookup(
        self, vector: np.ndarray, *, query: str | None = None, scope: str = ""
    ) -> tuple[dict[str, Any], str, float] | None:
        """``(cached value, cached query, similarity)`` of the closest cached query of the same scope at or above
        the threshold, and (when ``query`` is given) naming the same :func:`distinctive_tokens`.

        Args:
            vector: The new query's embedding.
            query: The new query's text (for the lexical guard).
            scope: What else the answer depends on (for example the run's metadata filter).
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, query, vector, value FROM answers WHERE ns=?", (self._ns(scope),)
            ).fetchall()
            if not rows:
                return None
            matrix = np.stack([np.frombuffer(r[2], dtype=np.float32) for r in rows])
            sims = matrix @ np.asarray(vector, dtype=np.float32)
            wanted = distinctive_tokens(query) if query is not None else None
            for i in np.argsort(-sims).tolist():
                if float(sims[i]) < self.threshold:
                    return None
                if wanted is None or distinctive_tokens(rows[i][1]) == wanted:
                    self._db.execute("UPDATE answers SET used=? WHERE rowid=?", (time.time(), rows[i][0]))
                    return json.loads(rows[i][3]), rows[i][1], float(sims[i])
            return None

    def store(self, query: str, vector: np.ndarray, value: dict[str, Any], *, scope: str = "") -> None:
        """Cache an answer for a query (in a scope, see :meth:`lookup`)."""
        blob = np.asarray(vector, dtype=np.float32).tobytes()
        with self._lock:
            self._db.execute(
                "INSERT INTO answers VALUES (?, ?, ?, ?, ?)",
                (self._ns(scope), query, blob, json.dumps(value), time.time()),
            )
            self._evict(self.max_entries)


def answer_namespace(config: FlowConfig) -> str:
    """The namespace a flow's cached answers are kept under: a hash of its config without ``answer_cache`` and
    ``name``; a config holding Python objects is scoped to this process's objects."""
    try:
        data = config.to_dict()
        namespace = content_key({k: v for k, v in data.items() if k not in ("answer_cache", "name")})
    except ConfigError:  # a Python object in the config: scope the cache to this process's objects
        namespace = f"objects:{id(config)}"
    return namespace


def flow_answer_cache(config: FlowConfig) -> SemanticCache:
    """The :class:`SemanticCache` a flow's ``answer_cache`` settings name, in the flow's :func:`answer_namespace`."""
    cfg = config.answer_cache
    assert cfg is not None
    namespace = answer_namespace(config)
    return SemanticCache(cfg.path, threshold=cfg.threshold, max_entries=cfg.max_entries, namespace=namespace)


def answer_cache_steps(
    cache: SemanticCache, env: Providers
) -> tuple[Callable[[Mapping[str, Any]], dict[str, Any]], Callable[[Mapping[str, Any]], dict[str, Any]]]:
    """``(lookup, store)``: the answer cache's steps around a flow, queries embedded with ``env``'s encoder.

    ``lookup`` answers from ``cache`` on a hit (``answer`` and ``evidence``, counted as a cache hit and noted in the
    trace), else updates nothing; ``store`` caches the flow's answer unless it was refused. Both leave follow-up
    questions (a run with conversation history) alone, and scope entries by the run's metadata filter.
    """
    from modular_rag.state import history  # here, so importing the caches stays light

    def lookup(state: Mapping[str, Any]) -> dict[str, Any]:
        from modular_rag.trace import note, record

        if history(state):  # a follow-up means what its conversation makes it mean
            return {}
        query = str(state.get("query", ""))
        found = cache.lookup(env.encoder.encode_query(query), query=query, scope=content_key(state.get("filter")))
        if found is None:
            return {}
        value, query, similarity = found
        record(cache_hits=1)
        note(f"cached answer of {query!r} (cosine {similarity:.3f})")
        return {"answer": value["answer"], "evidence": value.get("evidence", [])}

    def store(state: Mapping[str, Any]) -> dict[str, Any]:
        answer = state.get("answer")
        if answer and not answer.get("refused") and not history(state):
            query = str(state.get("query", ""))
            cache.store(
                query,
                env.encoder.encode_query(query),
                {"answer": answer, "evidence": list(state.get("evidence") or [])},
                scope=content_key(state.get("filter")),
            )
        return {}

    return lookup, store
