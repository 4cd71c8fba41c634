"""Document loaders of the ``docs`` extra: PDF (pages in metadata), HTML (main text only), DOCX; bad files skipped
with their reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag.config import ChromaConfig, ProvidersConfig
from modular_rag.ingest import index_paths, load_file
from modular_rag.providers import Providers

pypdf = pytest.importorskip("pypdf", reason="the docs extra (scripts/setup.sh installs it)")


def write_pdf(path: Path, pages: list[str], title: str | None = None) -> None:
    """A small, valid PDF with one line of Helvetica text per page (and an Info title)."""
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        content = f"BT /F1 12 Tf 40 700 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    info = len(objects) + 1
    objects.append(f"<< /Title ({title}) >>".encode() if title else b"<< >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {info} 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))


def write_docx(path: Path, paragraphs: list[str], title: str) -> None:
    """A .docx as Word writes it (python-docx): the paragraphs, and core properties with a title."""
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    document.core_properties.title = title
    document.save(str(path))


HTML = """<html><head><title>Brake service</title><style>.x { color: red }</style>
<script>var tracking = "pixel-tracker-code";</script></head>
<body><nav>Home | Shop | Cart</nav><header>Site banner</header>
<main><h1>Brake service</h1><p>Replace the brake pads when the groove is gone.</p>
<p>Bleed hydraulic brakes once a year.</p></main>
<footer>Copyright footer text</footer></body></html>"""


@pytest.mark.unit
def test_pdf_pages_become_documents_with_their_page_numbers(tmp_path: Path) -> None:
    file = tmp_path / "manual.pdf"
    write_pdf(
        file,
        ["Charge the battery before the first ride.", "", "Error E07 means the speed sensor is lost."],
        title="Rider manual",
    )
    docs, report = load_file(file, tmp_path, Providers())
    assert report.skipped is None, report.skipped
    assert [(d["metadata"]["page"], d["metadata"]["title"]) for d in docs] == [(1, "Rider manual"), (3, "Rider manual")]
    assert "speed sensor" in docs[1]["text"] and report.notes == ["1 page(s) without text left out"]


@pytest.mark.unit
def test_encrypted_and_image_only_pdfs_are_skipped_with_the_reason(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pdf"
    write_pdf(plain, ["Secret text."])
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(plain))
    writer.encrypt("password")
    with (tmp_path / "locked.pdf").open("wb") as fh:
        writer.write(fh)
    blank = pypdf.PdfWriter()
    blank.add_blank_page(200, 200)
    with (tmp_path / "scan.pdf").open("wb") as fh:
        blank.write(fh)
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf")
    reasons = {
        name: load_file(tmp_path / name, tmp_path, Providers())[1].skipped
        for name in ("locked.pdf", "scan.pdf", "broken.pdf")
    }
    assert "encrypted" in str(reasons["locked.pdf"])
    assert "image-only" in str(reasons["scan.pdf"])
    assert str(reasons["broken.pdf"]).startswith(("unreadable PDF", "no extractable text"))


@pytest.mark.unit
def test_html_keeps_the_main_text_only(tmp_path: Path) -> None:
    (tmp_path / "brakes.html").write_text(HTML, encoding="utf-8")
    docs, report = load_file(tmp_path / "brakes.html", tmp_path, Providers())
    text = docs[0]["text"]
    assert docs[0]["metadata"]["title"] == "Brake service"
    assert "Replace the brake pads" in text and "Bleed hydraulic brakes" in text
    for noise in ("pixel-tracker-code", "color: red", "Home | Shop", "Site banner", "Copyright footer"):
        assert noise not in text


@pytest.mark.unit
def test_docx_text_and_title(tmp_path: Path) -> None:
    write_docx(tmp_path / "policy.docx", ["Returns are accepted within 30 days.", "Keep the receipt."], "Returns")
    docs, _ = load_file(tmp_path / "policy.docx", tmp_path, Providers())
    assert docs[0]["metadata"]["title"] == "Returns" and "within 30 days" in docs[0]["text"]
    (tmp_path / "fake.docx").write_text("not a zip")
    assert "not a .docx" in str(load_file(tmp_path / "fake.docx", tmp_path, Providers())[1].skipped)


@pytest.mark.integration
def test_a_folder_of_pdf_html_and_docx_is_indexed_and_searchable(tmp_path: Path) -> None:
    docs = tmp_path / "client"
    docs.mkdir()
    write_pdf(docs / "manual.pdf", ["Charge the battery fully.", "Error E07 means the speed sensor signal is lost."])
    (docs / "brakes.html").write_text(HTML, encoding="utf-8")
    write_docx(docs / "policy.docx", ["Returns are accepted within 30 days."], "Returns")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="docs")))
    summary = index_paths([docs], env, progress=False)
    assert (summary.files_read, summary.files_indexed, summary.documents) == (3, 3, 4)  # two PDF pages
    hit = env.index.search_sparse("E07 speed sensor", 1)[0]
    assert hit["metadata"]["path"] == "manual.pdf" and hit["metadata"]["page"] == 2
    assert env.index.search_dense("how long can I return a product", 1)[0]["metadata"]["title"] == "Returns"
    assert all("pixel-tracker" not in h["text"] for h in env.index.search_sparse("tracking pixel", 5))


@pytest.mark.integration
def test_langchain_documents_loaders_and_splitters_index_from_python(tmp_path: Path) -> None:
    from langchain_core.document_loaders import BaseLoader
    from langchain_core.documents import Document as LCDocument
    from langchain_text_splitters import CharacterTextSplitter

    from modular_rag.errors import IndexingError
    from modular_rag.ingest import index_documents

    class Wiki(BaseLoader):
        def __init__(self, pages: dict[str, str]) -> None:
            self.pages = pages

        def lazy_load(self):  # type: ignore[no-untyped-def]
            for source, text in self.pages.items():
                yield LCDocument(page_content=text, metadata={"source": source, "tags": ["not", "scalar"]})

    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="langchain")))
    splitter = CharacterTextSplitter(separator=". ", chunk_size=40, chunk_overlap=0)
    pages = {
        "wiki/gears.md": "Shift before the climb. Keep a high cadence. Never cross-chain",
        "wiki/lights.md": "Charge the front light weekly",
    }
    first = index_documents(Wiki(pages), env, chunker=splitter, progress=False)
    assert (first.documents, first.files_read) == (2, 2) and first.chunks >= 3  # the splitter made the chunks
    hit = env.index.search_sparse("cadence", 1)[0]
    assert hit["metadata"]["path"] == "wiki/gears.md" and hit["metadata"]["title"] == "gears"
    assert "tags" not in hit["metadata"]  # non-scalar metadata is left out, not stored as garbage
    kept = LCDocument(page_content="Charge the front light weekly", metadata={"source": "wiki/lights.md"})
    synced = index_documents([kept], env, chunker=splitter, progress=False, sync=True)
    assert synced.synced["removed"] == 1 and synced.synced["unchanged"] == 1
    assert env.index.count() == env.index.dense.count() == 1
    with pytest.raises(IndexingError, match="not a LangChain Document"):
        index_documents(["just a string"], env, progress=False)
    with pytest.raises(IndexingError, match="text splitter"):
        index_documents([], env, chunker=object(), progress=False)


MANUAL_PAGE = """<?xml version="1.0" encoding="UTF-8"?>
<html><head><title>Settings — Acme 3.2 documentation</title></head><body>
<div class="related" role="navigation"><a href="i.html">Home</a> | <a href="t.html">Table of contents</a></div>
<div class="navheader"><table><tr><td><a href="p.html">Prev</a></td><td><a href="u.html">Up</a></td>
<td><a href="index.html">Home</a></td><td><a href="n.html">Next</a></td></tr></table></div>
<div class="body">
<h2>Vacuum<a class="headerlink" href="#v">¶</a></h2>
<p>A table is vacuumed when its dead rows exceed <code>autovacuum_threshold</code> plus a share of its
size (normally <em>20%</em>).</p>
<dl><dt><code>autovacuum_scale_factor</code> (<em>floating point</em>)</dt>
<dd><p>The default is 0.2 (20% of table size). It applies to every table.</p></dd>
<dt><code>--soft</code></dt><dd><p>Does not touch the index file.</p></dd></dl>
<table><thead><tr><th>Setting</th><th>Default</th></tr></thead>
<tbody><tr><td>delimiter</td><td>a tab character</td></tr><tr><td>null</td><td>an empty string</td></tr></tbody></table>
<pre>$ acme vacuum --all
vacuuming 3 tables</pre>
<ul><li>First <b>check</b> the logs</li><li>Then restart</li></ul>
</div>
<div class="sphinxsidebar"><ul><li><a href="a.html">Alpha</a></li><li><a href="b.html">Beta</a></li></ul></div>
</body></html>"""


@pytest.mark.unit
def test_html_keeps_a_manual_pages_structure_and_drops_its_navigation(tmp_path: Path) -> None:
    from modular_rag.sentences import evidence_sentences

    (tmp_path / "settings.html").write_text(MANUAL_PAGE, encoding="utf-8")
    docs, report = load_file(tmp_path / "settings.html", tmp_path, Providers())
    doc = docs[0]
    text = doc["text"]
    assert doc["metadata"]["title"] == "Settings" and report.skipped is None
    for nav in ("Table of contents", "Prev", "Next", "Alpha", "¶"):
        assert nav not in text
    sentences = evidence_sentences(text)
    # a sentence is whole across inline markup; a definition's term opens its description; a table row is one line
    assert (
        "A table is vacuumed when its dead rows exceed autovacuum_threshold plus a share of its size (normally 20%)."
        in sentences
    )
    assert "autovacuum_scale_factor (floating point): The default is 0.2 (20% of table size)." in sentences
    assert "--soft: Does not touch the index file." in sentences
    assert "Setting: delimiter; Default: a tab character." in sentences
    assert "- First check the logs" in text.splitlines() and "## Vacuum" in text.splitlines()
    assert "$ acme vacuum --all" in text and not any("vacuuming 3 tables" in s for s in sentences)


def _running_header_pdf(path: Path) -> None:
    """A 6-page PDF whose pages carry a running header and a page number, with a word broken at a line end."""
    pages = []
    for n in range(1, 7):
        lines = [f"5. Going further: Other tools {20 + n}"]
        if n == 3:
            lines += ["5.3 Formatting the source", "To facilitate legibility of the source, one can use inden-"]
            lines += ["tation as programmers do; it works well only on short lines."]
        else:
            topic = ["preview window", "spell checker", "tag list", "console", "templates", "scripts"][n - 1]
            lines += [f"The {topic} is described here in enough words to fill a whole line of the", f"page {n}."]
        lines.append(str(20 + n))
        pages.append(lines)
    write_pdf_lines(path, pages)


def write_pdf_lines(path: Path, pages: list[list[str]]) -> None:
    """A PDF of Helvetica text lines, one list of lines per page."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, lines in enumerate(pages):
        shown = " ".join(f"({ln}) Tj T*" for ln in lines)
        content = f"BT /F1 11 Tf 14 TL 40 760 Td {shown} ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))


@pytest.mark.unit
def test_pdf_pages_lose_their_running_headers_and_page_numbers_and_keep_headings(tmp_path: Path) -> None:
    _running_header_pdf(tmp_path / "manual.pdf")
    docs, report = load_file(tmp_path / "manual.pdf", tmp_path, Providers())
    assert report.skipped is None and len(docs) == 6
    third = docs[2]["text"]
    assert "Going further" not in " ".join(d["text"] for d in docs)  # the running header, on every page
    assert third.splitlines()[0] == "## 5.3 Formatting the source"
    assert "23" not in third.split()  # the page number
    assert "one can use indentation as programmers do" in third or "one can use inden- tation" not in third


@pytest.mark.unit
def test_docx_keeps_headings_lists_and_table_rows(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Returns", level=1)
    document.add_paragraph("Returns are accepted within 30 days.")
    document.add_paragraph("Keep the receipt", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip(
        table.rows[0].cells + table.rows[1].cells, ["Item", "Window", "Bikes", "14 days"], strict=True
    ):
        cell.text = text
    document.save(str(tmp_path / "policy.docx"))
    docs, _ = load_file(tmp_path / "policy.docx", tmp_path, Providers())
    lines = docs[0]["text"].splitlines()
    assert docs[0]["metadata"]["title"] == "Returns"
    assert "# Returns" in lines and "- Keep the receipt" in lines and "Item: Bikes; Window: 14 days." in lines
