"""The catalog: what a question needs from the corpus besides vectors, read by key, never loaded whole.

One SQLite file (WAL mode, so several processes read while one writes) beside the index holds:

* ``chunks``: every chunk's position (the row number the BM25 postings use), id, document id, text and metadata
  (JSON), once. A reader asks for the chunks of some ids or positions; nothing enumerates them at query time.
* ``terms``: each analysed term's document frequency, and ``stats``: the number of chunks and their total length in
  terms, so any process reads BM25's IDF and average length without the corpus or the postings.
* ``fields``: the metadata fields the chunks have, with each value type's count (what a filter may name).
* ``anchors`` and ``mentions``: the link table's rows (:mod:`modular_rag.links`): what each chunk defines and which
  anchors its text mentions, computed for each chunk when it is added, removed with it.
* ``sentences``: each chunk's content sentences and their vectors (float32 rows, one blob per chunk), written in
  the transaction that adds the chunk and removed with it (:mod:`modular_rag.sentences`), so a question embeds only
  itself; the setting ``sentence_encoder`` names the encoder that made them.

Writes happen in transactions; a reader sees the state before or after a write, never half of it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from modular_rag.catalog_rows import FIELD_TYPES, SCHEMA, SCHEMA_VERSION, StoredChunk, in_batches, stored_chunk

__all__ = ["Catalog", "StoredChunk"]


class Catalog:
    """Chunks, term statistics, metadata fields and link-table rows in one SQLite file.

    Args:
        path: The file; ``None`` keeps the catalog in memory (one process).
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(
            str(self.path) if self.path else ":memory:", check_same_thread=False, isolation_level=None, timeout=60.0
        )
        self._lock = threading.RLock()
        with self._lock:
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
            self._db.executescript(SCHEMA)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _migrate(self) -> None:
        """Bring a catalog of an earlier schema up to this one: version 1 kept one row per anchor a chunk mentions
        (no word offset, no outermost flag); its mention rows are dropped and the chunks marked for a scan
        (:meth:`pending_scan`)."""
        columns = [r[1] for r in self._db.execute("PRAGMA table_info(mentions)").fetchall()]
        if columns and not {"start", "outer"} <= set(columns):
            self._db.execute("DROP TABLE mentions")
            self._db.executescript(SCHEMA)
            self._db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('scan_mentions', '1')")

    def pending_scan(self) -> bool:
        """Whether the chunks' mention rows must be scanned again (a catalog migrated from an earlier schema)."""
        return self.setting("scan_mentions") is not None

    def __repr__(self) -> str:
        return f"Catalog({str(self.path) if self.path else ':memory:'})"

    # ------------------------------------------------------------------------------------------------------ writes

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: other writers wait, readers see the state before it)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add_chunks(
        self,
        chunks: Sequence[tuple[str, str, str, Mapping[str, Any]]],
        lengths: Sequence[int],
        terms: Iterable[Iterable[str]],
        db: sqlite3.Connection,
    ) -> list[int]:
        """Add chunks ``(id, doc_id, text, metadata)`` with their lengths in terms and their analysed term sets, in
        the open transaction ``db``; their document frequencies, the statistics and the fields follow. Returns the
        positions they were given (after every position in use). Ids must not be stored yet."""
        start = self.next_position(db)
        rows = [
            (start + i, cid, doc, text, json.dumps(dict(meta), ensure_ascii=False), n)
            for i, ((cid, doc, text, meta), n) in enumerate(zip(chunks, lengths, strict=True))
        ]
        docs = list(dict.fromkeys(doc for _, doc, *_ in chunks))
        known = {r[0] for r in self._in(db, "SELECT DISTINCT doc_id FROM chunks WHERE doc_id IN ({})", docs)}
        db.executemany("INSERT INTO chunks (pos, id, doc_id, text, meta, length) VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._bump(db, "documents", len(set(docs) - known))
        df: Counter[str] = Counter()
        for found in terms:
            df.update(set(found))
        db.executemany(
            "INSERT INTO terms (term, df) VALUES (?, ?) ON CONFLICT (term) DO UPDATE SET df = df + excluded.df",
            df.items(),
        )
        self._bump(db, "chunks", len(rows))
        self._bump(db, "length", sum(lengths))
        db.execute(
            "INSERT INTO stats (key, value) VALUES ('next', ?) ON CONFLICT (key) DO UPDATE SET value = "
            "MAX(value, excluded.value)",
            (start + len(rows),),
        )
        self._count_fields(db, [meta for *_, meta in chunks], +1)
        return [r[0] for r in rows]

    def remove_chunks(self, positions: Sequence[int], terms: Iterable[Iterable[str]], db: sqlite3.Connection) -> None:
        """Remove the chunks at ``positions`` (with their analysed term sets, to take their document frequencies
        back) and their link-table rows, in the open transaction ``db``."""
        if not positions:
            return
        gone = self.at(positions, db=db)
        df: Counter[str] = Counter()
        for found in terms:
            df.update(set(found))
        db.executemany("UPDATE terms SET df = df - ? WHERE term = ?", [(n, t) for t, n in df.items()])
        db.execute("DELETE FROM terms WHERE df <= 0")
        lengths = sum(int(r[0]) for r in self._in(db, "SELECT length FROM chunks WHERE pos IN ({})", positions))
        self._bump(db, "chunks", -len(gone))
        self._bump(db, "length", -lengths)
        self._count_fields(db, [c.metadata for c in gone], -1)
        for part in in_batches(positions):
            marks = ",".join("?" * len(part))
            db.execute(f"DELETE FROM chunks WHERE pos IN ({marks})", part)
            db.execute(f"DELETE FROM anchors WHERE pos IN ({marks})", part)
            db.execute(f"DELETE FROM mentions WHERE pos IN ({marks})", part)
            db.execute(f"DELETE FROM sentences WHERE pos IN ({marks})", part)
        docs = list({c.doc_id for c in gone})
        still = {r[0] for r in self._in(db, "SELECT DISTINCT doc_id FROM chunks WHERE doc_id IN ({})", docs)}
        self._bump(db, "documents", -len(set(docs) - still))

    @staticmethod
    def _bump(db: sqlite3.Connection, key: str, by: float) -> None:
        """Add to a statistic (and to ``generation``, which every write changes)."""
        db.executemany(
            "INSERT INTO stats (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = value + "
            "excluded.value",
            [(key, by), ("generation", 1)],
        )

    @staticmethod
    def _count_fields(db: sqlite3.Connection, metas: Sequence[Mapping[str, Any]], sign: int) -> None:
        seen: Counter[tuple[str, str]] = Counter((k, type(v).__name__) for m in metas for k, v in m.items())
        db.executemany(
            "INSERT INTO fields (name, type, n) VALUES (?, ?, ?) ON CONFLICT (name, type) DO UPDATE SET "
            "n = n + excluded.n",
            [(k, t, sign * n) for (k, t), n in seen.items()],
        )
        db.execute("DELETE FROM fields WHERE n <= 0")

    def set_anchors(self, rows: Iterable[tuple[str, int, int]], db: sqlite3.Connection) -> None:
        """Record ``(anchor, position, rank)``: what a chunk defines."""
        db.executemany("INSERT OR REPLACE INTO anchors (anchor, pos, rank) VALUES (?, ?, ?)", rows)

    def set_mentions(self, rows: Iterable[tuple[int, int, str, bool]], db: sqlite3.Connection) -> None:
        """Record ``(position, word offset, anchor, outermost)``: an anchor a chunk's text contains at that word,
        and whether no longer anchor there covers it."""
        db.executemany("INSERT OR IGNORE INTO mentions (pos, start, anchor, outer) VALUES (?, ?, ?, ?)", rows)

    def set_sentences(self, rows: Iterable[tuple[int, Sequence[str], np.ndarray]], db: sqlite3.Connection) -> None:
        """Record ``(position, sentences, vectors)``: a chunk's content sentences and their vectors (one float32 row
        each), replacing what the chunk had."""
        db.executemany(
            "INSERT OR REPLACE INTO sentences (pos, texts, dim, vectors) VALUES (?, ?, ?, ?)",
            [
                (
                    int(p),
                    json.dumps(list(s), ensure_ascii=False),
                    int(v.shape[1]) if v.ndim == 2 else 0,
                    np.ascontiguousarray(v, dtype=np.float32).tobytes(),
                )
                for p, s, v in rows
            ],
        )

    def clear_sentences(self, db: sqlite3.Connection) -> None:
        """Forget every chunk's sentence vectors (another encoder's)."""
        db.execute("DELETE FROM sentences")

    def scanned(self, db: sqlite3.Connection) -> None:
        """Mark the mention rows as current again (after a scan of every chunk)."""
        db.execute("DELETE FROM settings WHERE key = 'scan_mentions'")

    def clear(self) -> None:
        """Forget everything."""
        with self.transaction() as db:
            for table in ("chunks", "terms", "stats", "fields", "anchors", "mentions", "settings", "sentences"):
                db.execute(f"DELETE FROM {table}")

    def setting(self, key: str) -> str | None:
        """A setting the catalog was written with (the analyzer that made its term statistics, say)."""
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_setting(self, key: str, value: str, db: sqlite3.Connection) -> None:
        """Record a setting."""
        db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))

    def recount_terms(
        self, lengths: Mapping[int, int], terms: Iterable[Iterable[str]], db: sqlite3.Connection, *, first: bool
    ) -> None:
        """Replace the term statistics (a new analyzer): with ``first``, clear them; then count the given chunks'
        term sets and lengths (by position) in."""
        if first:
            db.execute("DELETE FROM terms")
            db.execute("DELETE FROM stats WHERE key = 'length'")
        df: Counter[str] = Counter()
        for found in terms:
            df.update(set(found))
        db.executemany(
            "INSERT INTO terms (term, df) VALUES (?, ?) ON CONFLICT (term) DO UPDATE SET df = df + excluded.df",
            df.items(),
        )
        db.executemany("UPDATE chunks SET length = ? WHERE pos = ?", [(n, p) for p, n in lengths.items()])
        self._bump(db, "length", sum(lengths.values()))

    # ------------------------------------------------------------------------------------------------------- reads

    def _read(self, sql: str, args: Sequence[Any] = (), db: sqlite3.Connection | None = None) -> list[Any]:
        with self._lock:
            return (db or self._db).execute(sql, args).fetchall()

    def _in(self, db: sqlite3.Connection | None, sql: str, values: Sequence[Any]) -> list[Any]:
        """Rows of ``sql`` (with one ``IN ({})``) over ``values``, in parts SQLite accepts."""
        out: list[Any] = []
        for part in in_batches(values):
            out.extend(self._read(sql.format(",".join("?" * len(part))), part, db))
        return out

    def count(self) -> int:
        """Chunks held: the statistic every add and removal keeps in its own transaction (counting the table instead
        reads all of it: 0.7 s at 1M chunks, on every worker's first question); counted when there is none."""
        got = self._read("SELECT value FROM stats WHERE key = 'chunks'")
        return int(got[0][0]) if got else int(self._read("SELECT COUNT(*) FROM chunks")[0][0])

    def next_position(self, db: sqlite3.Connection | None = None) -> int:
        """The position the next added chunk gets. Positions are never reused: the highest ever given is kept in the
        statistics (``next``), so removing the newest chunks does not hand their positions out again (the postings
        hold tombstones there)."""
        got = self._read(
            "SELECT MAX(COALESCE((SELECT MAX(pos) + 1 FROM chunks), 0), "
            "COALESCE((SELECT value FROM stats WHERE key = 'next'), 0))",
            db=db,
        )
        return int(got[0][0])

    def stats(self) -> tuple[int, float]:
        """``(chunks, total length in terms)`` as BM25 sees the corpus."""
        got = self.stat_values()
        return int(got.get("chunks", 0)), float(got.get("length", 0.0))

    def stat_values(self) -> dict[str, float]:
        """Every statistic: ``chunks``, ``documents``, ``length``, ``generation`` (changed by every write), ``next``
        (the next position), and what others keep there (``max_words``: the longest anchor's words)."""
        return {str(k): float(v) for k, v in self._read("SELECT key, value FROM stats")}

    def terms_from(self, prefix: str, limit: int = 200) -> list[str]:
        """Indexed terms that start with ``prefix`` (a range scan of the terms' key), at most ``limit``."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else ""
        rows = self._read(
            "SELECT term FROM terms WHERE term >= ? AND term < ? AND df > 0 LIMIT ?", (prefix, upper, limit)
        )
        return [str(r[0]) for r in rows]

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """The document frequency of each term (0 for a term no chunk has)."""
        found = dict(self._in(None, "SELECT term, df FROM terms WHERE term IN ({})", list(dict.fromkeys(terms))))
        return {t: int(found.get(t, 0)) for t in terms}

    def get(self, ids: Sequence[str], db: sqlite3.Connection | None = None) -> dict[str, StoredChunk]:
        """The stored chunks of these ids (ids not held are left out)."""
        rows = self._in(db, "SELECT pos, id, doc_id, text, meta FROM chunks WHERE id IN ({})", list(ids))
        return {r[1]: stored_chunk(r) for r in rows}

    def at(
        self, positions: Sequence[int], db: sqlite3.Connection | None = None, *, metadata: bool = True
    ) -> list[StoredChunk]:
        """The chunks at these positions, in the order given (positions not held are left out); with
        ``metadata=False`` their metadata is left empty (not decoded: a scan of texts needs none)."""
        columns = "pos, id, doc_id, text, meta" if metadata else "pos, id, doc_id, text"
        rows = self._in(db, f"SELECT {columns} FROM chunks WHERE pos IN ({{}})", [int(p) for p in positions])
        make = stored_chunk if metadata else lambda r: StoredChunk(int(r[0]), str(r[1]), str(r[2]), str(r[3]), {})
        by = {int(r[0]): make(r) for r in rows}
        return [by[int(p)] for p in positions if int(p) in by]

    def ids_at(self, positions: Sequence[int]) -> dict[int, str]:
        """The chunk id at each held position (no texts read: what a ranking needs before it keeps its best)."""
        rows = self._in(None, "SELECT pos, id FROM chunks WHERE pos IN ({})", [int(p) for p in positions])
        return {int(pos): str(cid) for pos, cid in rows}

    def positions(self, ids: Sequence[str], db: sqlite3.Connection | None = None) -> dict[str, int]:
        """The position of each held id."""
        return {r[0]: int(r[1]) for r in self._in(db, "SELECT id, pos FROM chunks WHERE id IN ({})", list(ids))}

    def ids(self) -> Iterator[str]:
        """Every held id, in position order (for a sync or a consistency check; never at query time)."""
        last = -1
        while True:
            rows = self._read("SELECT pos, id FROM chunks WHERE pos > ? ORDER BY pos LIMIT 10000", (last,))
            if not rows:
                return
            yield from (r[1] for r in rows)
            last = int(rows[-1][0])

    def scan(self, batch: int = 2000, *, start: int = 0) -> Iterator[list[StoredChunk]]:
        """Every chunk from position ``start`` on, in position order, in batches (for what derives from the chunks:
        postings, a filter's positions; never at query time)."""
        last = start - 1
        while True:
            rows = self._read(
                "SELECT pos, id, doc_id, text, meta FROM chunks WHERE pos > ? ORDER BY pos LIMIT ?", (last, batch)
            )
            if not rows:
                return
            yield [stored_chunk(r) for r in rows]
            last = int(rows[-1][0])

    def sentences_of(self, ids: Sequence[str]) -> dict[str, tuple[list[str], np.ndarray]]:
        """The stored sentences and vectors of these chunk ids (ids without them are left out)."""
        out: dict[str, tuple[list[str], np.ndarray]] = {}
        for cid, texts, dim, blob in self._in(
            None,
            "SELECT c.id, s.texts, s.dim, s.vectors FROM chunks c JOIN sentences s ON s.pos = c.pos WHERE c.id IN ({})",
            list(ids),
        ):
            vectors = np.frombuffer(blob, dtype=np.float32)
            out[str(cid)] = (json.loads(texts), vectors.reshape(-1, int(dim)) if dim else vectors.reshape(0, 0))
        return out

    def without_sentences(self, limit: int) -> list[StoredChunk]:
        """Up to ``limit`` chunks that have no stored sentences, in position order (for a backfill; never at query
        time)."""
        rows = self._read(
            "SELECT c.pos, c.id, c.doc_id, c.text, c.meta FROM chunks c LEFT JOIN sentences s ON "
            "s.pos = c.pos WHERE s.pos IS NULL ORDER BY c.pos LIMIT ?",
            (limit,),
        )
        return [stored_chunk(r) for r in rows]

    def metadata_fields(self) -> dict[str, set[type]]:
        """The metadata fields the chunks have, with the value types seen."""
        out: dict[str, set[type]] = {}
        for name, kind, _ in self._read("SELECT name, type, n FROM fields"):
            out.setdefault(name, set()).add(FIELD_TYPES.get(kind, str))
        return out

    def field_values(self, name: str, limit: int) -> set[Any]:
        """Up to ``limit`` distinct scalar values of a metadata field (a scan of the metadata; for filter
        validation, cached by its caller)."""
        rows = self._read(
            "SELECT DISTINCT json_extract(meta, ?) FROM chunks WHERE json_type(meta, ?) IN "
            "('text', 'integer', 'real', 'true', 'false') LIMIT ?",
            (f'$."{name}"', f'$."{name}"', limit),
        )
        out: set[Any] = set()
        for (value,) in rows:
            out.add(value)
        kinds = self.metadata_fields().get(name, set())
        if bool in kinds and not kinds - {bool}:
            out = {bool(v) for v in out}
        return out

    def ids_by_field(self, name: str) -> Iterator[tuple[str, str]]:
        """Every chunk's id with a metadata field's value as text ("" when it has none), in position order (for a
        sync; never at query time)."""
        last = -1
        while True:
            rows = self._read(
                "SELECT pos, id, COALESCE(json_extract(meta, ?), '') FROM chunks WHERE pos > ? ORDER BY "
                "pos LIMIT 10000",
                (f'$."{name}"', last),
            )
            if not rows:
                return
            yield from ((r[1], str(r[2])) for r in rows)
            last = int(rows[-1][0])

    def anchors_of(self, positions: Sequence[int], db: sqlite3.Connection | None = None) -> dict[int, dict[str, int]]:
        """What each chunk defines: position -> {anchor: rank}."""
        out: dict[int, dict[str, int]] = {}
        for anchor, pos, rank in self._in(
            db, "SELECT anchor, pos, rank FROM anchors WHERE pos IN ({})", [int(p) for p in positions]
        ):
            out.setdefault(int(pos), {})[anchor] = int(rank)
        return out

    def definers(
        self, anchors: Sequence[str], db: sqlite3.Connection | None = None
    ) -> dict[str, list[tuple[int, int, str]]]:
        """The chunks that define each anchor: anchor -> [(position, rank, document id)]."""
        out: dict[str, list[tuple[int, int, str]]] = {}
        for anchor, pos, rank, doc in self._in(
            db,
            "SELECT a.anchor, a.pos, a.rank, c.doc_id FROM anchors a JOIN "
            "chunks c ON c.pos = a.pos WHERE a.anchor IN ({})",
            list(anchors),
        ):
            out.setdefault(anchor, []).append((int(pos), int(rank), str(doc)))
        return out

    def documents_of(self, positions: Sequence[int], db: sqlite3.Connection | None = None) -> dict[int, str]:
        """The document id of each position held."""
        rows = self._in(db, "SELECT pos, doc_id FROM chunks WHERE pos IN ({})", [int(p) for p in positions])
        return {int(p): str(d) for p, d in rows}

    def delete_mentions(self, positions: Sequence[int], db: sqlite3.Connection) -> None:
        """Forget what these chunks mention (before they are scanned again)."""
        for part in in_batches([int(p) for p in positions]):
            db.execute(f"DELETE FROM mentions WHERE pos IN ({','.join('?' * len(part))})", part)

    def mentioned_by(
        self, positions: Sequence[int], db: sqlite3.Connection | None = None
    ) -> dict[int, list[tuple[int, str]]]:
        """The anchors each chunk contains: position -> [(word offset, anchor)], by offset."""
        out: dict[int, list[tuple[int, str]]] = {}
        for pos, start, anchor in self._in(
            db, "SELECT pos, start, anchor FROM mentions WHERE pos IN ({})", [int(p) for p in positions]
        ):
            out.setdefault(int(pos), []).append((int(start), str(anchor)))
        return {p: sorted(found) for p, found in out.items()}

    def mention_counts(self, anchors: Sequence[str], db: sqlite3.Connection | None = None) -> dict[str, int]:
        """How many chunks contain each anchor outside a longer one (what a scan of their texts would mention)."""
        rows = self._in(
            db,
            "SELECT anchor, COUNT(DISTINCT pos) FROM mentions WHERE outer = 1 AND anchor IN ({}) GROUP BY anchor",
            list(anchors),
        )
        return {a: int(rows_n) for a, rows_n in rows}

    def anchor_count(self) -> int:
        """How many distinct anchors the chunks define."""
        return int(self._read("SELECT COUNT(DISTINCT anchor) FROM anchors")[0][0])

    def known_anchors(self, candidates: Sequence[str], db: sqlite3.Connection | None = None) -> set[str]:
        """Which of ``candidates`` some chunk defines."""
        return {
            r[0]
            for r in self._in(
                db, "SELECT DISTINCT anchor FROM anchors WHERE anchor IN ({})", list(dict.fromkeys(candidates))
            )
        }

    def anchors_from(self, prefixes: Sequence[str], db: sqlite3.Connection | None = None) -> set[str]:
        """The anchors some chunk defines that are one of ``prefixes`` (folded words joined by spaces) or continue it
        by more words: one seek of the anchor index per prefix (``p <= anchor < p + "!"``: a space is the only
        character below ``!`` a folded anchor holds), joined in SQLite from a temporary table of the prefixes."""
        with self._lock:
            con = db or self._db
            con.execute("CREATE TEMP TABLE IF NOT EXISTS probe (p TEXT PRIMARY KEY) WITHOUT ROWID")
            con.execute("DELETE FROM temp.probe")
            con.executemany("INSERT OR IGNORE INTO temp.probe (p) VALUES (?)", ((p,) for p in prefixes))
            rows = con.execute(
                "SELECT DISTINCT a.anchor FROM temp.probe CROSS JOIN anchors a "
                "ON a.anchor >= probe.p AND a.anchor < probe.p || '!'"
            ).fetchall()
            con.execute("DELETE FROM temp.probe")
        return {r[0] for r in rows}

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()
