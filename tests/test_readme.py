"""The README stays true: its catalogue matches the registry, its commands match CI, its quickstart runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modular_rag.cli import catalogue_markdown

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.unit
def test_catalogue_table_matches_the_registry() -> None:
    block = re.search(r"<!-- catalogue:start -->\n(.*?)\n<!-- catalogue:end -->", README, re.S)
    assert block, "README lost its catalogue markers"
    assert block.group(1) == catalogue_markdown(), "run: .venv/bin/python scripts/sync_readme.py"


@pytest.mark.unit
def test_ci_runs_the_readme_commands() -> None:
    setup, test = re.search(r"```bash\n(\S+)[^\n]*\n(.+?)\s+#", README).groups()
    ci = (ROOT / ".ci/run").read_text()
    assert setup == "scripts/setup.sh" and setup in ci
    assert test == ".venv/bin/python -m pytest" and test in ci


@pytest.mark.integration
def test_quickstart_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.search(r"## Quickstart \(Python\)\n\n```python\n(.*?)```", README, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # the template's index path is relative: index into a fresh folder
    namespace: dict = {"_print": lambda *a: None}
    exec(compile(code.replace("print(", "_print("), "README-quickstart", "exec"), namespace)
    assert (tmp_path / ".modular_rag" / "demo").exists()
    assert namespace["result"]["answer"]["text"].strip()
    assert [e["node"] for e in namespace["result"]["trace"]] == ["retrieve", "rerank", "context", "generate"]
