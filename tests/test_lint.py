"""The code stays lint-clean and formatted: ruff over the repository (lint and format) and mypy over the packages,
with pyproject.toml's settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.unit


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_is_clean() -> None:
    done = _run("ruff", "check", str(ROOT))
    assert done.returncode == 0, f"ruff check failed:\n{done.stdout}{done.stderr}"


def test_ruff_format_leaves_every_file_as_it_is() -> None:
    done = _run("ruff", "format", "--check", str(ROOT))
    assert done.returncode == 0, f"ruff format would change files (run: ruff format .):\n{done.stdout}{done.stderr}"


def test_no_file_opts_out_of_the_formatter() -> None:
    marker = "fmt: " + "skip"  # spelled apart so this file does not hold it
    opted_out = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(ROOT.glob("[!.]*/**/*.py"))
        if ".venv" not in path.parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if marker in line or "fmt: " + "off" in line
    ]
    assert not opted_out, f"let the formatter format; remove the markers at: {opted_out[:10]}"


def test_mypy_is_clean() -> None:
    done = _run("mypy", "modular_rag", "operators", "patterns")
    assert done.returncode == 0, f"mypy failed:\n{done.stdout}{done.stderr}"
