"""Peak memory of indexing one large file of each type the kit reads (.txt, .md, .jsonl, .html, .pdf, .docx).

Each file (``--mb`` MB, 50 by default, made once in ``--scratch``: prose of a fixed vocabulary; the JSON-lines file is
one row, the worst case for a line reader; the PDF holds uncompressed text pages; the .docx is deflated as Word
writes it) is indexed by ``index_paths`` in a process of its own, with ``max_file_mb`` above its size so that it is
read, and the process's peak resident memory is read from the kernel (``wait4``'s ``ru_maxrss``). A baseline process
indexes one short text file the same way; the table shows each file's peak, the peak over the baseline, and that
over the file's size. The embedder is the hash embedder (:mod:`benchmarks.perf.hashembed`, no model weights): the
ONNX MiniLM adds its own constant (the ``minilm baseline`` row, a short file indexed with the bundled model) and
takes hours over 50 MB, where the hash embedder takes minutes. Chroma on disk holds the chunks.

    .venv/bin/python -m benchmarks.perf memory [--mb 50] [--types txt,md,jsonl,html,pdf,docx] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from .common import ROOT, Report, table

__all__ = ["add_arguments", "run"]

TYPES = ("txt", "md", "jsonl", "html", "pdf", "docx")

_JOB = """
import json, sys, time
sys.path.insert(0, {perf!r})
from modular_rag.config import ChromaConfig, ProvidersConfig
from modular_rag.ingest import index_paths
from modular_rag.providers import Providers
args = json.loads(sys.argv[1])
if args["embedder"] == "hash":
    from hashembed import HashEmbeddings
    store = ChromaConfig(path=args["index"], collection="memory")
    config = ProvidersConfig(embeddings=HashEmbeddings(), vectorstore=store)
else:
    config = ProvidersConfig(vectorstore=ChromaConfig(path=args["index"], collection="memory"))
env = Providers(config)
start = time.perf_counter()
summary = index_paths([args["file"]], env, max_file_mb=args["max_file_mb"], progress=False)
print(json.dumps({{"chunks": summary.chunks, "skipped": summary.files_skipped, "seconds": time.perf_counter() - start,
                  "reasons": [f.skipped for f in summary.files if f.skipped]}}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The memory subcommand's options."""
    parser.add_argument("--mb", type=float, default=50.0, help="size of each file in MB (default 50)")
    parser.add_argument("--types", default=",".join(TYPES), help=f"file types (default {','.join(TYPES)})")
    parser.add_argument("--scratch", type=Path, help="where the files and indexes go (default: a temp folder)")


def run(args: argparse.Namespace, out: Report) -> None:
    """Index each file in its own process and print its peak memory."""
    scratch = args.scratch or Path(tempfile.gettempdir()) / "modular-rag-memory"
    scratch.mkdir(parents=True, exist_ok=True)
    types = [t for t in args.types.split(",") if t]
    unknown = sorted(set(types) - set(TYPES))
    if unknown:
        raise SystemExit(f"unknown types {unknown}; allowed: {', '.join(TYPES)}")
    out(f"peak memory of indexing one {args.mb:g} MB file of each of {len(types)} types (hash embedder, Chroma)")
    small = scratch / "small.txt"
    small.write_text("A short note. " * 20)
    rows: list[list[Any]] = []
    base = _job(small, scratch / "index-base", "hash", 64.0)
    rows.append(["baseline (a short .txt)", 0.0, base["peak_mb"], 0.0, "-", base["chunks"], base["seconds"]])
    tiny = _job(small, scratch / "index-minilm", "minilm", 64.0)
    rows.append(
        [
            "minilm baseline",
            0.0,
            tiny["peak_mb"],
            tiny["peak_mb"] - base["peak_mb"],
            "-",
            tiny["chunks"],
            tiny["seconds"],
        ]
    )
    for kind in types:
        file = _make(kind, scratch, args.mb)
        size = file.stat().st_size / 1e6
        got = _job(file, scratch / f"index-{kind}", "hash", max(64.0, size * 1.5))
        over = got["peak_mb"] - base["peak_mb"]
        note = got["reasons"][0] if got["reasons"] else ""
        rows.append(
            [
                f".{kind}" + (f" (skipped: {note})" if note else ""),
                size,
                got["peak_mb"],
                over,
                over / size,
                got["chunks"],
                got["seconds"],
            ]
        )
    out(table(["file", "size MB", "peak MB", "over baseline MB", "over / size", "chunks", "seconds"], rows))


def _job(file: Path, index: Path, embedder: str, max_file_mb: float) -> dict[str, Any]:
    """Index ``file`` into a fresh index in a child process; its result and peak resident memory (MB)."""
    shutil.rmtree(index, ignore_errors=True)
    job = _JOB.format(perf=str(Path(__file__).resolve().parent))
    payload = json.dumps({"file": str(file), "index": str(index), "embedder": embedder, "max_file_mb": max_file_mb})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", job, payload], stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    text = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"indexing {file} failed (exit {proc.returncode})")
    shutil.rmtree(index, ignore_errors=True)
    return {**json.loads(text.strip().splitlines()[-1]), "peak_mb": usage.ru_maxrss / 1024}


_WORDS = [
    "brake",
    "chain",
    "tyre",
    "saddle",
    "spoke",
    "frame",
    "battery",
    "motor",
    "display",
    "pedal",
    "crank",
    "gear",
    "wheel",
    "rim",
    "hub",
    "axle",
    "cable",
    "lever",
    "light",
    "bell",
    "fork",
    "stem",
    "handlebar",
    "grip",
    "valve",
    "tube",
    "pressure",
    "torque",
    "voltage",
    "charger",
    "sensor",
    "firmware",
    "setting",
    "value",
    "default",
    "option",
    "limit",
    "error",
    "code",
    "service",
    "manual",
    "check",
    "replace",
    "adjust",
    "clean",
    "tighten",
    "loosen",
    "measure",
    "rider",
    "weight",
]


def _prose(rng: random.Random, sentences: int) -> list[str]:
    """Sentences of 8 to 20 words of the vocabulary, with a number now and then."""
    out = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 20))]
        if rng.random() < 0.3:
            words.insert(rng.randint(0, len(words)), str(rng.randint(1, 5000)))
        out.append(" ".join(words).capitalize() + ".")
    return out


def _make(kind: str, scratch: Path, mb: float) -> Path:
    """A file of about ``mb`` MB of ``kind`` in ``scratch`` (made once, then reused)."""
    file = scratch / f"big-{mb:g}mb.{kind}"
    if file.exists():
        return file
    rng = random.Random(0)
    target = int(mb * 1e6)
    tmp = file.with_suffix(f".{kind}.part")
    if kind in ("txt", "md", "html"):
        with tmp.open("w") as fh:
            written, n = 0, 0
            if kind == "html":
                written += fh.write("<html><head><title>Service manual</title></head><body><main>\n")
            while written < target:
                n += 1
                body = " ".join(_prose(rng, 6))
                if kind == "txt":
                    written += fh.write(body + "\n\n")
                elif kind == "md":
                    written += fh.write((f"## Section {n}\n\n" if n % 10 == 1 else "") + body + "\n\n")
                else:
                    head = f"<h2>Section {n}</h2>\n" if n % 10 == 1 else ""
                    written += fh.write(f"{head}<p>{body} <code>opt{n}</code> <em>see</em> below.</p>\n")
            if kind == "html":
                fh.write("</main></body></html>\n")
    elif kind == "jsonl":
        with tmp.open("w") as fh:  # one row: the worst case for a line-by-line reader
            text = []
            size = 0
            while size < target:
                para = " ".join(_prose(rng, 6))
                text.append(para)
                size += len(para) + 2
            fh.write(json.dumps({"id": "manual", "title": "Service manual", "text": "\n\n".join(text)}) + "\n")
    elif kind == "pdf":
        _write_pdf(tmp, rng, target)
    elif kind == "docx":
        _write_docx(tmp, rng, target)
    tmp.rename(file)
    return file


def _write_pdf(path: Path, rng: random.Random, target: int) -> None:
    """A PDF of text pages (Helvetica, uncompressed content streams) of about ``target`` bytes."""
    objects: list[bytes] = []
    pages: list[int] = []
    size = 0
    while size < target:
        lines = _prose(rng, 40)
        ops = ["BT", "/F1 9 Tf", "11 TL", "40 800 Td"]
        for line in lines:
            for i in range(0, len(line), 95):
                part = line[i : i + 95].replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
                ops.append(f"({part}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        content = len(objects) + 3  # object numbers: 1 catalog, 2 pages, 3 font, then content/page pairs
        resources = "/Resources << /Font << /F1 3 0 R >> >>"
        page = f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] {resources} /Contents {content} 0 R >>"
        objects.append(page.encode())
        pages.append(len(objects) + 3)
        size += len(stream) + 200
    head = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        ("<< /Type /Pages /Kids [" + " ".join(f"{p} 0 R" for p in pages) + f"] /Count {len(pages)} >>").encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    every = head + objects
    with path.open("wb") as fh:
        fh.write(b"%PDF-1.4\n")
        offsets = []
        for n, body in enumerate(every, 1):
            offsets.append(fh.tell())
            fh.write(b"%d 0 obj\n" % n + body + b"\nendobj\n")
        xref = fh.tell()
        fh.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(every) + 1))
        for off in offsets:
            fh.write(b"%010d 00000 n \n" % off)
        fh.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(every) + 1, xref))


_CONTENT_TYPES = (
    '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Target="word/document.xml" '
    'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/></Relationships>'
)


def _write_docx(path: Path, rng: random.Random, target: int) -> None:
    """A .docx of paragraphs, deflated as Word writes it, of about ``target`` bytes on disk."""
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        with archive.open("word/document.xml", "w", force_zip64=True) as fh:
            fh.write(f'<?xml version="1.0"?><w:document {ns}><w:body>'.encode())
            started = time.perf_counter()
            while path.stat().st_size < target and time.perf_counter() - started < 3600:
                for _ in range(2000):
                    body = " ".join(_prose(rng, 6))
                    fh.write(f"<w:p><w:r><w:t>{body}</w:t></w:r></w:p>".encode())
            fh.write(b"</w:body></w:document>")
