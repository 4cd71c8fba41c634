"""The documentation stays short where it is read first and whole where it is not: the README under 350 lines,
every page of ``docs/`` in the site's navigation, and no link in the README, the benchmarks' README or the site
pointing at a file or heading that is not there (the site is built with ``mkdocs build --strict``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

pytestmark = pytest.mark.unit


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """The relative links of a Markdown page whose file, or heading, does not exist."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
            broken.append(target)
    return broken


def test_the_readme_is_read_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 350, f"README.md has {lines} lines (at most 350): move the narrative to a page of docs/"


@pytest.mark.parametrize(
    "page", ["README.md", "benchmarks/README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))]
)
def test_every_link_points_at_something(page: str) -> None:
    path = ROOT / page if "/" in page or page == "README.md" else ROOT / "docs" / page
    assert not broken_links(path), f"{page}: links to nothing: {broken_links(path)}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr}"
    assert (tmp_path / "site" / "index.html").exists()
