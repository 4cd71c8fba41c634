"""Files into documents: every file under the given paths, each read by the loader for its suffix (a bad file is
skipped with the reason, never raised), a document's shape and its chunks' content-derived ids."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import yaml
from pydantic import Field

from modular_rag.errors import SourceNotFoundError
from modular_rag.providers import Providers
from modular_rag.registry import OperatorParams, Port, get_operator


class Document(TypedDict):
    """A loaded document, before chunking."""

    doc_id: str
    text: str
    metadata: dict[str, Any]


def chunk_id(doc_id: str, text: str) -> str:
    """The content-derived id of a chunk: 24 hex digits of SHA-256 over the document id and the chunk text."""
    return hashlib.sha256(f"{doc_id}\x00{text}".encode()).hexdigest()[:24]


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
read line by line); notes are appended to while it is consumed, and :class:`SkipFile` may be raised then too."""

STREAMED = frozenset({".jsonl"})
"""Line-oriented formats read as a stream: no ``max_file_mb`` cap (formats read whole keep it)."""


def read_text(path: Path) -> tuple[str, list[str]]:
    raw = path.read_bytes()
    if not raw.strip():
        raise SkipFile("empty file")
    if b"\x00" in raw[:8192]:
        raise SkipFile("binary file (NUL bytes)")
    try:
        return raw.decode("utf-8-sig"), []
    except UnicodeDecodeError as exc:
        return raw.decode("cp1252", errors="replace"), [f"not UTF-8 ({exc.reason} at byte {exc.start}); read as cp1252"]


class SkipFile(Exception):
    """A file is skipped; the message is the reason."""


def front_matter(text: str) -> tuple[dict[str, Any], str]:
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
    rel = relative_path(path, root)
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
            raise SkipFile(f"{size_mb:.1f} MB is larger than max_file_mb={max_file_mb:g}")
        loader = get_operator(Port.LOAD, name).factory(LoaderParams(max_file_mb=max_file_mb), providers)
        doc_id = rel.rsplit(".", 1)[0] if name != "jsonl" else rel
        docs, notes = loader(path, doc_id)
        for d in docs:
            d["metadata"].setdefault("path", rel)
            count += 1
            report.documents = count
            yield d
    except SkipFile as reason:
        report.skipped = str(reason)
        return
    except OSError as exc:
        report.skipped = f"unreadable: {exc.strerror or exc}"
        return
    report.documents, report.notes = count, notes


def relative_path(path: Path, root: Path) -> str:
    """A file's name in the index (metadata ``path``): relative to the folder given, or its name."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
