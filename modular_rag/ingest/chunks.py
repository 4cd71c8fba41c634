"""Documents into chunks: the chunker's shape, the chunk format's version, and chunks made from a document's pieces
(the title put before each piece, ids derived from content)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from modular_rag.ingest.files import (
    Document,
    chunk_id,
)
from modular_rag.state import Chunk

Chunker = Callable[[Document], list[Chunk]]

CHUNK_FORMAT = 2
"""Version of the chunk texts the chunkers make (part of the evaluation index cache key); 2: a Markdown heading
that repeats the title is not repeated after the prepended title."""

_HEADING_MARKS = re.compile(r"#{1,6}[ \t]+")


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
    chunks = []
    for i, piece in enumerate(p for p in pieces if p.strip()):
        text = with_title(title, piece) if prepend_title and title else piece.strip()
        meta = {**doc["metadata"], "doc_id": doc["doc_id"], "position": i}
        if extra:
            meta.update(extra[i])
        chunks.append(Chunk(chunk_id=chunk_id(doc["doc_id"], text), text=text, metadata=meta))
    return chunks
