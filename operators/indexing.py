"""Indexing module: loaders (.txt, .md, .jsonl; .pdf, .html, .docx with the ``docs`` extra; folders of them),
chunkers, and the indexing run that writes the dense and sparse indexes together.

Loaders turn a file into documents; chunkers turn a document into chunks whose ids derive from the document id
and the chunk text, so indexing the same files again adds nothing. Every file read is either indexed or skipped
with a reason, and the summary's counts reconcile (``files_read == files_indexed + files_skipped``).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from modular_rag.ingest.chunks import Chunker, make_chunks
from modular_rag.ingest.files import (
    LOADER_BY_SUFFIX,
    Document,
    FileReport,
    Loader,
    LoaderParams,
    SkipFile,
    chunk_id,
    front_matter,
    iter_files,
    load_file,
    read_text,
    readable_title,
)
from modular_rag.ingest.pipeline import (
    IndexSummary,
    index_documents,
    index_paths,
)
from modular_rag.providers import Providers
from modular_rag.registry import OperatorParams, Port, operator
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


# -------------------------------------------------------------------------------------------------------- loaders


@operator("indexing", "loading", "text", port=Port.LOAD)
def text_loader(params: LoaderParams, providers: Providers) -> Loader:
    """Plain text: one document per file, titled by the file name made readable (:func:`readable_title`)."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        text, notes = read_text(path)
        return [Document(doc_id=doc_id, text=text.strip(), metadata={"title": readable_title(path)})], notes

    return load


@operator("indexing", "loading", "markdown", port=Port.LOAD)
def markdown_loader(params: LoaderParams, providers: Providers) -> Loader:
    """Markdown: optional YAML front matter becomes metadata (year, source, ...); title from it, the first heading or
    the file name made readable. Headings stay in the text, where the link table finds them."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        text, notes = read_text(path)
        meta, body = front_matter(text)
        title = meta.pop("title", None)
        if title is None:
            heading = next((ln[2:].strip() for ln in body.splitlines() if ln.startswith("# ")), None)
            title = heading or readable_title(path)
        if not body.strip():
            raise SkipFile("no text after the front matter")
        return [Document(doc_id=doc_id, text=body.strip(), metadata={"title": str(title), **meta})], notes

    return load


@operator("indexing", "loading", "jsonl", port=Port.LOAD)
def jsonl_loader(params: LoaderParams, providers: Providers) -> Loader:
    """JSON lines in BEIR corpus form: ``{"id" | "_id", "title", "text", ...}``; other scalar fields become metadata.
    Read line by line, each line at most ``max_file_mb`` (a longer one is skipped unread), so a file of any size is
    read within that bound; a bad line is skipped with its number and reason, the others are indexed."""

    def load(path: Path, doc_id: str) -> tuple[Iterable[Document], list[str]]:
        notes: list[str] = []
        return _jsonl_rows(path, notes, int(params.max_file_mb * 1e6)), notes

    return load


_SHOWN_LINES = 3
"""Bad lines named (with their number and reason) in a file's note; the rest are counted."""


def _jsonl_rows(path: Path, notes: list[str], max_line: int) -> Iterator[Document]:
    """The documents of a JSON-lines file, read line by line (memory bounded by ``max_line`` bytes); what was
    skipped is appended to ``notes`` when the file ends."""
    seen: set[str] = set()
    bad: dict[str, list[int]] = {}
    kept = 0
    latin1 = False
    with open(path, "rb") as fh:
        for number, (raw, whole) in enumerate(_bounded_lines(fh, max_line), 1):
            if not whole:
                bad.setdefault(f"longer than max_file_mb={max_line / 1e6:g}", []).append(number)
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line, latin1 = raw.decode("cp1252", errors="replace"), True
            if not line.strip():
                continue
            row, why = _row(line)
            if why:
                bad.setdefault(why, []).append(number)
                continue
            rid, body = str(row.get("id", row.get("_id"))), row["text"].strip()
            if not body:
                bad.setdefault("empty text", []).append(number)
                continue
            if rid in seen:
                bad.setdefault("duplicate id (the first kept)", []).append(number)
                continue
            seen.add(rid)
            meta = {
                k: v
                for k, v in row.items()
                if k not in ("id", "_id", "text") and isinstance(v, str | int | float | bool)
            }
            meta.setdefault("title", "")
            kept += 1
            yield Document(doc_id=rid, text=body, metadata=meta)
    if latin1:
        notes.append("not UTF-8 in places: those lines read as cp1252")
    for why, lines in bad.items():
        more = len(lines) - _SHOWN_LINES
        shown = ", ".join(map(str, lines[:_SHOWN_LINES])) + (f" and {more} more" if more > 0 else "")
        plural = "s" if len(lines) != 1 else ""
        notes.append(f"{len(lines)} line{plural} skipped: {why} (line{plural} {shown})")
    if not kept:
        raise SkipFile("no valid rows" + (f" ({'; '.join(notes)})" if notes else ""))


def _bounded_lines(fh: Any, limit: int) -> Iterator[tuple[bytes, bool]]:
    """The lines of a binary file, each read with at most ``limit`` bytes held: ``(line, True)``, or ``(b"", False)``
    for a line longer than that (read past in blocks, never held)."""
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            yield line, True
            continue
        while line and not line.endswith(b"\n"):
            line = fh.readline(1 << 20)
        yield b"", False


def _row(line: str) -> tuple[dict[str, Any], str]:
    """One line parsed as a corpus row, or why it is not one (JSON's own limits included: a number of over 4,300
    digits, nesting deeper than the interpreter's recursion limit)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return {}, f"not JSON ({exc.msg})"
    except ValueError as exc:  # int digits over sys.get_int_max_str_digits()
        return {}, f"not readable as JSON ({str(exc).split(';')[0]})"
    except RecursionError:
        return {}, "not readable as JSON (nested too deeply)"
    if not isinstance(row, dict):
        return {}, f"a JSON {type(row).__name__}, not an object"
    if row.get("id", row.get("_id")) is None:
        return {}, "no id (an 'id' or '_id' field)"
    if not isinstance(row.get("text"), str):
        return {}, "no 'text' string"
    return row, ""


def _optional(module: str, kind: str) -> Any:
    """Import a document library of the ``docs`` extra, or skip the file saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SkipFile(f"reading {kind} files needs {module}: pip install 'modular-rag[docs]'") from None


@operator("indexing", "loading", "pdf", port=Port.LOAD)
def pdf_loader(params: LoaderParams, providers: Providers) -> Loader:
    """PDF (pypdfium2, the ``docs`` extra): one document per page with its 1-based ``page`` in metadata, so citations
    can say "p. 3"; running headers and footers dropped, broken words and paragraphs joined, headings marked
    (:mod:`modular_rag.ingest.pdf`); titled by the PDF's title or the file name made readable. Encrypted and
    image-only PDFs are skipped with the reason."""

    def load(path: Path, doc_id: str) -> tuple[Iterable[Document], list[str]]:
        _optional("pypdfium2", "PDF")
        from modular_rag.ingest.pdf import pdf_pages, pdf_title

        try:
            title = pdf_title(path) or readable_title(path)
            pages = list(pdf_pages(path))
        except Exception as exc:  # PDFium raises PdfiumError for damaged or locked files
            if "password" in str(exc).lower():
                raise SkipFile("encrypted PDF (it needs a password)") from None
            raise SkipFile(f"unreadable PDF: {type(exc).__name__}: {exc}") from None
        if not pages:
            raise SkipFile("no extractable text: an image-only PDF needs OCR first")
        docs = [Document(doc_id=doc_id, text=text, metadata={"title": title, "page": n}) for n, text in pages]
        total = _page_count(path)
        notes = [f"{total - len(docs)} page(s) without text left out"] if len(docs) < total else []
        return docs, notes

    return load


def _page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    try:
        return len(doc)
    finally:
        doc.close()


@operator("indexing", "loading", "html", port=Port.LOAD)
def html_loader(params: LoaderParams, providers: Providers) -> Loader:
    """HTML (markdownify, the ``docs`` extra): the main text with its structure (:mod:`modular_rag.ingest.html`):
    sentences whole across inline markup, a definition's term carried into its description, table rows as
    ``header: value`` lines, headings as Markdown heading lines (where the link table finds them), code fenced,
    navigation and link-dense blocks dropped; titled by ``<title>`` (without a site suffix), the first heading or
    the file name made readable."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        _optional("markdownify", "HTML")
        from modular_rag.ingest.html import html_to_text

        raw, notes = read_text(path)
        text, title = html_to_text(raw)
        if not text:
            raise SkipFile("no text in the page's body")
        return [Document(doc_id=doc_id, text=text, metadata={"title": title or readable_title(path)})], notes

    return load


_UNPACKED = 5
"""A .docx is a zip: it is read only when its parts, unpacked, are at most this many times ``max_file_mb`` (Word's
XML holds about 3-5 bytes of markup per byte of text), so a small archive that unpacks to gigabytes is refused."""


@operator("indexing", "loading", "docx", port=Port.LOAD)
def docx_loader(params: LoaderParams, providers: Providers) -> Loader:
    """Word .docx (python-docx, the ``docs`` extra): paragraphs and tables in order, headings as Markdown heading
    lines, list items as ``- item`` lines, table rows as ``header: value`` lines (:mod:`modular_rag.ingest.docx`);
    titled by its core-properties title, its first heading or the file name made readable."""

    def load(path: Path, doc_id: str) -> tuple[list[Document], list[str]]:
        _optional("docx", "DOCX")
        from modular_rag.ingest.docx import docx_to_text

        try:
            with zipfile.ZipFile(path) as archive:
                unpacked = sum(info.file_size for info in archive.infolist())
            if unpacked > _UNPACKED * params.max_file_mb * 1e6:
                raise SkipFile(
                    f"{unpacked / 1e6:.1f} MB once unpacked, over {_UNPACKED} x max_file_mb={params.max_file_mb:g}"
                )
            text, title = docx_to_text(path)
        except (zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise SkipFile(f"not a .docx file ({exc})") from None
        if not text.strip():
            raise SkipFile("no text in the document")
        return [Document(doc_id=doc_id, text=text, metadata={"title": title or readable_title(path)})], []

    return load


# ------------------------------------------------------------------------------------------------------- chunkers


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


@operator("indexing", "chunking", "fixed", port=Port.CHUNK)
def fixed_chunker(params: SizeParams, providers: Providers) -> Chunker:
    """Fixed-size windows of ``chunk_size`` characters on word boundaries, overlapping by ``chunk_overlap``."""
    from langchain_text_splitters import CharacterTextSplitter

    splitter = CharacterTextSplitter(separator=" ", chunk_size=params.chunk_size, chunk_overlap=params.chunk_overlap)

    def chunk(doc: Document) -> list[Chunk]:
        return make_chunks(doc, splitter.split_text(" ".join(doc["text"].split())), params.prepend_title)

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
        return make_chunks(doc, splitter.split_text(doc["text"]), params.prepend_title)

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
        return make_chunks(doc, sentences, params.prepend_title, windows)

    return chunk


class DocumentParams(OperatorParams):
    prepend_title: bool = Field(True, description="start the chunk with the document title")


@operator("indexing", "chunking", "document", port=Port.CHUNK)
def document_chunker(params: DocumentParams, providers: Providers) -> Chunker:
    """The whole document as one chunk (short documents such as abstracts or FAQ entries)."""

    def chunk(doc: Document) -> list[Chunk]:
        return make_chunks(doc, [doc["text"]], params.prepend_title)

    return chunk


# ----------------------------------------------------------------------------------------------------- indexing run
