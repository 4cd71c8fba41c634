"""Documents into chunks: the chunker's shape, the chunk format's version, and chunks made from a document's pieces
(the title put before each piece, ids derived from content)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from typing import Any

from modular_rag.ingest.files import (
    Document,
    chunk_id,
)
from modular_rag.state import Chunk

Chunker = Callable[[Document], list[Chunk]]

CHUNK_FORMAT = 3
"""Version of the chunks the chunkers make (part of the evaluation index cache key); 2: a Markdown heading that
repeats the title is not repeated after the prepended title; 3: metadata ``section``."""

_HEADING_MARKS = re.compile(r"#{1,6}[ \t]+")
_HEADING_LINE = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*$", re.MULTILINE)


def sections(text: str, pieces: Sequence[str]) -> list[str]:
    """For each piece of ``text`` (in order, as a splitter cut them), the Markdown heading in force where it begins
    (``""`` before the first heading, or where a piece cannot be found in the text, as after a splitter that
    squeezed whitespace)."""
    found = [(m.start(), m.group(1)) for m in _HEADING_LINE.finditer(text)]
    starts = [start for start, _ in found]
    out: list[str] = []
    cursor = 0
    for piece in pieces:
        probe = piece.strip()[:80]
        at = text.find(probe, cursor) if probe else -1
        if at >= 0:
            cursor = at
        else:
            at = cursor
        n = bisect.bisect_left(starts, at)  # the headings that start before the piece
        out.append(found[n - 1][1] if n else "")
    return out


def with_title(title: str, piece: str) -> str:
    """``piece`` starting with ``title`` once: a leading Markdown heading of the title becomes the plain title
    (also when a chunker has folded the heading's line break into a space)."""
    body = piece.strip()
    marks = _HEADING_MARKS.match(body)
    if marks and body.startswith(title, marks.end()):
        rest = body[marks.end() + len(title) :]
        if not rest or rest[0].isspace():
            body = rest.lstrip()
    return body if body.startswith(title) else f"{title}\n{body}"


def make_chunks(
    doc: Document, pieces: Sequence[str], prepend_title: bool, extra: Sequence[dict[str, Any]] | None = None
) -> list[Chunk]:
    title = str(doc["metadata"].get("title") or "")
    kept = [(i, p) for i, p in enumerate(pieces) if p.strip()]  # extra is indexed like the kept pieces
    heads = sections(doc["text"], [p for _, p in kept])
    chunks = []
    for position, ((_, piece), section) in enumerate(zip(kept, heads, strict=True)):
        text = with_title(title, piece) if prepend_title and title else piece.strip()
        meta = {**doc["metadata"], "doc_id": doc["doc_id"], "position": position}
        if section and "section" not in meta:
            meta["section"] = section
        if extra:
            meta.update(extra[position])
        chunks.append(Chunk(chunk_id=chunk_id(doc["doc_id"], text), text=text, metadata=meta))
    return chunks
