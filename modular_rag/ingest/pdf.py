"""PDF pages into text that keeps their structure, for the ``pdf`` loader. The text layer comes from PDFium
(pypdfium2, the ``docs`` extra), which keeps reading order and ligatures ("ﬁrst" reads "first") and marks the hyphens
that break a word at a line end; on it the kit:

* drops running headers and footers: a line at the top or bottom of a page whose shape (digits aside) recurs at the
  top or bottom of another page (a chapter's running title recurs only over its own pages), and bare page numbers
  there;
* joins words broken at a line end (PDFium's soft hyphen), and the lines of a paragraph into one;
* starts a new paragraph after a short line that ends a sentence, at a list bullet, and at a heading: a short line
  without final punctuation that is numbered like a section (``3.1 Interface summary``) or stands alone between
  paragraphs, written ``## heading`` as the HTML loader writes headings.

``benchmarks/results/manual-loaders.txt`` compares it with pypdf and pdfplumber on a real manual's evidence
sentences.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

__all__ = ["pdf_pages", "pdf_title"]

_SOFT_HYPHEN = "\ufffe"
_EDGE = 2
"""Lines at the top and at the bottom of a page that may be a running header or footer."""
_PAGE_NUMBER = re.compile(r"^(?:page\s+)?(?:\d{1,4}|[ivxlcdm]{1,6})(?:\s*(?:/|of)\s*\d{1,4})?$", re.I)
_SECTION = re.compile(
    r"^(?:\d{1,2}(?:\.\d{1,2}){0,3}\.?|[A-Z]\.(?:\d{1,2}(?:\.\d{1,2})*)?|Chapter \d+|Appendix [A-Z])\s+\S"
)
_BULLET = re.compile(r"^(?:[•◦▪‣∙●○■–—*]|-(?=\s)|\(?\d{1,2}[.)](?=\s)|\(?[a-z][.)](?=\s))\s*")
_ENDS = (".", "!", "?", ":", ";", "”", '"', ")")
"""How a line that is no heading may end."""
_STOPS = (".", "!", "?", ".”", '."', ".)", "?”", "!”")
"""How a sentence ends: a short line ending so closes its paragraph."""


def pdf_title(path: Path) -> str:
    """The PDF's own title (its document information), or ``""``."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    try:
        return str(doc.get_metadata_dict().get("Title") or "").strip()
    finally:
        doc.close()


def pdf_pages(path: Path) -> Iterator[tuple[int, str]]:
    """Each page with text, as ``(1-based page number, its text)`` (see the module's docstring).

    Raises:
        ImportError: If pypdfium2 is not installed (the ``docs`` extra).
        pypdfium2.PdfiumError: If the file is not a PDF PDFium can open (damaged, or encrypted with a password).
    """
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    try:
        pages: list[list[str]] = []
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            raw = textpage.get_text_range()
            textpage.close()
            page.close()
            pages.append([ln.strip() for ln in raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")])
    finally:
        doc.close()
    running = _running_lines(pages)
    kept = [_without_edges(lines, running) for lines in pages]
    widths = sorted(len(ln) for lines in kept for ln in lines if len(ln) > 20)
    typical = float(widths[len(widths) * 3 // 4]) if widths else 60.0  # a full line's width: the upper quartile
    for n, lines in enumerate(kept, 1):
        text = _paragraphs(lines, typical)
        if text.strip():
            yield n, text


def _shape(line: str) -> str:
    """A line with its digits made one mark, so "5. Going further 26" and "5. Going further 27" match."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def _running_lines(pages: list[list[str]]) -> set[str]:
    """The shapes of the lines that recur at page edges: running headers and footers."""
    counts: Counter[str] = Counter()
    for lines in pages:
        body = [ln for ln in lines if ln]
        counts.update({_shape(ln) for ln in body[:_EDGE] + body[-_EDGE:]})
    if len(pages) < 4:  # too few pages to tell a running line from a repeated one
        return set()
    return {shape for shape, count in counts.items() if count >= 2 and shape.strip("# ")}


def _without_edges(lines: list[str], running: set[str]) -> list[str]:
    """A page's lines without its running header and footer lines and bare page numbers at its edges."""
    body = [ln for ln in lines if ln]
    edge = set(range(min(_EDGE, len(body)))) | set(range(max(0, len(body) - _EDGE), len(body)))
    return [ln for i, ln in enumerate(body) if not (i in edge and (_shape(ln) in running or _PAGE_NUMBER.match(ln)))]


def _is_heading(line: str, before: str | None, after: str | None, typical: float) -> bool:
    """A heading line: short, no final punctuation, numbered like a section or alone between paragraphs."""
    if not line or len(line) > 0.75 * typical or line.endswith(_ENDS) or line.endswith(","):
        return False
    if _BULLET.match(line) and not _SECTION.match(line):
        return False
    words = line.split()
    if len(words) > 12 or not any(ch.isalpha() for ch in line):
        return False
    if _SECTION.match(line):
        return True
    starts_paragraph = after is not None and after[:1].isupper()
    ends_paragraph = before is None or before.endswith(_ENDS)
    return starts_paragraph and ends_paragraph and line[:1].isupper()


def _paragraphs(lines: list[str], typical: float) -> str:
    """Lines joined into paragraphs (soft hyphens healed) and headings marked."""
    blocks: list[str] = []
    current = ""

    def close() -> None:
        nonlocal current
        if current.strip():
            blocks.append(current.strip())
        current = ""

    previous: str | None = None
    for i, line in enumerate(lines):
        after = lines[i + 1] if i + 1 < len(lines) else None
        if _is_heading(line, previous, after, typical):
            close()
            blocks.append("## " + " ".join(line.split()))
            previous = None
            continue
        ended = previous is not None and previous.endswith(_STOPS) and len(previous) < 0.8 * typical
        if _BULLET.match(line) or ended:
            close()
        joined = current[:-1] if current.endswith(_SOFT_HYPHEN) else f"{current} " if current else ""
        current = joined + line
        previous = line
    close()
    return "\n\n".join(b.replace(_SOFT_HYPHEN, "") for b in blocks)
