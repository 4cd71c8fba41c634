"""Document loaders of the ``docs`` extra: PDF (pages in metadata), HTML (main text only), DOCX; bad files skipped
with their reason."""

from __future__ import annotations

import zipfile
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
    """A minimal .docx: content types, the document body, and core properties with a title."""
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
            'package/2006/content-types"><Override PartName="/word/document.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
        )
        z.writestr(
            "word/document.xml", f'<?xml version="1.0"?><w:document xmlns:w="{w}"><w:body>{body}</w:body></w:document>'
        )
        z.writestr(
            "docProps/core.xml",
            '<?xml version="1.0"?><cp:coreProperties xmlns:cp="http://schemas.'
            'openxmlformats.org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/'
            f'1.1/"><dc:title>{title}</dc:title></cp:coreProperties>',
        )


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
