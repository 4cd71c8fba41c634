"""Indexing module: loaders (.txt, .md, .jsonl; .pdf, .html, .docx with the ``docs`` extra; folders of them),
chunkers, and the indexing run that writes the dense and sparse indexes together.

Loaders turn a file into documents; chunkers turn a document into chunks whose ids derive from the document id
and the chunk text, so indexing the same files again adds nothing. Every file read is either indexed or skipped
with a reason, and the summary's counts reconcile (``files_read == files_indexed + files_skipped``).
"""

from __future__ import annotations

import json
import re
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
        raise SkipFile("no valid rows" + (f" ({'; '.join(notes)})" if notes else ""))


def _optional(module: str, kind: str) -> Any:
    """Import a document library of the ``docs`` extra, or skip the file saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SkipFile(f"reading {kind} files needs {module}: pip install 'modular-rag[docs]'") from None


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
                raise SkipFile("encrypted PDF (it needs a password)")
            title = str((reader.metadata.title if reader.metadata else None) or readable_title(path))
            pages = [_tidy(page.extract_text() or "") for page in reader.pages]
        except SkipFile:
            raise
        except Exception as exc:  # pypdf raises many types for damaged files
            raise SkipFile(f"unreadable PDF: {type(exc).__name__}: {exc}") from None
        docs = [
            Document(doc_id=doc_id, text=text, metadata={"title": title, "page": n})
            for n, text in enumerate(pages, 1)
            if text
        ]
        if not docs:
            raise SkipFile(f"no extractable text in {len(pages)} page(s): an image-only PDF needs OCR first")
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
        raw, notes = read_text(path)
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
            raise SkipFile("no text in the page's body")
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
            raise SkipFile(f"not a .docx file ({exc})") from None
        if not text:
            raise SkipFile("no text in the document")
        found = re.search(r"<dc:title>([^<]+)</dc:title>", core)
        title = found.group(1).strip() if found else readable_title(path)
        return [Document(doc_id=doc_id, text=text, metadata={"title": title})], []

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
