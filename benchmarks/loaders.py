"""Which HTML and PDF text extraction keeps a manual's answering sentences whole: the kit's loaders against
libraries that do the same job, on the gold pages of the manual question sets (``benchmarks/manuals/``).

    .venv/bin/python benchmarks/loaders.py [--manuals git,django,texworks] [--save]

For every answerable question, each sentence of its gold evidence (as the page's visible text reads) is looked for
in what each extractor made of the gold page: **kept** (its words, in order, are in the page's text) and **whole**
(they are inside one sentence of the kit's splitter: a sentence cut by a tag, a line end or a running header is
not). Also per extractor: the sentences it makes of the gold pages, the share of 4 words or fewer (**short**), the
share without final punctuation (**open**), and the seconds it takes. Extractors the machine lacks are left out;
the comparison ones install with ``pip install trafilatura html2text inscriptis html-text pdfplumber pypdf``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "manuals"))

from common import main as common_main  # noqa: E402

_TOK = re.compile(r"\w+")


def _tokens(text: str) -> str:
    return " ".join(_TOK.findall(text.lower()))


def _kit_html(path: Path) -> str:
    from modular_rag.ingest.html import html_to_text

    return html_to_text(path.read_text(errors="replace"))[0]


def _before_html(path: Path) -> str:
    """The kit's HTML loader before structure was kept: BeautifulSoup's get_text("\\n") of the main element."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(path.read_text(errors="replace"), "html.parser")
    for tag in soup.find_all(("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form")):
        tag.decompose()
    body = soup.find("main") or soup.find("article") or soup.body or soup
    for tag in body.find_all(("h1", "h2", "h3", "h4", "h5", "h6")):
        words = tag.get_text(" ", strip=True)
        if words:
            tag.replace_with(f"\n{'#' * int(tag.name[1])} {words}\n")
    lines = [" ".join(line.split()) for line in body.get_text("\n").splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out)


def _trafilatura(path: Path) -> str:
    import trafilatura

    html = path.read_text(errors="replace")
    return trafilatura.extract(html, output_format="markdown", include_tables=True, favor_recall=True) or ""


def _html2text(path: Path) -> str:
    import html2text

    h = html2text.HTML2Text()
    h.ignore_links, h.ignore_images, h.body_width = True, True, 0
    return h.handle(path.read_text(errors="replace"))


def _inscriptis(path: Path) -> str:
    from inscriptis import get_text

    return get_text(path.read_text(errors="replace"))


def _html_text(path: Path) -> str:
    import html_text

    return html_text.extract_text(path.read_text(errors="replace"), guess_layout=True)


HTML: dict[str, Callable[[Path], str]] = {
    "kit (markdownify + rules)": _kit_html,
    "kit before (bs4 get_text)": _before_html,
    "trafilatura (markdown)": _trafilatura,
    "html2text": _html2text,
    "inscriptis": _inscriptis,
    "html-text": _html_text,
}


def _kit_pdf(path: Path) -> list[str]:
    from modular_rag.ingest.pdf import pdf_pages

    got = dict(pdf_pages(path))
    return [got.get(n, "") for n in range(1, max(got, default=0) + 1)]


def _pypdf(path: Path) -> list[str]:
    import pypdf

    return [page.extract_text() or "" for page in pypdf.PdfReader(str(path)).pages]


def _pdfplumber(path: Path) -> list[str]:
    import pdfplumber

    with pdfplumber.open(str(path)) as doc:
        return [page.extract_text() or "" for page in doc.pages]


def _pdfium_raw(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    return [doc[i].get_textpage().get_text_range() for i in range(len(doc))]


PDF: dict[str, Callable[[Path], list[str]]] = {
    "kit (pypdfium2 + rules)": _kit_pdf,
    "kit before (pypdf)": _pypdf,
    "pdfplumber": _pdfplumber,
    "pypdfium2 alone": _pdfium_raw,
}


def _texts(manual: str, name: str, pages: list[str]) -> tuple[dict[str, str], float] | None:
    """Each gold page's text by one extractor, and the seconds it took (``None`` when it is not installed)."""
    from fetch import manual_path

    root = manual_path(manual)
    start = time.perf_counter()
    try:
        if manual == "texworks":
            files = sorted({p.split("#")[0] for p in pages})
            out = {}
            for file in files:
                for n, text in enumerate(PDF[name](root / file), 1):
                    out[f"{file}#page={n}"] = text
            return out, time.perf_counter() - start
        return {p: HTML[name](root / p) for p in pages}, time.perf_counter() - start
    except ImportError:
        return None


def run(args: argparse.Namespace) -> int:
    """Print one table per manual."""
    from modular_rag.tables import format_table
    from modular_rag.text import split_sentences

    for manual in args.manuals.split(","):
        questions = [json.loads(line) for line in (ROOT / "benchmarks" / "manuals" / f"{manual}.jsonl").open()]
        pages = sorted({g for q in questions for g in q["gold"]})
        rows = []
        for name in PDF if manual == "texworks" else HTML:
            got = _texts(manual, name, pages)
            if got is None:
                continue
            texts, seconds = got
            split = {p: [_tokens(s) for s in split_sentences(t)] for p, t in texts.items()}
            kept = whole = total = 0
            for q in questions:
                for evidence, page in zip(q["evidence"].split("\n"), q["gold"], strict=False):
                    doc = _tokens(texts.get(page, ""))
                    for sentence in split_sentences(evidence):
                        words = _tokens(sentence)
                        if not words:
                            continue
                        total += 1
                        kept += words in doc
                        whole += any(words in s for s in split.get(page, []))
            sentences = [s for t in texts.values() for s in split_sentences(t)]
            short = sum(len(s.split()) <= 4 for s in sentences) / max(1, len(sentences))
            unclosed = sum(not s.rstrip().endswith((".", "?", "!", ":")) for s in sentences) / max(1, len(sentences))
            rows.append(
                [name, f"{kept / total:.2f}", f"{whole / total:.2f}", len(sentences), f"{short:.2f}", f"{unclosed:.2f}"]
                + [f"{seconds:.1f}"]
            )
        answerable = sum(q["answerable"] for q in questions)
        print(f"\n{manual}: {len(pages)} gold pages, evidence sentences of {answerable} questions")
        print(format_table(["extractor", "kept", "whole", "sentences", "short", "open", "seconds"], rows))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manuals", default="git,django,texworks")


def main() -> int:
    """The command."""
    return common_main("loaders.py", __doc__ or "", run, _arguments, "manual-loaders.txt")


if __name__ == "__main__":
    sys.exit(main())
