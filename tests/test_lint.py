"""The code stays lint-clean: ruff over the repository and mypy over the packages, with pyproject.toml's settings."""

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


def test_mypy_is_clean() -> None:
    done = _run("mypy", "modular_rag", "operators", "patterns")
    assert done.returncode == 0, f"mypy failed:\n{done.stdout}{done.stderr}"
