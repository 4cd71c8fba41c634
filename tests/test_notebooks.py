"""Every notebook runs top to bottom on the embedded defaults (public API only, demo corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.marks import slow_except

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
TOPICS = {"conversation"}  # notebooks about a feature every pattern has, beside the one per pattern
IN_CI = {"linear"}  # the others take 11-52 s each: run them with -m slow
pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One working folder for all notebooks, so the demo corpus is indexed once."""
    return tmp_path_factory.mktemp("notebooks")


def test_there_is_one_notebook_per_pattern() -> None:
    from modular_rag.registry import pattern_names

    assert sorted(p.stem for p in NOTEBOOKS if p.stem not in TOPICS) == pattern_names()
    assert {p.stem for p in NOTEBOOKS} >= TOPICS


@pytest.mark.parametrize(
    "path",
    slow_except(NOTEBOOKS, IN_CI, name=lambda p: p.stem),
)
def test_notebook_runs(path: Path, workdir: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
    outputs = "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "A: " in outputs and "trace:" in outputs
    assert not any(
        o.get("output_type") == "error" for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
    )
