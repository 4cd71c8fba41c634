"""The indexing run: files or LangChain documents loaded, chunked and written to the knowledge index in batches, with
a summary whose counts reconcile; with sync, what changed on disk since the last run is replaced or removed."""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modular_rag.config import OperatorSpec, validate_params
from modular_rag.errors import IndexingError, SourceNotFoundError
from modular_rag.ingest.chunks import Chunker, make_chunks
from modular_rag.ingest.files import (
    LOADER_BY_SUFFIX,
    Document,
    FileReport,
    iter_files,
    readable_title,
    relative_path,
    stream_file,
)
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from modular_rag.state import Chunk


@dataclass
class IndexSummary:
    """What an indexing run did. ``files_read == files_indexed + files_skipped`` always holds; with ``sync``,
    ``files`` also lists the files whose chunks left the index (status ``removed``). ``stages`` splits
    ``seconds``: ``load and chunk``, then the index's own stages (``embed``, ``dense write wait``, ``sparse``), and a
    sync's ``remove`` (what left the index: catalog, postings, link rows and the store)."""

    files_read: int
    files_indexed: int
    files_skipped: int
    documents: int
    chunks: int
    added: int
    existing: int
    seconds: float
    files: list[FileReport]
    index_chunks: int
    stages: dict[str, float] = field(default_factory=dict)
    removed: int = 0
    """Chunks deleted by ``sync`` (of files that are gone, skipped or changed)."""
    synced: dict[str, int] = field(default_factory=dict)
    """With ``sync``: files per status (added, replaced, unchanged, completed, removed)."""

    def lines(self) -> list[str]:
        """A human-readable summary (what ``modular-rag index`` prints)."""
        out = [
            f"files: {self.files_read} read, {self.files_indexed} indexed, {self.files_skipped} skipped",
            f"documents: {self.documents}   chunks: {self.chunks} ({self.added} added, {self.existing} already "
            f"indexed{f', {self.removed} removed' if self.synced else ''})   index now holds {self.index_chunks} "
            f"chunks   {self.seconds:.1f}s",
        ]
        if self.synced:
            out.append("sync: " + ", ".join(f"{self.synced.get(k, 0)} {k}" for k in _STATUSES) + " (files)")
        for rep in self.files:
            if rep.status == "removed" and not rep.skipped:
                out.append(f"  removed {rep.path}: no longer under the given paths")
            if rep.skipped:
                out.append(f"  skipped {rep.path}: {rep.skipped}" + (" (its chunks removed)" if rep.status else ""))
            for note in rep.notes:
                out.append(f"  note {rep.path}: {note}")
        return out


def index_paths(
    paths: Sequence[str | Path],
    providers: Providers,
    *,
    chunker: OperatorSpec | Any | None = None,
    batch_size: int = 256,
    max_file_mb: float = 20.0,
    progress: bool = True,
    sync: bool = False,
    reset: bool = False,
    follow_symlinks: bool = False,
    wait_s: float = 0.0,
) -> IndexSummary:
    """Load, chunk and index files and folders into the providers' knowledge index (dense and sparse together).

    Args:
        paths: Files and folders (.txt, .md, .jsonl; .pdf, .html, .docx with the ``docs`` extra).
        providers: The providers whose index receives the chunks.
        chunker: The chunker spec (default: ``recursive``), or any LangChain text splitter.
        batch_size: Chunks embedded per batch.
        max_file_mb: Files larger than this are skipped with a reason.
        progress: Show a progress bar on stderr.
        sync: Make the index follow the paths: afterwards it holds exactly their chunks. Chunks of deleted (or now
            skipped) files are removed, a changed file's old chunks are replaced, unchanged files embed nothing
            (LangChain ``index(cleanup="full")`` semantics). The summary counts files per status.
        reset: Empty the index first, once every path exists, the chunker is valid and at least one file of a
            supported type was found (a typo in a path never empties an index).
        follow_symlinks: Read what symbolic links point to outside the folders given (by default such a link is
            skipped with the reason; see :func:`~modular_rag.ingest.files.iter_files`).
        wait_s: How long to wait for another writer of the same index to finish (the index has one writer at a
            time; default: fail at once, naming it).

    Returns:
        The run's summary.

    Raises:
        SourceNotFoundError: If a path does not exist, or ``reset`` finds nothing it could index.
        IndexingError: If another writer holds the index, or embedding / writing fails (rerun to resume).
        ConfigError: If the chunker spec is invalid.
    """
    start = time.perf_counter()
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    for path in given:
        if not Path(path).exists():
            raise SourceNotFoundError(
                f"no such file or folder: {path}" + (" (the index was not reset)" if reset else "")
            )
    chunk_fn = _chunker(chunker, providers)
    found = list(iter_files(given, follow_symlinks=follow_symlinks))
    if reset and not any(f.refused is None and f.path.suffix.lower() in LOADER_BY_SUFFIX for f in found):
        raise SourceNotFoundError(
            f"no file of a supported type ({', '.join(LOADER_BY_SUFFIX)}) under {', '.join(map(str, given))}: "
            "nothing to index, so the index was not reset"
        )
    reports: list[FileReport] = []
    kept: dict[str, set[str]] = {}  # files a sync finds unchanged since the last one: not read, their chunks stay
    with providers.index.writing(wait_s):
        if reset:
            providers.index.clear()
        marks = _FileMarks(providers, chunker)
        before = _stored_by_path(providers) if sync else {}

        def documents() -> Iterator[Document]:
            for path, root, refused in found:
                report = FileReport(path=relative_path(path, root))
                reports.append(report)
                if refused is not None:
                    report.skipped = refused
                    continue
                if sync and marks.unchanged(report.path, path) and report.path in before:
                    kept[report.path] = before[report.path]  # same bytes, same chunker: not read again
                    continue
                yield from stream_file(path, root, providers, report, max_file_mb=max_file_mb)

        summary = _index(
            documents(),
            reports,
            chunk_fn,
            providers,
            start,
            batch_size=batch_size,
            progress=progress,
            sync=sync,
            before=before,
            kept=kept,
        )
        marks.record(reports, sync=sync)
    return summary


class _FileMarks:
    """What each file was when a sync last indexed it (the chunker's spec, its size, a BLAKE2 digest of its bytes,
    its modification time and when the mark was taken), kept in the catalog's settings: a later sync skips a file
    whose mark still matches, so it costs what changed, not the corpus. A file whose size and modification time are
    those of its mark is not read at all (as git's index and rsync do), unless it was modified less than a second
    before the mark was taken, when a rewrite within the same clock tick could hide; any other file is hashed and
    compared by content (a touched but unchanged file is skipped, and its mark renewed). Only a sync records marks
    (afterwards the index holds exactly the file's chunks); any other run that reads a file forgets its mark, so the
    next sync reads it again."""

    def __init__(self, providers: Providers, chunker: OperatorSpec | Any | None) -> None:
        self.catalog = providers.index.catalog
        spec = chunker or OperatorSpec(name="recursive")
        self.chunker = spec.model_dump_json() if isinstance(spec, OperatorSpec) else None  # a splitter: never skip
        self.seen: dict[str, str] = {}

    def _mark(self, path: Path, stat: os.stat_result) -> str:
        digest = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return f"{self.chunker}|{stat.st_size}|{digest.hexdigest()}|{stat.st_mtime_ns}|{time.time_ns()}"

    def unchanged(self, rel: str, path: Path) -> bool:
        """Whether the file at ``path`` (indexed as ``rel``) is as the last sync left it."""
        if self.chunker is None:
            return False
        held = self.catalog.setting(f"file:{rel}") or ""
        try:
            stat = path.stat()
            content, mtime, taken = held.rsplit("|", 2) if held.count("|") >= 4 else ("", "", "")
            if (
                content.startswith(f"{self.chunker}|{stat.st_size}|")
                and mtime == str(stat.st_mtime_ns)
                and taken.isdigit()
                and stat.st_mtime_ns < int(taken) - 1_000_000_000
            ):
                self.seen[rel] = held  # size and modification time as marked: not read
                return True
            self.seen[rel] = mark = self._mark(path, stat)
        except OSError:
            return False
        return bool(content) and mark.rsplit("|", 2)[0] == content

    def record(self, reports: Sequence[FileReport], *, sync: bool) -> None:
        """After a run: a sync records the mark of every file it holds and clears those of files it removed; another
        run clears the marks of the files it read."""
        with self.catalog.transaction() as db:
            for rep in reports:
                key = f"file:{rep.path}"
                if sync and not rep.skipped and rep.status != "removed" and self.chunker is not None:
                    mark = self.seen.get(rep.path)
                    if mark is not None:
                        self.catalog.set_setting(key, mark, db)
                elif self.catalog.setting(key):
                    self.catalog.set_setting(key, "", db)


def index_documents(
    documents: Iterable[Any],
    providers: Providers,
    *,
    chunker: OperatorSpec | Any | None = None,
    batch_size: int = 256,
    progress: bool = True,
    sync: bool = False,
    wait_s: float = 0.0,
) -> IndexSummary:
    """Index LangChain ``Document`` objects (or the kit's :class:`Document` dicts), or everything a LangChain
    ``BaseLoader`` loads, into the providers' knowledge index.

    A LangChain document's id is its ``id``, else its ``metadata["source"]`` (with the page, when it has one), else
    a hash of its text; ``metadata["source"]`` also becomes ``path``, which ``sync`` follows.

    Args:
        documents: The documents, or a LangChain ``BaseLoader`` (its ``lazy_load()`` is read).
        providers: The providers whose index receives the chunks.
        chunker: The chunker spec (default: ``recursive``), or any LangChain text splitter.
        batch_size: Chunks embedded per batch.
        progress: Show a progress bar on stderr.
        sync: Afterwards the index holds exactly these documents' chunks (see :func:`index_paths`).
        wait_s: How long to wait for another writer of the same index to finish (default: fail at once).

    Returns:
        The run's summary (one "file" per distinct ``path``).

    Raises:
        IndexingError: If an item is neither kind of document, another writer holds the index, or embedding /
            writing fails.
        ConfigError: If the chunker spec is invalid.
    """
    start = time.perf_counter()
    chunk_fn = _chunker(chunker, providers)
    items = documents.lazy_load() if hasattr(documents, "lazy_load") else documents
    per_path: Counter[str] = Counter()
    reports: list[FileReport] = []

    def docs() -> Iterator[Document]:
        for i, item in enumerate(items):
            doc = _as_document(item, i)
            per_path[str(doc["metadata"].get("path", ""))] += 1
            yield doc
        reports.extend(FileReport(path=path, documents=count) for path, count in sorted(per_path.items()))

    with providers.index.writing(wait_s):
        return _index(docs(), reports, chunk_fn, providers, start, batch_size=batch_size, progress=progress, sync=sync)


def _as_document(item: Any, position: int) -> Document:
    """The kit's document for a LangChain ``Document`` or a kit document dict."""
    if isinstance(item, dict) and isinstance(item.get("text"), str):
        meta = dict(item.get("metadata") or {})
        return Document(doc_id=str(item.get("doc_id") or position), text=item["text"], metadata=meta)
    text = getattr(item, "page_content", None)
    if not isinstance(text, str):
        raise IndexingError(
            f"item {position} is a {type(item).__name__}, not a LangChain Document or a kit document "
            "dict (doc_id, text, metadata)"
        )
    given = dict(getattr(item, "metadata", None) or {})
    meta = {k: v for k, v in given.items() if isinstance(v, str | int | float | bool)}
    source = meta.get("source")
    if source is not None:
        meta.setdefault("path", str(source))
        meta.setdefault("title", readable_title(str(source)))
    doc_id = getattr(item, "id", None) or (f"{source}#{meta['page']}" if source and "page" in meta else source)
    return Document(
        doc_id=str(doc_id or hashlib.sha256(text.encode()).hexdigest()[:16]), text=text.strip(), metadata=meta
    )


def _chunker(chunker: OperatorSpec | Any | None, providers: Providers) -> Chunker:
    """A registered chunker from its spec, or a LangChain text splitter wrapped as one."""
    if chunker is not None and not isinstance(chunker, OperatorSpec):
        if not callable(getattr(chunker, "split_text", None)):
            raise IndexingError(
                f"chunker must be an OperatorSpec or a LangChain text splitter (with split_text), "
                f"not {type(chunker).__name__}"
            )
        return lambda doc: make_chunks(doc, chunker.split_text(doc["text"]), prepend_title=True)
    spec = chunker or OperatorSpec(name="recursive")
    info = get_operator(Port.CHUNK, spec.name)
    fn: Chunker = info.factory(validate_params(info.params, spec.params, "indexing.chunker.params"), providers)
    return fn


FLUSH_CHUNKS = 4096
"""Chunks gathered before they are written (one catalog transaction, one BM25 segment): memory stays bounded by
this, whatever the corpus size."""
FIRST_FLUSH = 64
"""The first write of a run holds this many chunks, each next one twice as many up to :data:`FLUSH_CHUNKS`, so the
progress bar moves from the first files, not after the first 4,096 chunks are read and embedded."""


def _index(
    docs: Iterable[Document],
    reports: list[FileReport],
    chunk_fn: Chunker,
    providers: Providers,
    start: float,
    *,
    batch_size: int,
    progress: bool,
    sync: bool,
    before: Mapping[str, set[str]] | None = None,
    kept: Mapping[str, set[str]] | None = None,
) -> IndexSummary:
    """Chunk the documents as they are read and add them to the index every :data:`FLUSH_CHUNKS` chunks (the shared
    end of both indexing entry points); with ``sync``, remove afterwards what the index held and the run did not
    bring. ``before`` (the stored chunk ids by file, read before ``docs`` is consumed) and ``kept`` (files the run
    skips as unchanged, with their ids, filled while ``docs`` is consumed) come from a caller that skips files."""
    flush = min(FIRST_FLUSH, FLUSH_CHUNKS)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="indexing", unit=" chunks", leave=False)
    before = before if before is not None else _stored_by_path(providers) if sync else {}
    now: dict[str, set[str]] = {}
    pending: list[Chunk] = []
    counts = {"documents": 0, "chunks": 0, "added": 0, "existing": 0}
    stages: dict[str, float] = {"load and chunk": 0.0}

    written: set[str] = set()  # files some of whose chunks this run wrote to the store

    def write() -> None:
        nonlocal flush
        report = providers.index.add(pending, batch_size=batch_size, progress=bar.update if bar is not None else None)
        counts["added"] += report.added
        counts["existing"] += report.existing
        for name, seconds in report.stages.items():
            stages[name] = stages.get(name, 0.0) + seconds
        written.update(str(c["metadata"].get("path", "")) for c in pending if c["chunk_id"] in report.added_ids)
        pending.clear()
        flush = min(2 * flush, FLUSH_CHUNKS)

    try:
        t0 = time.perf_counter()
        for doc in docs:
            counts["documents"] += 1
            for chunk in chunk_fn(doc):
                counts["chunks"] += 1
                pending.append(chunk)
                if sync:  # the ids a sync keeps (ids only: the texts go with each write)
                    now.setdefault(str(chunk["metadata"].get("path", "")), set()).add(chunk["chunk_id"])
                if len(pending) >= flush:  # within a document too: one long document is written in parts
                    stages["load and chunk"] += time.perf_counter() - t0
                    write()
                    t0 = time.perf_counter()
            if bar is not None:
                bar.set_postfix(documents=counts["documents"], refresh=False)
        stages["load and chunk"] += time.perf_counter() - t0
        if pending or not counts["added"] + counts["existing"]:  # a run writes at least once: an index written
            write()  # before sentence vectors existed gets them then, even when no file changed
        removed = 0
        if sync:
            now.update(kept or {})
            keep = set().union(*now.values()) if now else set()
            stale = [cid for ids in before.values() for cid in ids if cid not in keep]
            t0 = time.perf_counter()
            removed = providers.index.remove(stale)
            stages["remove"] = time.perf_counter() - t0
        if counts["added"] or removed:
            stages["warm"] = providers.index.warm()
    finally:
        if bar is not None:
            bar.close()
    read, skipped = len(reports), sum(1 for r in reports if r.skipped)
    synced = _sync_statuses(reports, now, before, written) if sync else {}
    return IndexSummary(
        files_read=read,
        files_indexed=read - skipped,
        files_skipped=skipped,
        documents=counts["documents"],
        chunks=counts["chunks"],
        added=counts["added"],
        existing=counts["existing"],
        seconds=time.perf_counter() - start,
        files=reports,
        index_chunks=providers.index.count(),
        stages=stages,
        removed=removed,
        synced=synced,
    )


_STATUSES = ("added", "replaced", "unchanged", "completed", "removed")


def _stored_by_path(providers: Providers) -> dict[str, set[str]]:
    """The stored chunk ids by their file (metadata ``path``), before a sync."""
    out: dict[str, set[str]] = {}
    for cid, path in providers.index.catalog.ids_by_field("path"):
        out.setdefault(path, set()).add(cid)
    return out


def _sync_statuses(
    reports: list[FileReport], now: Mapping[str, set[str]], before: Mapping[str, set[str]], written: set[str]
) -> dict[str, int]:
    """Set each file report's sync status (and add reports for files that left the index); files per status.
    ``now`` and ``before`` are the chunk ids by file after the run and before it; ``written`` the files some of whose
    chunks the run wrote to the store (a file whose ids are unchanged but were not all stored: ``completed``)."""
    for rep in reports:
        if rep.skipped:
            rep.status = "removed" if rep.path in before else ""
        elif rep.path not in before:
            rep.status = "added"
        elif now.get(rep.path, set()) != before[rep.path]:
            rep.status = "replaced"
        else:
            rep.status = "completed" if rep.path in written else "unchanged"
    seen = {rep.path for rep in reports}
    reports.extend(FileReport(path=path, status="removed") for path in sorted(before) if path and path not in seen)
    counts = {k: 0 for k in _STATUSES}
    for rep in reports:
        if rep.status:
            counts[rep.status] += 1
    return counts
