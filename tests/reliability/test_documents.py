"""Broken documents are skipped or handled with a reason; every good document is indexed; counts reconcile; a
SIGKILLed indexing run resumes to an index holding every chunk exactly once, dense and sparse agreeing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from modular_rag.config import ChromaConfig, ProvidersConfig
from modular_rag.ingest import index_paths
from modular_rag.providers import Providers

pytestmark = pytest.mark.integration


def test_bad_documents_are_skipped_with_reasons_and_counts_reconcile(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("---\ntitle: Good\nyear: 2021\n---\n# Good\nChain wax keeps the drivetrain clean.\n")
    (docs / "good.txt").write_text("Disc brakes stop well in the wet.")
    (docs / "empty.txt").write_text("")
    (docs / "spaces.md").write_text("   \n\n  ")
    (docs / "binary.txt").write_bytes(bytes(range(256)) * 20)
    (docs / "latin1.txt").write_bytes("Les pneus tubeless réduisent les crevaisons.".encode("latin-1"))
    (docs / "big.txt").write_bytes(b"spoke " * (50 * 1024 * 1024 // 6 + 1))  # a 50 MB file
    rows = [
        '{"id": "r1", "title": "Row one", "text": "Tyre pressure depends on rider weight."}',
        '{"id": "r2", "text": "Helmets sit level on the head."',
        "not json at all",
        '{"id": "r1", "text": "A duplicate id."}',
        '{"id": "r3", "text": "Lights must be on at night."}',
        "[1, 2, 3]",
    ]
    (docs / "rows.jsonl").write_text("\n".join(rows))
    (docs / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (docs / "frontmatter-only.md").write_text("---\ntitle: Nothing\n---\n")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "idx"), collection="docs")))
    summary = index_paths([docs], env, progress=False)
    skipped = {r.path: r.skipped for r in summary.files if r.skipped}
    assert summary.files_read == summary.files_indexed + summary.files_skipped == 10
    assert skipped == {
        "empty.txt": "empty file",
        "spaces.md": "empty file",
        "binary.txt": "binary file (NUL byte at offset 0)",
        "big.txt": "52.4 MB is larger than max_file_mb=20",
        "frontmatter-only.md": "no text after the front matter",
        "image.png": "unsupported file type '.png'; supported: .txt, .text, .md, .markdown, .jsonl, .pdf, .html, "
        ".htm, .docx",
    }
    notes = {r.path: r.notes for r in summary.files if r.notes}
    assert notes["rows.jsonl"] == [
        "1 line skipped: not JSON (Expecting ',' delimiter) (line 2)",
        "1 line skipped: not JSON (Expecting value) (line 3)",
        "1 line skipped: duplicate id (the first kept) (line 4)",
        "1 line skipped: a JSON list, not an object (line 6)",
    ]
    assert "not UTF-8" in notes["latin1.txt"][0]
    held = [c for part in env.index.catalog.scan() for c in part]
    assert {c.doc_id for c in held} == {"good", "good.txt"[:-4], "latin1", "r1", "r3"}
    assert summary.documents == 5 and env.index.count() == env.index.dense.count() == len(held) == summary.chunks
    assert any("réduisent" in c.text for c in held)


def _corpus(folder: Path, n: int) -> None:
    folder.mkdir()
    words = [
        "chain",
        "brake",
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
    ]
    for i in range(n):
        body = " ".join(words[(i + j) % len(words)] + str((i * 7 + j) % 97) for j in range(120))
        (folder / f"doc{i:04d}.txt").write_text(f"Document {i}. {body}.")


def _rows(sqlite: Path) -> int:
    """Vectors Chroma's own SQLite file holds so far (0 while it does not exist or is being created)."""
    import sqlite3

    if not sqlite.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True, timeout=0.2) as db:
            return int(db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])
    except sqlite3.Error:
        return 0


N_CRASH = 256
"""Documents of the kill test: the kill lands once the first write reaches Chroma (128 documents: 8 batches of 16),
so half is left for the rerun (400 took a minute here, 160 left too little)."""


def test_sigkill_midway_then_rerun_gives_every_chunk_exactly_once(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    _corpus(corpus, N_CRASH)
    store = tmp_path / "store"
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "providers": {"vectorstore": {"name": "chroma", "path": str(store), "collection": "crash"}},
                "indexing": {"chunker": {"name": "document"}, "batch_size": 16},
            }
        )
    )
    cmd = [sys.executable, "-m", "modular_rag.cli", "index", str(corpus), "--config", str(config), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sqlite = store / "chroma.sqlite3"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # kill once some vectors are in Chroma (the file's
        if _rows(sqlite) > 0:  # size alone grew past a threshold before any batch landed on a loaded machine)
            break
        time.sleep(0.05)
    assert proc.poll() is None, "indexing finished before it could be killed; use a larger corpus"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    again = subprocess.run(cmd[:-1] + ["--json"], capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["chunks"] == N_CRASH and summary["added"] + summary["existing"] == N_CRASH
    assert 0 < summary["existing"] < N_CRASH  # the killed run had written part of it
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(store), collection="crash")))
    ids, _, _ = env.index.dense.dump()
    assert len(ids) == len(set(ids)) == N_CRASH
    assert sorted(env.index.catalog.ids()) == ids  # dense store and catalog agree
    assert env.index.postings is not None and env.index.postings.next_position >= N_CRASH  # postings cover every chunk
