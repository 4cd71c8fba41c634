"""The command line: demo, run, catalogue, draw, doctor; bad input exits 2 with one line, no traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from modular_rag import registry
from modular_rag.cli import main
from tests.conftest import demo_flow

pytestmark = pytest.mark.integration


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modular_rag.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)  # fmt: skip


def test_demo_answers_and_cites_a_retrieved_chunk(tmp_path: Path) -> None:
    proc = cli("demo", "--quiet", "--json", "--index", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stderr
    import json

    result = json.loads(proc.stdout)
    answer = result["answer"]
    assert answer["text"].strip() and not answer["refused"]
    retrieved = {h["chunk_id"] for h in result["candidates"]}
    assert answer["citations"], "the demo answer cites nothing"
    assert {c["chunk_id"] for c in answer["citations"]} <= retrieved
    assert "36 indexed" in proc.stderr
    again = cli("demo", "--quiet", "--index", str(tmp_path / "demo"), "What is the TP-4410 part?")
    assert again.returncode == 0 and "indexing the demo corpus" not in again.stderr
    assert re.search(r"^A: .+", again.stdout, re.MULTILINE) and "trace:" in again.stdout


@pytest.mark.unit
def test_catalogue_lists_every_operator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalogue"]) == 0
    out = capsys.readouterr().out
    for info in registry.catalogue():
        assert re.search(rf"\b{info.submodule}\s+{info.name}\b", out), info.name
        for pname, _, _ in info.param_rows():
            assert f"- {pname} =" in out


@pytest.mark.unit
def test_draw_prints_mermaid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["draw", "linear"]) == 0
    assert capsys.readouterr().out.startswith("---\nconfig:")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--config", "/nonexistent.yaml", "q"], "config file not found"),
        (["draw", "spiral"], "no template named 'spiral'"),
        (["catalogue", "--module", "nope"], "unknown module 'nope'"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_run_with_a_bad_operator_param(tmp_path: Path, demo_dir: Path) -> None:
    import yaml

    cfg = demo_flow(demo_dir, operators={"retrieve": {"name": "hybrid", "params": {"k": -3}}})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = cli("run", "--config", str(tmp_path / "c.yaml"), "q")
    assert proc.returncode == 2 and "operators.retrieve.params.k" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.unit
def test_doctor_finds_the_embedded_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "MISSING" not in out and "note" not in out
    assert "ok       embedder's ONNX export (made once, cached):" in out and "model.onnx" in out
