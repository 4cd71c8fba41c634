"""HTML pages into text that keeps their structure, for the ``html`` loader: markdownify (a BeautifulSoup-based
converter) renders the page, with the kit's rules for what documentation pages hold:

* inline markup stays inside its sentence (code, emphasis and links become their plain text), so a sentence is
  never cut at a tag;
* a definition list's term is carried into its description (``--soft: Does not touch the index file ...``), one
  paragraph per description, so the sentence that answers "what does --soft do" names it;
* a table row becomes one line of ``header: value`` pairs (``Setting: autovacuum; Default: on``), or ``key: value``
  for a two-column table without a header;
* headings become Markdown heading lines (``## Options``), list items paragraphs of their own (``- item``), code
  blocks fenced (```` ```code ```` ... ```` ``` ````: kept for search, never read as sentences);
* navigation and boilerplate are dropped: scripts, forms, ``nav``/``header``/``footer``/``aside``, ARIA navigation
  roles, permalink marks, and link-dense blocks (most of their words are link text: "Prev Up Home Next", a
  sidebar's table of contents).

``benchmarks/results/manual-loaders.txt`` compares it with the kit's earlier loader, trafilatura, html2text,
inscriptis and html-text on the evidence sentences of two real manuals.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["html_to_text"]

_DROP = (
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "iframe",
    "form",
    "nav",
    "header",
    "footer",
    "aside",
    "button",
    "input",
    "select",
    "textarea",
    "head",
)
_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary", "menubar", "toolbar"}
_BLOCKS = ("div", "table", "ul", "ol", "p", "td", "section", "h1", "h2", "h3", "h4", "h5", "h6", "span")
_LINK_SHARE = 0.7
"""A block whose words are at least this share link text is navigation (a sidebar, "Prev | Up | Next")."""
_PERMALINK = re.compile(r"[¶§🔗]")


def html_to_text(raw: str) -> tuple[str, str]:
    """A page's main text with its structure (see the module's docstring) and its title (``<title>`` up to a site
    suffix such as `` | Docs``, else the first ``<h1>``; empty when it has neither).

    Raises:
        ImportError: If BeautifulSoup or markdownify is not installed (the ``docs`` extra).
    """
    import warnings

    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():  # XHTML pages (an <?xml ...?> declaration) parse as HTML, as browsers do
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup: Any = BeautifulSoup(raw, _parser())
    title = _title(soup)
    for tag in soup.find_all(_DROP):
        tag.decompose()
    for tag in soup.find_all(attrs={"role": True}):
        if not tag.decomposed and str(tag.get("role", "")).lower() in _ROLES:
            tag.decompose()
    for tag in soup.find_all("a", class_=re.compile("headerlink|anchor|permalink")):
        tag.decompose()
    body = soup.find("main") or soup.find(attrs={"role": "main"}) or soup.find("article") or soup.body or soup
    _drop_link_dense(body)
    text = _converter().convert_soup(body)
    return _tidy(text), title


def _parser() -> str:
    """lxml's parser when installed (faster, and as lenient), else Python's own."""
    try:
        import lxml  # noqa: F401
    except ImportError:
        return "html.parser"
    return "lxml"


def _title(soup: Any) -> str:
    """``<title>`` without a site suffix ("Settings — Django 3.2 documentation" -> "Settings"), else the first
    heading."""
    found = soup.title.get_text(" ", strip=True) if soup.title else ""
    found = re.split(r"\s+(?:\||—|–|::)\s+", found)[0].strip()
    if not found:
        heading = soup.find("h1")
        found = heading.get_text(" ", strip=True) if heading else ""
    return _PERMALINK.sub("", found).strip()


def _drop_link_dense(root: Any) -> None:
    """Remove the blocks under ``root`` whose words are mostly link text (navigation). Words and link words are
    counted once per element, children before parents (one pass, however deep the page); blocks are then judged
    outermost first, and a removed block's children go with it."""
    from bs4 import CData, NavigableString, Tag

    words: dict[int, int] = {}
    linked: dict[int, int] = {}
    prose: dict[int, bool] = {}  # a dl, pre or p below it
    order: list[Any] = []
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:  # iterative post-order: a page nested thousands deep is no recursion
        node, done = stack.pop()
        if done:
            total = link = 0
            below = False
            for child in node.children:
                if isinstance(child, Tag):
                    total += words[id(child)]
                    link += linked[id(child)]
                    below = below or prose[id(child)] or child.name in ("dl", "pre", "p")
                elif type(child) in (NavigableString, CData):  # text, not comments or declarations
                    total += len(child.split())
            words[id(node)] = total
            linked[id(node)] = total if node.name == "a" else link
            prose[id(node)] = below
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in node.children if isinstance(child, Tag))
    doomed: set[int] = set()
    for tag in reversed(order):  # parents before their children
        if tag is root or tag.name not in _BLOCKS or (tag.parent is not None and id(tag.parent) in doomed):
            if tag.parent is not None and id(tag.parent) in doomed:
                doomed.add(id(tag))
            continue
        total = words[id(tag)]
        holds_prose = tag.name in ("div", "section") and prose[id(tag)]
        if total and linked[id(tag)] >= _LINK_SHARE * total and not holds_prose:
            doomed.add(id(tag))
    for tag in order:
        if id(tag) in doomed and (tag.parent is None or id(tag.parent) not in doomed):
            tag.decompose()


def _converter() -> Any:
    from markdownify import ATX, MarkdownConverter

    class Structured(MarkdownConverter):
        """markdownify with the kit's rendering of terms, tables, lists and inline markup."""

        def _render(self, node: Any, parent_tags: set[str]) -> str:
            """markdownify's rendering of one node (an element or a string) under the given parent tags."""
            converter: Any = self  # markdownify's own methods, which its type hints leave out
            return str(converter.process_element(node, parent_tags=parent_tags))

        def convert_a(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return text

        def convert_img(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return ""

        def convert_code(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return text

        convert_kbd = convert_code
        convert_samp = convert_code
        convert_tt = convert_code

        def convert_em(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return text

        convert_i = convert_em
        convert_b = convert_em
        convert_strong = convert_em
        convert_var = convert_em
        convert_cite = convert_em

        def convert_hN(self, n: int, el: Any, text: str, parent_tags: set[str]) -> str:  # noqa: N802
            words = " ".join(_PERMALINK.sub("", text).split())
            if "_inline" in parent_tags:
                return words
            return f"\n\n{'#' * min(max(n, 1), 6)} {words}\n\n" if words else ""

        def convert_li(self, el: Any, text: str, parent_tags: set[str]) -> str:
            body = " ".join(text.split()) if "\n\n" not in text.strip() else text.strip()
            return f"\n\n- {body}\n\n" if body else ""

        def convert_list(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return f"\n\n{text.strip()}\n\n"

        convert_ul = convert_list
        convert_ol = convert_list

        def convert_dt(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return " ".join(text.split())

        def convert_dd(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return f"\n\n{text.strip()}\n\n"

        def convert_dl(self, el: Any, text: str, parent_tags: set[str]) -> str:
            out: list[str] = []
            terms: list[str] = []
            inner = {*parent_tags, "dl"}
            for child in el.find_all(["dt", "dd"], recursive=False):
                rendered = self._render(child, inner).strip()
                if child.name == "dt":
                    if rendered:
                        terms.append(rendered)
                    continue
                lead, terms = ", ".join(terms), []
                if not rendered:
                    out.append(lead)
                elif lead:
                    block = rendered.startswith(("```", "- "))
                    out.append(f"{lead}:\n\n{rendered}" if block else f"{lead}: {rendered}")
                else:
                    out.append(rendered)
            if terms:
                out.append(", ".join(terms))
            return "\n\n" + "\n\n".join(o for o in out if o) + "\n\n"

        def convert_table(self, el: Any, text: str, parent_tags: set[str]) -> str:
            inline = {*parent_tags, "_inline"}
            rows = [
                [
                    " ".join("".join(self._render(part, inline) for part in cell.children).split())
                    for cell in tr.find_all(["td", "th"])
                ]
                for tr in el.find_all("tr")
            ]
            rows = [r for r in rows if any(r)]
            if not rows:
                return ""
            first = el.find("tr")
            header = rows[0] if first is not None and (first.find_parent("thead") or not first.find("td")) else None
            body = rows[1:] if header else rows
            lines = []
            for row in body:
                if header and len(header) == len(row):
                    pairs = [f"{h}: {v}" for h, v in zip(header, row, strict=True) if v]
                    lines.append("; ".join(pairs))
                elif len(row) == 2 and row[0]:
                    lines.append(f"{row[0]}: {row[1]}")
                else:
                    lines.append(" | ".join(c for c in row if c))
            caption = el.find("caption")
            head = f"{' '.join(caption.get_text(' ').split())}\n\n" if caption else ""
            return "\n\n" + head + "\n\n".join(_sentence(line) for line in lines if line) + "\n\n"

        def convert_caption(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return ""

        def convert_pre(self, el: Any, text: str, parent_tags: set[str]) -> str:
            code = el.get_text().strip("\n")
            return f"\n\n```code\n{code}\n```\n\n" if code.strip() else ""

        def convert_br(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return "\n"

        def convert_hr(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return "\n\n"

    return Structured(heading_style=ATX, escape_asterisks=False, escape_underscores=False, escape_misc=False)


def _sentence(line: str) -> str:
    """A table row as a sentence of its own (a full stop unless it ends in punctuation)."""
    line = line.strip()
    return line if not line or line[-1] in ".!?:;" else f"{line}."


def _tidy(text: str) -> str:
    """Collapse runs of blank lines and trailing spaces; code blocks keep their lines."""
    out: list[str] = []
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            out.append(line)
            continue
        if in_code:
            out.append(line.rstrip())
            continue
        line = " ".join(line.split())
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()
