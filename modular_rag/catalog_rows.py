"""The catalog's SQLite schema and its version, the metadata types a field may hold, and a chunk as the catalog
stores it (with its row decoder and the batching of ids into IN clauses)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SCHEMA", "SCHEMA_VERSION", "FIELD_TYPES", "IN_BATCH", "StoredChunk", "stored_chunk", "in_batches"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (pos INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, doc_id TEXT NOT NULL,
                                   text TEXT NOT NULL, meta TEXT NOT NULL, length INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks (doc_id);
CREATE TABLE IF NOT EXISTS terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stats (key TEXT PRIMARY KEY, value REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fields (name TEXT NOT NULL, type TEXT NOT NULL, n INTEGER NOT NULL,
                                   PRIMARY KEY (name, type)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS anchors (anchor TEXT NOT NULL, pos INTEGER NOT NULL, rank INTEGER NOT NULL,
                                    PRIMARY KEY (anchor, pos)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS anchors_pos ON anchors (pos);
CREATE TABLE IF NOT EXISTS mentions (pos INTEGER NOT NULL, start INTEGER NOT NULL, anchor TEXT NOT NULL,
                                     outer INTEGER NOT NULL, PRIMARY KEY (pos, start, anchor)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mentions_anchor ON mentions (anchor);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sentences (pos INTEGER PRIMARY KEY, texts TEXT NOT NULL, dim INTEGER NOT NULL,
                                      vectors BLOB NOT NULL);
"""

SCHEMA_VERSION = 3
"""The catalog's schema (SQLite ``user_version``); an earlier one is migrated on open (version 3 added the
``sentences`` table: a catalog of version 2 gets it empty, and its chunks' sentence vectors at the next ``index``
run)."""

FIELD_TYPES: dict[str, type] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list,
    "dict": dict,
    "NoneType": type(None),
}

IN_BATCH = 900
"""Ids per ``IN (...)`` clause: below SQLite's default limit of 999 variables."""


@dataclass(frozen=True)
class StoredChunk:
    """A chunk as the catalog holds it."""

    pos: int
    id: str
    doc_id: str
    text: str
    metadata: dict[str, Any]


def stored_chunk(row: Sequence[Any]) -> StoredChunk:
    """A ``chunks`` row (``pos, id, doc_id, text, meta``) as a :class:`StoredChunk`."""
    return StoredChunk(int(row[0]), str(row[1]), str(row[2]), str(row[3]), json.loads(row[4]))


def in_batches(values: Sequence[Any]) -> Iterator[list[Any]]:
    """``values`` in lists of at most :data:`IN_BATCH`, one ``IN (...)`` clause each."""
    for i in range(0, len(values), IN_BATCH):
        yield list(values[i : i + IN_BATCH])
