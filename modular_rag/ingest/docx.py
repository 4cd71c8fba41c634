"""Word documents into text that keeps their structure, for the ``docx`` loader (python-docx, the ``docs`` extra):
paragraphs and tables in document order; ``Title`` and ``Heading N`` styles become Markdown heading lines, list
paragraphs ``- item`` lines, and table rows ``header: value`` lines, as the HTML loader writes them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["docx_to_text"]

_HEADING = re.compile(r"^(?:heading|überschrift|titre)\s*(\d)$", re.I)


def docx_to_text(path: Path) -> tuple[str, str]:
    """The document's text with its structure, and its title (core properties, else its first heading; ``""``).

    Raises:
        ImportError: If python-docx is not installed (the ``docs`` extra).
        ValueError, KeyError, zipfile.BadZipFile: If the file is not a Word document.
    """
    import docx

    document = docx.Document(str(path))
    title = (document.core_properties.title or "").strip()
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if hasattr(item, "rows"):
            blocks.extend(_table_rows(item))
            continue
        text = " ".join(item.text.split())
        if not text:
            continue
        style = (item.style.name if item.style is not None else "") or ""
        level = 1 if style.lower() == "title" else int(m.group(1)) if (m := _HEADING.match(style)) else 0
        if level:
            blocks.append(f"{'#' * min(level, 6)} {text}")
            title = title or text
        elif style.lower().startswith("list") or item._p.pPr is not None and item._p.pPr.numPr is not None:
            blocks.append(f"- {text}")
        else:
            blocks.append(text)
    return "\n\n".join(blocks), title


def _table_rows(table: Any) -> list[str]:
    """A table's rows as ``header: value`` lines (the first row is the header when the table has more than one)."""
    rows = [[" ".join(cell.text.split()) for cell in row.cells] for row in table.rows]
    rows = [r for r in rows if any(r)]
    if not rows:
        return []
    header, body = (rows[0], rows[1:]) if len(rows) > 1 else (None, rows)
    out = []
    for row in body:
        if header and len(header) == len(row) and any(header):
            line = "; ".join(f"{h}: {v}" if h else v for h, v in zip(header, row, strict=True) if v)
        elif len(row) == 2:
            line = f"{row[0]}: {row[1]}"
        else:
            line = " | ".join(c for c in row if c)
        out.append(line if line.endswith((".", "!", "?", ":", ";")) else f"{line}.")
    return out
