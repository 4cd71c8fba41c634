"""Rewrite the README's generated operator catalogue from the registry (run after adding an operator)."""

from __future__ import annotations

import re
from pathlib import Path

from modular_rag.cli import catalogue_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> None:
    text = README.read_text(encoding="utf-8")
    block = f"<!-- catalogue:start -->\n{catalogue_markdown()}\n<!-- catalogue:end -->"
    README.write_text(re.sub(r"<!-- catalogue:start -->.*?<!-- catalogue:end -->", lambda _: block, text, flags=re.S),
                      encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    main()
