"""Files into documents: every file under the given paths, each read by the loader for its suffix (a bad file is
skipped with the reason, never raised), a document's shape and its chunks' content-derived ids."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

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
    """With ``sync``: ``added`` (new file), ``replaced`` (changed), ``unchanged``, ``completed`` (unchanged, but some
    of its chunks were missing from the store, as a run stopped part-way leaves them, and are written now), or
    ``removed`` (its chunks left the index: the file is gone, or now skipped)."""


Loader = Callable[[Path, str], tuple[Iterable[Document], list[str]]]
"""A loader: ``(path, document id) -> (documents, notes)``. The documents may be a lazy iterable (a JSON-lines file is
read line by line); notes are appended to while it is consumed, and :class:`SkipFile` may be raised then too."""

STREAMED = frozenset({".jsonl"})
"""Line-oriented formats read as a stream: no ``max_file_mb`` cap (formats read whole keep it)."""


_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)
"""Byte-order marks of the encodings whose text holds NUL bytes (UTF-8's is handled by ``utf-8-sig``)."""

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufffd]")
"""Characters no text file is made of: C0 controls but tab, newlines, vertical tab and form feed; DEL; U+FFFD."""


def read_text(path: Path) -> tuple[str, list[str]]:
    """A text file's text and the notes on how it was read: UTF-8 (or UTF-16/32 with a byte-order mark) as is; any
    other encoding as charset-normalizer detects it, with a note naming it.

    Raises:
        SkipFile: If the file is empty, or not text: NUL bytes anywhere without a UTF-16/32 byte-order mark, no
            encoding that fits its bytes, or more than 1% control characters once decoded.
    """
    raw = path.read_bytes()
    if not raw.strip():
        raise SkipFile("empty file")
    notes: list[str] = []
    bom = next((enc for mark, enc in _BOMS if raw.startswith(mark)), None)
    if bom is not None:
        try:
            text = raw.decode(bom)
        except UnicodeDecodeError as exc:
            raise SkipFile(
                f"binary file (a {bom} byte-order mark, then bytes that are not {bom}: {exc.reason})"
            ) from None
    elif (nul := raw.find(b"\x00")) >= 0:
        raise SkipFile(f"binary file (NUL byte at offset {nul})")
    else:
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            text, encoding = _detected(raw)
            notes.append(f"not UTF-8 ({exc.reason} at byte {exc.start}); read as {encoding}")
    junk = len(_CONTROL.findall(text))
    if junk > max(1, len(text) // 100):
        raise SkipFile(f"binary file ({junk} control characters in {len(text)}: not text)")
    return text, notes


def _detected(raw: bytes) -> tuple[str, str]:
    """Bytes that are not UTF-8 decoded in the encoding charset-normalizer finds for them, and its name.

    Raises:
        SkipFile: If no encoding fits (binary data).
    """
    from charset_normalizer import from_bytes

    found = from_bytes(raw[: 1 << 20])  # the first MB decides; the whole file is decoded with it
    best = found.best()
    if best is None or best.encoding is None:
        raise SkipFile("binary file (not UTF-8, and no text encoding fits its bytes)")
    # on a tie (short texts fit many code pages equally well), Windows' Western code page, the commonest non-UTF-8 text
    tied = [m for m in found if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    encoding = "cp1252" if any("cp1252" in m.could_be_from_charset for m in tied) else best.encoding
    return raw.decode(encoding, errors="replace"), encoding


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


class FoundFile(NamedTuple):
    """A file under the given paths: where it is, the folder it was found under, and why it is not read (a symlink
    out of that folder, a broken link or a loop, a FIFO or device), or ``None``."""

    path: Path
    root: Path
    refused: str | None = None


FOLLOW_HINT = "--follow-symlinks (index_paths(follow_symlinks=True)) reads it"


def iter_files(paths: Iterable[str | Path], *, follow_symlinks: bool = False) -> Iterator[FoundFile]:
    """Every file under the given files and folders, sorted, hidden entries (names starting with ``.``) left out.

    A symbolic link is read when its target lies inside the folder given (a link to a file is read under the link's
    name; a link to a folder is not walked, its files are read where they lie). Without ``follow_symlinks`` a link
    whose target lies outside that folder is refused, not read, so nothing is indexed that the folder does not hold;
    with it, the link's file or folder is read (each real folder walked once, so a cycle ends). Broken links, link
    loops, FIFOs, sockets and devices are refused with the reason; a file given by name is read wherever it lies.

    Args:
        paths: Files and folders.
        follow_symlinks: Read what links point to outside the folder given.

    Raises:
        SourceNotFoundError: If a path does not exist.
    """
    for given in paths:
        root = Path(given)
        if not root.exists():
            raise SourceNotFoundError(f"no such file or folder: {root}")
        if not root.is_dir():
            yield FoundFile(root, root.parent, None if root.is_file() else _not_regular(root))
            continue
        real_root = Path(os.path.realpath(root))
        yield from _walk(root, root, real_root, follow_symlinks, {real_root})


def _walk(folder: Path, root: Path, real_root: Path, follow: bool, walked: set[Path]) -> Iterator[FoundFile]:
    """The files under ``folder`` (part of :func:`iter_files`); ``walked`` holds the real folders already walked."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        yield FoundFile(folder, root, f"unreadable folder: {exc.strerror or exc}")
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        if entry.is_symlink():
            target, refused = _link_target(path)
            if refused is not None:
                yield FoundFile(path, root, refused)
                continue
            assert target is not None
            inside = target.is_relative_to(real_root)
            if target.is_dir():
                if inside:
                    continue  # its files are read where they lie inside the folder
                if not follow:
                    yield FoundFile(
                        path, root, f"symlink to a folder outside the given folder ({target}): not read; {FOLLOW_HINT}"
                    )
                elif target not in walked:
                    walked.add(target)
                    yield from _walk(path, root, real_root, follow, walked)
                continue
            if not inside and not follow:
                yield FoundFile(
                    path, root, f"symlink to a file outside the given folder ({target}): not read; {FOLLOW_HINT}"
                )
                continue
            yield FoundFile(path, root, None if target.is_file() else _not_regular(target))
        elif entry.is_dir(follow_symlinks=False):
            real = Path(os.path.realpath(path))
            if real not in walked:
                walked.add(real)
                yield from _walk(path, root, real_root, follow, walked)
        elif entry.is_file(follow_symlinks=False):
            yield FoundFile(path, root)
        else:
            yield FoundFile(path, root, _not_regular(path))


def _link_target(link: Path) -> tuple[Path | None, str | None]:
    """Where a symbolic link leads, or why it leads nowhere (broken, a loop)."""
    try:
        os.stat(link)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "symlink loop (it leads back to itself): not read"
        return None, f"broken symlink (its target {os.readlink(link)!r} does not exist): not read"
    return Path(os.path.realpath(link)), None


def _not_regular(path: Path) -> str:
    """Why a path that exists but is no regular file is not read."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    kind = next(
        (
            name
            for test, name in (
                (stat.S_ISFIFO, "a FIFO"),
                (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a device"),
                (stat.S_ISBLK, "a device"),
            )
            if test(mode)
        ),
        "neither a file nor a folder",
    )
    return f"not a regular file ({kind}): not read"


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
    except Exception as exc:  # a loader's library failing on a hostile file: that file is skipped, the run goes on
        read = f" ({count} document{'s' if count != 1 else ''} read before it were indexed)" if count else ""
        report.skipped = f"{name} loader failed: {type(exc).__name__}: {_clip(str(exc))}{read}"
        return
    report.documents, report.notes = count, notes


def _clip(text: str, limit: int = 160) -> str:
    """A library's message, on one line and at most ``limit`` characters (some quote the whole input)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def relative_path(path: Path, root: Path) -> str:
    """A file's name in the index (metadata ``path``): relative to the folder given, or its name."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
