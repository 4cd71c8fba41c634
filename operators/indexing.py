"""Indexing module: loaders (.txt, .md, .jsonl; .pdf, .html, .docx with the ``docs`` extra; folders of them),
chunkers, and the indexing run that writes the dense and sparse indexes together.

Loaders turn a file into documents; chunkers turn a document into chunks whose ids derive from the document id
and the chunk text, so indexing the same files again adds nothing. Every file read is either indexed or skipped
with a reason, and the summary's counts reconcile (``files_read == files_indexed + files_skipped``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import yaml
from pydantic import Field, model_validator

from modular_rag.config import OperatorSpec, validate_params
from modular_rag.errors import IndexingError, SourceNotFoundError
from modular_rag.providers import Providers
from modular_rag.registry import OperatorParams, Port, get_operator, operator
from modular_rag.state import Chunk
from modular_rag.text import split_sentences

__all__ = [
    "Document",
    "FileReport",
    "IndexSummary",
    "LOADER_BY_SUFFIX",
    "chunk_id",
    "iter_files",
    "load_file",
    "index_paths",
    "index_documents",
    "readable_title",
]


class Document(TypedDict):
    """A loaded document, before chunking."""

    doc_id: str
    text: str
    metadata: dict[str, Any]


def chunk_id(doc_id: str, text: str) -> str:
    """The content-derived id of a chunk: 24 hex digits of SHA-256 over the document id and the chunk text."""
    return hashlib.sha256(f"{doc_id}\x00{text}".encode()).hexdigest()[:24]


# -------------------------------------------------------------------------------------------------------- loaders


class LoaderParams(OperatorParams):
    max_file_mb: float = Field(20.0, gt=0, description="files larger than this are skipped")


@dataclass
class FileReport:
    """What happened to one file: indexed (with documents and notes) or skipped (with the reason)."""

    path: str
    documents: int = 0
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)
    status: str = ""
    """With ``sync``: ``added`` (new file), ``replaced`` (changed), ``unchanged``, or ``removed`` (its chunks left
    the index: the file is gone, or now skipped)."""


Loader = Callable[[Path, str], tuple[Iterable[Document], list[str]]]
"""A loader: ``(path, document id) -> (documents, notes)``. The documents may be a lazy iterable (a JSON-lines file is
read line by line); notes are appended to while it is consumed, and :class:`_Skip` may be raised then too."""

STREAMED = frozenset({".jsonl"})
"""Line-oriented formats read as a stream: no ``max_file_mb`` cap (formats read whole keep it)."""


def _read_text(path: Path) -> tuple[str, list[str]]:
    raw = path.read_bytes()
    if not raw.strip():
        raise _Skip("empty file")
    if b"\x00" in raw[:8192]:
        raise _Skip("binary file (NUL bytes)")
    try:
        return raw.decode("utf-8-sig"), []
    except UnicodeDecodeError as exc:
        return raw.decode("cp1252", errors="replace"), [f"not UTF-8 ({exc.reason} at byte {exc.start}); read as cp1252"]


class _Skip(Exception):
    """A file is skipped; the message is the reason."""


def _front_matter(text: str) -> tuple[dict[str, Any], str]:
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, text
    try:
        meta = yaml.safe_load(text[3:end]) or {}
    except yaml.YAMLError:
        return {}, text
    if not isinstance(meta, dict):
        return {}, text
    body = text[end + 4 :].lstrip("\n")
    scalar = str | int | float | bool
    lists = {
        str(k): ", ".join(map(str, v))
        for k, v in meta.items()  # "aliases: [TW-550, TW-550 Gravel]"
        if isinstance(v, list) and v and all(isinstance(x, scalar) for x in v)
    }
    return {**{str(k): v for k, v in meta.items() if isinstance(v, scalar)}, **lists}, body


def readable_title(path: str | Path) -> str:
    """A file's name made readable as a title: separators become spaces (``display-error-e07.txt`` -> ``display
    error e07``), so the title's words are words a question or another document can name."""
    stem = Path(path).stem
    return " ".join(re.split(r"[\s_\-]+", stem)).strip() or stem


@operator("indexing", "loading", "text", port=Port.LOAD)
def text_loader(params: LoaderParams, providers: Providers) -> Loader:
    """Plain text: one document per file, titled by the file name made readable (:func:`readable_title`)."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        text, notes = _read_text(path)
        return [Document(doc_id=doc_id, text=text.strip(), metadata={"title": readable_title(path)})], notes

    return load


@operator("indexing", "loading", "markdown", port=Port.LOAD)
def markdown_loader(params: LoaderParams, providers: Providers) -> Loader:
    """Markdown: optional YAML front matter becomes metadata (year, source, ...); title from it, the first heading or
    the file name made readable. Headings stay in the text, where the link table finds them."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        text, notes = _read_text(path)
        meta, body = _front_matter(text)
        title = meta.pop("title", None)
        if title is None:
            heading = next((ln[2:].strip() for ln in body.splitlines() if ln.startswith("# ")), None)
            title = heading or readable_title(path)
        if not body.strip():
            raise _Skip("no text after the front matter")
        return [Document(doc_id=doc_id, text=body.strip(), metadata={"title": str(title), **meta})], notes

    return load


@operator("indexing", "loading", "jsonl", port=Port.LOAD)
def jsonl_loader(params: LoaderParams, providers: Providers) -> Loader:
    """JSON lines in BEIR corpus form: ``{"id" | "_id", "title", "text", ...}``; other scalar fields become metadata."""

    def load(path: Path, doc_id: str) -> tuple[Iterable[Document], list[str]]:
        notes: list[str] = []
        return _jsonl_rows(path, notes), notes

    return load


def _jsonl_rows(path: Path, notes: list[str]) -> Iterator[Document]:
    """The documents of a JSON-lines file, read line by line (memory bounded by one line); what was skipped is
    appended to ``notes`` when the file ends."""
    seen: set[str] = set()
    broken = duplicates = empty = kept = 0
    latin1 = False
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line, latin1 = raw.decode("cp1252", errors="replace"), True
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                broken += 1
                continue
            if not isinstance(row, dict):
                broken += 1
                continue
            rid = row.get("id", row.get("_id"))
            body = row.get("text")
            if rid is None or not isinstance(body, str):
                broken += 1
                continue
            if not body.strip():
                empty += 1
                continue
            rid = str(rid)
            if rid in seen:
                duplicates += 1
                continue
            seen.add(rid)
            meta = {
                k: v
                for k, v in row.items()
                if k not in ("id", "_id", "text") and isinstance(v, str | int | float | bool)
            }
            meta.setdefault("title", "")
            kept += 1
            yield Document(doc_id=rid, text=body.strip(), metadata=meta)
    if latin1:
        notes.append("not UTF-8 in places: those lines read as cp1252")
    for count, what in (
        (broken, "broken lines skipped"),
        (duplicates, "duplicate ids skipped (first kept)"),
        (empty, "rows with empty text skipped"),
    ):
        if count:
            notes.append(f"{count} {what}")
    if not kept:
        raise _Skip("no valid rows" + (f" ({'; '.join(notes)})" if notes else ""))


def _optional(module: str, kind: str) -> Any:
    """Import a document library of the ``docs`` extra, or skip the file saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise _Skip(f"reading {kind} files needs {module}: pip install 'modular-rag[docs]'") from None


def _tidy(text: str) -> str:
    """Collapse runs of spaces and of blank lines (extracted text is full of both)."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


@operator("indexing", "loading", "pdf", port=Port.LOAD)
def pdf_loader(params: LoaderParams, providers: Providers) -> Loader:
    """PDF (pypdf, the ``docs`` extra): one document per page with its 1-based ``page`` in metadata, so citations
    can say "p. 3"; titled by the PDF's title or the file name made readable. Encrypted and image-only PDFs are
    skipped with the reason."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        pypdf = _optional("pypdf", "PDF")
        try:
            reader = pypdf.PdfReader(str(path))
            if reader.is_encrypted and not reader.decrypt(""):
                raise _Skip("encrypted PDF (it needs a password)")
            title = str((reader.metadata.title if reader.metadata else None) or readable_title(path))
            pages = [_tidy(page.extract_text() or "") for page in reader.pages]
        except _Skip:
            raise
        except Exception as exc:  # pypdf raises many types for damaged files
            raise _Skip(f"unreadable PDF: {type(exc).__name__}: {exc}") from None
        docs = [
            Document(doc_id=doc_id, text=text, metadata={"title": title, "page": n})
            for n, text in enumerate(pages, 1)
            if text
        ]
        if not docs:
            raise _Skip(f"no extractable text in {len(pages)} page(s): an image-only PDF needs OCR first")
        notes = [f"{len(pages) - len(docs)} page(s) without text left out"] if len(docs) < len(pages) else []
        return docs, notes

    return load


_HTML_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_HTML_NOISE = ("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "iframe", "svg")


@operator("indexing", "loading", "html", port=Port.LOAD)
def html_loader(params: LoaderParams, providers: Providers) -> Loader:
    """HTML (BeautifulSoup, the ``docs`` extra): the main text only: ``<main>`` or ``<article>`` when the page has
    one, without scripts, styles, navigation, headers, footers, asides and forms; titled by ``<title>``, the first
    ``<h1>`` or the file name made readable. Headings ``<h1>``-``<h6>`` become Markdown heading lines (``## Brakes``),
    where the link table finds them."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        bs4 = _optional("bs4", "HTML")
        raw, notes = _read_text(path)
        soup = bs4.BeautifulSoup(raw, "html.parser")
        heading = soup.find("h1")
        title = (
            (soup.title.get_text(" ", strip=True) if soup.title else "")
            or (heading.get_text(" ", strip=True) if heading else "")
            or readable_title(path)
        )
        for tag in soup.find_all(_HTML_NOISE):
            tag.decompose()
        body = soup.find("main") or soup.find("article") or soup.body or soup
        for tag in body.find_all(_HTML_HEADINGS):
            words = tag.get_text(" ", strip=True)
            if words:
                tag.replace_with(f"\n{'#' * int(tag.name[1])} {words}\n")
        text = _tidy(body.get_text("\n"))
        if not text:
            raise _Skip("no text in the page's body")
        return [Document(doc_id=doc_id, text=text, metadata={"title": title})], notes

    return load


_CORE = "docProps/core.xml"


@operator("indexing", "loading", "docx", port=Port.LOAD)
def docx_loader(params: LoaderParams, providers: Providers) -> Loader:
    """Word .docx (docx2txt, the ``docs`` extra): the document's text, titled by its core-properties title or the
    file name made readable."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        docx2txt = _optional("docx2txt", "DOCX")
        try:
            text = _tidy(docx2txt.process(str(path)) or "")
            with zipfile.ZipFile(path) as archive:
                core = archive.read("docProps/core.xml").decode("utf-8") if _CORE in archive.namelist() else ""
        except (zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise _Skip(f"not a .docx file ({exc})") from None
        if not text:
            raise _Skip("no text in the document")
        found = re.search(r"<dc:title>([^<]+)</dc:title>", core)
        title = found.group(1).strip() if found else readable_title(path)
        return [Document(doc_id=doc_id, text=text, metadata={"title": title})], []

    return load


LOADER_BY_SUFFIX: dict[str, str] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".jsonl": "jsonl",
    ".pdf": "pdf",
    ".html": "html",
    ".htm": "html",
    ".docx": "docx",
}
"""Which loader reads which file suffix."""


def iter_files(paths: Iterable[str | Path]) -> Iterator[tuple[Path, Path]]:
    """Every file under the given files and folders, as ``(file, root)``, sorted, hidden entries left out.

    Raises:
        IndexingError: If a path does not exist.
    """
    for given in paths:
        root = Path(given)
        if not root.exists():
            raise SourceNotFoundError(f"no such file or folder: {root}")
        if root.is_file():
            yield root, root.parent
            continue
        for file in sorted(root.rglob("*")):
            rel = file.relative_to(root)
            if file.is_file() and not any(part.startswith(".") for part in rel.parts):
                yield file, root


def load_file(
    path: Path, root: Path, providers: Providers, *, max_file_mb: float = 20.0
) -> tuple[list[Document], FileReport]:
    """Load one file with the loader for its suffix; never raises for a bad file (it is skipped with a reason)."""
    report = FileReport(path="")
    docs = list(stream_file(path, root, providers, report, max_file_mb=max_file_mb))
    return docs, report


def stream_file(
    path: Path, root: Path, providers: Providers, report: FileReport, *, max_file_mb: float = 20.0
) -> Iterator[Document]:
    """The documents of one file, as its loader reads them (a JSON-lines file line by line), filling ``report`` as
    it goes; a bad file yields nothing and says why in ``report.skipped`` (never raises for it). Formats read whole
    are refused over ``max_file_mb``; streamed ones (:data:`STREAMED`) are not."""
    rel = _relative(path, root)
    report.path = rel
    name = LOADER_BY_SUFFIX.get(path.suffix.lower())
    if name is None:
        report.skipped = f"unsupported file type {path.suffix or '(none)'!r}; supported: {', '.join(LOADER_BY_SUFFIX)}"
        return
    count = 0
    notes: list[str] = []
    try:
        size_mb = path.stat().st_size / 1e6
        if size_mb > max_file_mb and path.suffix.lower() not in STREAMED:
            raise _Skip(f"{size_mb:.1f} MB is larger than max_file_mb={max_file_mb:g}")
        loader = get_operator(Port.LOAD, name).factory(LoaderParams(max_file_mb=max_file_mb), providers)
        doc_id = rel.rsplit(".", 1)[0] if name != "jsonl" else rel
        docs, notes = loader(path, doc_id)
        for d in docs:
            d["metadata"].setdefault("path", rel)
            count += 1
            report.documents = count
            yield d
    except _Skip as reason:
        report.skipped = str(reason)
        return
    except OSError as exc:
        report.skipped = f"unreadable: {exc.strerror or exc}"
        return
    report.documents, report.notes = count, notes


# ------------------------------------------------------------------------------------------------------- chunkers

Chunker = Callable[[Document], list[Chunk]]


class SizeParams(OperatorParams):
    chunk_size: int = Field(1000, gt=20, le=100_000, description="characters per chunk")
    chunk_overlap: int = Field(150, ge=0, description="characters shared by neighbouring chunks")
    prepend_title: bool = Field(True, description="start each chunk with the document title")

    @model_validator(mode="after")
    def _overlap_fits(self) -> SizeParams:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})"
            )
        return self


CHUNK_FORMAT = 2
"""Version of the chunk texts the chunkers make (part of the evaluation index cache key); 2: a Markdown heading
that repeats the title is not repeated after the prepended title."""

_HEADING_MARKS = re.compile(r"#{1,6}[ \t]+")


def _with_title(title: str, piece: str) -> str:
    """``piece`` starting with ``title`` once: a leading Markdown heading of the title becomes the plain title
    (also when a chunker has folded the heading's line break into a space)."""
    body = piece.strip()
    marks = _HEADING_MARKS.match(body)
    if marks and body.startswith(title, marks.end()):
        rest = body[marks.end() + len(title) :]
        if not rest or rest[0].isspace():
            body = rest.lstrip()
    return body if body.startswith(title) else f"{title}\n{body}"


def _make_chunks(
    doc: Document, pieces: Sequence[str], prepend_title: bool, extra: Sequence[dict[str, Any]] | None = None
) -> list[Chunk]:
    title = str(doc["metadata"].get("title") or "")
    chunks = []
    for i, piece in enumerate(p for p in pieces if p.strip()):
        text = _with_title(title, piece) if prepend_title and title else piece.strip()
        meta = {**doc["metadata"], "doc_id": doc["doc_id"], "position": i}
        if extra:
            meta.update(extra[i])
        chunks.append(Chunk(chunk_id=chunk_id(doc["doc_id"], text), text=text, metadata=meta))
    return chunks


@operator("indexing", "chunking", "fixed", port=Port.CHUNK)
def fixed_chunker(params: SizeParams, providers: Providers) -> Chunker:
    """Fixed-size windows of ``chunk_size`` characters on word boundaries, overlapping by ``chunk_overlap``."""
    from langchain_text_splitters import CharacterTextSplitter

    splitter = CharacterTextSplitter(separator=" ", chunk_size=params.chunk_size, chunk_overlap=params.chunk_overlap)

    def chunk(doc: Document) -> list[Chunk]:
        return _make_chunks(doc, splitter.split_text(" ".join(doc["text"].split())), params.prepend_title)

    return chunk


@operator("indexing", "chunking", "recursive", port=Port.CHUNK)
def recursive_chunker(params: SizeParams, providers: Providers) -> Chunker:
    """Recursive splitting: paragraphs first, then lines, sentences, words, to fit ``chunk_size`` characters."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(
        separators=["\n\n", "\n", ". ", "? ", "! ", "; ", " ", ""],
        chunk_size=params.chunk_size,
        chunk_overlap=params.chunk_overlap,
        keep_separator="end",
    )

    def chunk(doc: Document) -> list[Chunk]:
        return _make_chunks(doc, splitter.split_text(doc["text"]), params.prepend_title)

    return chunk


class WindowParams(OperatorParams):
    window: int = Field(2, ge=0, le=20, description="sentences kept on each side in metadata 'window'")
    prepend_title: bool = Field(False, description="start each sentence chunk with the document title")


@operator("indexing", "chunking", "sentence_window", port=Port.CHUNK)
def sentence_window_chunker(params: WindowParams, providers: Providers) -> Chunker:
    """One chunk per sentence (precise matching); the surrounding sentences are kept in metadata ``window``, which
    the context builder gives the model instead of the bare sentence."""

    def chunk(doc: Document) -> list[Chunk]:
        sentences = split_sentences(doc["text"])
        windows = [
            {"window": " ".join(sentences[max(0, i - params.window) : i + params.window + 1])}
            for i in range(len(sentences))
        ]
        return _make_chunks(doc, sentences, params.prepend_title, windows)

    return chunk


class DocumentParams(OperatorParams):
    prepend_title: bool = Field(True, description="start the chunk with the document title")


@operator("indexing", "chunking", "document", port=Port.CHUNK)
def document_chunker(params: DocumentParams, providers: Providers) -> Chunker:
    """The whole document as one chunk (short documents such as abstracts or FAQ entries)."""

    def chunk(doc: Document) -> list[Chunk]:
        return _make_chunks(doc, [doc["text"]], params.prepend_title)

    return chunk


# ----------------------------------------------------------------------------------------------------- indexing run


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
    """With ``sync``: files per status (added, replaced, unchanged, removed)."""

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

    Returns:
        The run's summary.

    Raises:
        IndexingError: If a path does not exist, or embedding / writing fails (rerun to resume).
        ConfigError: If the chunker spec is invalid.
    """
    start = time.perf_counter()
    for given in paths if not isinstance(paths, (str, Path)) else [paths]:
        if not Path(given).exists():
            raise SourceNotFoundError(f"no such file or folder: {given}")
    chunk_fn = _chunker(chunker, providers)
    reports: list[FileReport] = []
    marks = _FileMarks(providers, chunker)
    before = _stored_by_path(providers) if sync else {}
    kept: dict[str, set[str]] = {}  # files a sync finds unchanged since the last one: not read, their chunks stay

    def documents() -> Iterator[Document]:
        for path, root in iter_files(paths):
            report = FileReport(path=_relative(path, root))
            reports.append(report)
            if sync and marks.unchanged(report.path, path) and report.path in before:
                kept[report.path] = before[report.path]
                report.notes.append("unchanged since the last sync (same bytes, same chunker): not read again")
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


def _relative(path: Path, root: Path) -> str:
    """A file's name in the index (metadata ``path``): relative to the folder given, or its name."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name


def index_documents(
    documents: Iterable[Any],
    providers: Providers,
    *,
    chunker: OperatorSpec | Any | None = None,
    batch_size: int = 256,
    progress: bool = True,
    sync: bool = False,
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

    Returns:
        The run's summary (one "file" per distinct ``path``).

    Raises:
        IndexingError: If an item is neither kind of document, or embedding / writing fails.
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
        return lambda doc: _make_chunks(doc, chunker.split_text(doc["text"]), prepend_title=True)
    spec = chunker or OperatorSpec(name="recursive")
    info = get_operator(Port.CHUNK, spec.name)
    fn: Chunker = info.factory(validate_params(info.params, spec.params, "indexing.chunker.params"), providers)
    return fn


FLUSH_CHUNKS = 4096
"""Chunks gathered before they are written (one catalog transaction, one BM25 segment): memory stays bounded by
this, whatever the corpus size."""


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
    flush = FLUSH_CHUNKS
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="indexing", unit=" chunks", leave=False)
    before = before if before is not None else _stored_by_path(providers) if sync else {}
    now: dict[str, set[str]] = {}
    pending: list[Chunk] = []
    counts = {"documents": 0, "chunks": 0, "added": 0, "existing": 0}
    stages: dict[str, float] = {"load and chunk": 0.0}

    def write() -> None:
        report = providers.index.add(pending, batch_size=batch_size, progress=bar.update if bar is not None else None)
        counts["added"] += report.added
        counts["existing"] += report.existing
        for name, seconds in report.stages.items():
            stages[name] = stages.get(name, 0.0) + seconds
        pending.clear()

    try:
        t0 = time.perf_counter()
        for doc in docs:
            counts["documents"] += 1
            for chunk in chunk_fn(doc):
                counts["chunks"] += 1
                pending.append(chunk)
                if sync:  # the ids a sync keeps (ids only: the texts go with each write)
                    now.setdefault(str(chunk["metadata"].get("path", "")), set()).add(chunk["chunk_id"])
            if bar is not None:
                bar.set_postfix(documents=counts["documents"], refresh=False)
            if len(pending) >= flush:
                stages["load and chunk"] += time.perf_counter() - t0
                write()
                t0 = time.perf_counter()
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
    synced = _sync_statuses(reports, now, before) if sync else {}
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


_STATUSES = ("added", "replaced", "unchanged", "removed")


def _stored_by_path(providers: Providers) -> dict[str, set[str]]:
    """The stored chunk ids by their file (metadata ``path``), before a sync."""
    out: dict[str, set[str]] = {}
    for cid, path in providers.index.catalog.ids_by_field("path"):
        out.setdefault(path, set()).add(cid)
    return out


def _sync_statuses(
    reports: list[FileReport], now: Mapping[str, set[str]], before: Mapping[str, set[str]]
) -> dict[str, int]:
    """Set each file report's sync status (and add reports for files that left the index); files per status.
    ``now`` and ``before`` are the chunk ids by file after the run and before it."""
    for rep in reports:
        if rep.skipped:
            rep.status = "removed" if rep.path in before else ""
        elif rep.path not in before:
            rep.status = "added"
        else:
            rep.status = "unchanged" if now.get(rep.path, set()) == before[rep.path] else "replaced"
    seen = {rep.path for rep in reports}
    reports.extend(FileReport(path=path, status="removed") for path in sorted(before) if path and path not in seen)
    counts = {k: 0 for k in _STATUSES}
    for rep in reports:
        if rep.status:
            counts[rep.status] += 1
    return counts
