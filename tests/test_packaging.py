"""The wheel carries every data file the kit reads at run time: the pattern templates, the demo corpus and the
default search spaces of ``modular-rag tune`` (a ``pip install`` that is not editable has nothing else)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration


def test_the_wheel_carries_templates_demo_and_default_spaces(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a clean copy: a build/ or .egg-info left in the checkout would hide a missing entry
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("modular_rag", "operators", "patterns"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("modular_rag-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "modular_rag"
    wanted = [
        *package.glob("templates/*.yaml"),
        *package.glob("eval/tune/spaces/*.yaml"),
        *(p for p in package.glob("demo/**/*") if p.is_file() and "__pycache__" not in p.parts),
    ]
    assert len(wanted) > 10
    missing = sorted(str(p.relative_to(ROOT)) for p in wanted if str(p.relative_to(ROOT)) not in names)
    assert not missing, missing
