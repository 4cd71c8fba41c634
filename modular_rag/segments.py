"""BM25 postings on disk, in segments, opened memory-mapped: what a search engine keeps, and nothing else.

A segment holds the postings of the chunks added together (a contiguous range of catalog positions): its sorted
terms, and per term the positions of the chunks that contain it with the term's frequency there, plus each chunk's
length in terms. The postings hold no texts and no statistics: document frequencies, the number of chunks and their
total length live in the catalog (:class:`~modular_rag.catalog.Catalog`), so BM25's weights are computed at query
time (``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``) from what is current, and adding or removing
chunks never rewrites the other segments' postings: an add writes one new segment, a removal records the removed
positions (tombstones) in the manifest. Segments merge (dropping removed chunks) as a counter in base ``ratio``
carries: after an add, the newest segment merges into the one before it while it holds at least a ``ratio``-th of
that one's postings, so a posting is rewritten about ``log_ratio(chunks / add)`` times over its life and an add
rewrites what it added and, now and then, segments no more than ``ratio`` times its size, never the corpus's large
segments. Past ``max_segments`` (a bound, rarely reached), the two adjacent segments with the fewest postings merge.

Files (a folder): ``manifest.json`` (the segments, the tombstones' file, a generation number, replaced atomically)
and one folder per segment of ``.npy`` arrays opened with ``mmap_mode="r"``: a process that opens the index reads
the manifest and maps the arrays; the pages a query touches are all it reads. A reader sees a new manifest (another
process added chunks) at its next query.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from modular_rag.segment_files import _EMPTY_I, Segment, _intersect_sorted, _merge, write_segment

__all__ = ["Segment", "SegmentedBM25", "write_segment"]

MANIFEST = "manifest.json"
VERSION = 1
_DENSE_ABOVE = 50_000
"""Queries with more postings than this are summed into an array over all positions instead of sorted."""


class SegmentedBM25:
    """BM25 search over a folder of segments, with statistics from the caller (the catalog).

    Args:
        folder: Where the segments and the manifest live (created when missing).
        k1, b: BM25's parameters.
        max_segments: More segments than this and the two adjacent ones with the fewest postings merge.
        ratio: The newest segment merges into the one before it while it holds at least ``1 / ratio`` of its
            postings (see the module's docstring); 0: only ``max_segments`` merges.
    """

    backend = "segments"

    def __init__(
        self, folder: str | Path, *, k1: float = 1.2, b: float = 0.75, max_segments: int = 48, ratio: int = 4
    ) -> None:
        self.folder = Path(folder)
        self.k1, self.b, self.max_segments, self.ratio = k1, b, max_segments, ratio
        self._lock = threading.RLock()
        self._seen: tuple[int, int] | None = None
        self._segments: list[Segment] = []
        self._removed = np.zeros(0, dtype=np.int64)
        self._generation = 0
        self._next = 0

    # ------------------------------------------------------------------------------------------------------ state

    def _manifest_file(self) -> Path:
        return self.folder / MANIFEST

    def refresh(self) -> None:
        """Read the manifest again if it changed since it was read (another process wrote it)."""
        file = self._manifest_file()
        try:
            st = file.stat()
        except FileNotFoundError:
            with self._lock:
                self._seen, self._segments, self._removed, self._generation, self._next = None, [], _EMPTY_I, 0, 0
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return
        with self._lock:
            data = json.loads(file.read_text(encoding="utf-8"))
            if data.get("version") != VERSION:
                raise ValueError(
                    f"{file} was written by another version of the postings format "
                    f"({data.get('version')!r}, this one reads {VERSION}); rebuild the index"
                )
            self._segments = [Segment.open(self.folder / s["name"], s["start"], s["end"]) for s in data["segments"]]
            removed = data.get("removed")
            self._removed = np.load(self.folder / removed) if removed else _EMPTY_I
            self._generation, self._next = int(data["generation"]), int(data["next"])
            self._seen = stamp

    @property
    def generation(self) -> int:
        """Bumped by every change (readers key caches on it)."""
        self.refresh()
        return self._generation

    @property
    def next_position(self) -> int:
        """The first position no segment covers: where the next added chunks start."""
        self.refresh()
        return self._next

    @property
    def segments(self) -> list[Segment]:
        """The segments, in position order."""
        self.refresh()
        return list(self._segments)

    @property
    def removed(self) -> np.ndarray:
        """Positions removed since their segment was written (sorted)."""
        self.refresh()
        return self._removed

    def _write_manifest(self, segments: Sequence[Segment], removed: np.ndarray, next_position: int) -> None:
        """Replace the manifest atomically (the tombstones in their own file, named by generation)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        generation = self._generation + 1
        removed_name = ""
        if len(removed):
            removed_name = f"removed-{generation}.npy"
            np.save(self.folder / removed_name, np.asarray(removed, dtype=np.int64))
        data = {
            "version": VERSION,
            "generation": generation,
            "next": int(next_position),
            "k1": self.k1,
            "b": self.b,
            "segments": [{"name": s.name, "start": s.start, "end": s.end} for s in segments],
            "removed": removed_name,
        }
        tmp = self.folder / f".{MANIFEST}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self._manifest_file())
        self._seen = None
        self.refresh()
        self._collect(segments, removed_name)

    def _collect(self, segments: Sequence[Segment], removed_name: str) -> None:
        """Delete segment folders and tombstone files the manifest no longer names (readers that mapped them keep
        their open maps: unlinking a mapped file leaves the mapping valid on POSIX)."""
        keep = {s.name for s in segments} | {removed_name, MANIFEST}
        for path in self.folder.iterdir():
            if path.name not in keep and not path.name.startswith("."):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)

    # ----------------------------------------------------------------------------------------------------- writing

    def add(self, start: int, terms_per_chunk: Sequence[Sequence[str]]) -> None:
        """Add the postings of chunks at positions ``start ...`` (which must be :attr:`next_position`), as one new
        segment, then merge while there are too many."""
        with self._lock:
            self.refresh()
            if start != self._next:
                raise ValueError(f"chunks must be added at position {self._next} (the postings end there); got {start}")
            if not terms_per_chunk:
                return
            segment = write_segment(self.folder / f"seg-{uuid.uuid4().hex[:12]}", start, terms_per_chunk)
            segments, removed = self._merged([*self._segments, segment], self._removed, added=True)
            self._write_manifest(segments, removed, start + len(terms_per_chunk))

    def remove(self, positions: Sequence[int]) -> None:
        """Record positions as removed (their postings stop counting at once; a later merge drops them)."""
        if not len(positions):
            return
        with self._lock:
            self.refresh()
            removed = np.union1d(self._removed, np.asarray(positions, dtype=np.int64))
            segments, removed = self._merged(list(self._segments), removed)
            self._write_manifest(segments, removed, self._next)

    def _merged(
        self, segments: list[Segment], removed: np.ndarray, *, added: bool = False
    ) -> tuple[list[Segment], np.ndarray]:
        """After an add (``added``), merge the newest segment into the one before it while it holds at least a
        ``ratio``-th of its postings; then the adjacent pair with the fewest postings while there are more than
        ``max_segments``; tombstones no segment covers any more are dropped. (Merging the fewest postings alone, at 12
        segments, made each add to a 1M-chunk index rewrite a tail segment of ~50k chunks: 2.7 s an add.)"""

        def merge(i: int) -> None:
            nonlocal removed
            merged = _merge(self.folder / f"seg-{uuid.uuid4().hex[:12]}", segments[i : i + 2], removed)
            segments[i : i + 2] = [merged]
            removed = removed[~((removed >= merged.start) & (removed < merged.end))]

        while added and len(segments) > 1 and segments[-1].postings * self.ratio >= segments[-2].postings:
            merge(len(segments) - 2)
        while len(segments) > self.max_segments:
            merge(int(np.argmin([a.postings + b.postings for a, b in zip(segments, segments[1:], strict=False)])))
        return segments, removed

    def compact(self) -> None:
        """Merge every segment into one, dropping removed positions."""
        with self._lock:
            self.refresh()
            if len(self._segments) <= 1 and not len(self._removed):
                return
            if not self._segments:
                return
            merged = _merge(self.folder / f"seg-{uuid.uuid4().hex[:12]}", self._segments, self._removed)
            self._write_manifest([merged], _EMPTY_I, self._next)

    def clear(self) -> None:
        """Remove every segment."""
        with self._lock:
            shutil.rmtree(self.folder, ignore_errors=True)
            self._seen, self._segments, self._removed, self._generation, self._next = None, [], _EMPTY_I, 0, 0

    # ----------------------------------------------------------------------------------------------------- reading

    def _weights(self, idf: float, tfs: np.ndarray, lens: np.ndarray, avgdl: float) -> np.ndarray:
        freq = tfs.astype(np.float32)
        norm = self.k1 * (1.0 - self.b + self.b * lens.astype(np.float32) / np.float32(avgdl)) + freq
        return (np.float32(idf) * freq * np.float32(self.k1 + 1.0) / norm).astype(np.float32)

    def _postings(self, term: str, avgdl: float, idf: float) -> tuple[np.ndarray, np.ndarray]:
        """Positions holding ``term`` in every segment, with their BM25 weights."""
        key = term.encode("utf-8")
        docs_all: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for seg in self._segments:
            docs, tfs = seg.find(key)
            if len(docs):
                docs = np.asarray(docs)
                docs_all.append(docs)
                weights.append(self._weights(idf, np.asarray(tfs), np.asarray(seg.lens)[docs - seg.start], avgdl))
        if not docs_all:
            return _EMPTY_I, np.zeros(0, dtype=np.float32)
        return np.concatenate(docs_all), np.concatenate(weights)

    def top_k(
        self,
        terms: Sequence[str],
        k: int,
        idf: Mapping[str, float],
        avgdl: float,
        *,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best positions for analysed query ``terms`` and their scores (descending; ties by position).

        Args:
            terms: The analysed query (a repeated term counts again, as in BM25's query term frequency).
            k: How many.
            idf: Each distinct term's IDF (from the catalog's statistics).
            avgdl: The chunks' average length in terms.
            allowed: Sorted positions a filter admits (``None``: all).
        """
        with self._lock:
            self.refresh()
            counts: dict[str, int] = {}
            for t in terms:
                counts[t] = counts.get(t, 0) + 1
            docs_all, weights = [], []
            for term, mult in counts.items():
                docs, w = self._postings(term, avgdl, idf.get(term, 0.0))
                if len(docs):
                    docs_all.append(docs)
                    weights.append(w * np.float32(mult))
            removed = self._removed
        if not docs_all:
            return _EMPTY_I, np.zeros(0, dtype=np.float32)
        docs, w = np.concatenate(docs_all), np.concatenate(weights)
        if len(docs_all) == 1:
            positions, scores = docs, w
        elif len(docs) > _DENSE_ABOVE:  # many postings: sum into an array over positions, O(postings + positions)
            summed = np.bincount(docs, weights=w)
            positions = np.flatnonzero(summed)
            scores = summed[positions].astype(np.float32)
        else:  # few: sort them, O(postings log postings)
            positions, inverse = np.unique(docs, return_inverse=True)
            scores = np.bincount(inverse, weights=w).astype(np.float32)
        keep = np.ones(len(positions), dtype=bool)
        if len(removed):
            keep &= ~np.isin(positions, removed, assume_unique=False)
        if allowed is not None:
            keep &= np.isin(positions, allowed)
        positions, scores = positions[keep], scores[keep]
        if len(scores) > k:
            cut = np.partition(scores, len(scores) - k)[len(scores) - k]
            mask = scores >= cut
            positions, scores = positions[mask], scores[mask]
        order = np.lexsort((positions, -scores))[:k]
        return positions[order], scores[order]

    def containing(self, terms: Sequence[str]) -> np.ndarray:
        """The positions (sorted, removed ones left out) whose postings hold every one of ``terms``."""
        return self.containing_many([terms])[0]

    def containing_many(self, queries: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """:meth:`containing` of each list of terms, each term's postings read once for them all (an add looks up
        thousands of new anchors whose words repeat), intersected from the rarest term up."""
        with self._lock:
            self.refresh()
            postings: dict[str, np.ndarray] = {}

            def holding(term: str) -> np.ndarray:
                if term not in postings:
                    key = term.encode("utf-8")
                    docs = [np.asarray(seg.find(key)[0]) for seg in self._segments]
                    postings[term] = np.concatenate(docs) if docs else _EMPTY_I
                return postings[term]

            out: list[np.ndarray] = []
            for terms in queries:
                lists = sorted((holding(t) for t in dict.fromkeys(terms)), key=len)
                found = lists[0] if lists else _EMPTY_I
                for other in lists[1:]:
                    if not len(found):
                        break
                    found = _intersect_sorted(found, other)
                if len(found) and len(self._removed):
                    found = found[~np.isin(found, self._removed)]
                out.append(found)
            return out

    def score(
        self, terms: Sequence[str], positions: Sequence[int], idf: Mapping[str, float], avgdl: float
    ) -> np.ndarray:
        """The BM25 scores of the chunks at ``positions`` for analysed ``terms`` (0 for removed or unknown ones)."""
        want = np.asarray(positions, dtype=np.int64)
        out = np.zeros(len(want), dtype=np.float32)
        if not len(want):
            return out
        with self._lock:
            self.refresh()
            counts: dict[str, int] = {}
            for t in terms:
                counts[t] = counts.get(t, 0) + 1
            for term, mult in counts.items():
                key = term.encode("utf-8")
                for seg in self._segments:
                    inside = (want >= seg.start) & (want < seg.end)
                    if not inside.any():
                        continue
                    docs, tfs = seg.find(key)
                    if not len(docs):
                        continue
                    at = np.searchsorted(docs, want[inside])
                    at = np.minimum(at, len(docs) - 1)
                    hit = np.asarray(docs)[at] == want[inside]
                    idx = np.flatnonzero(inside)[hit]
                    tf = np.asarray(tfs)[at[hit]]
                    lens = np.asarray(seg.lens)[want[idx] - seg.start]
                    out[idx] += self._weights(idf.get(term, 0.0), tf, lens, avgdl) * np.float32(mult)
            if len(self._removed):
                out[np.isin(want, self._removed)] = 0.0
        return out


def lucene_idf(df: int, n: int) -> float:
    """Lucene's BM25 IDF, never negative: ``log(1 + (N - df + 0.5) / (df + 0.5))``."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def describe(folder: Path) -> dict[str, Any]:
    """The manifest of a postings folder (for messages and benchmarks)."""
    file = folder / MANIFEST
    return json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}
