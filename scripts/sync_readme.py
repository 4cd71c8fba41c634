"""Rewrite what is generated from the registry: the README's operator catalogue (run after adding an operator) and
``langgraph.json``'s graphs, one per pattern file (run after adding a pattern), and ``operators.PROVIDES``, what each
operator file registers (run after adding an operator or a file)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

from modular_rag.cli import catalogue_markdown
from modular_rag.server import langgraph_graphs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LANGGRAPH_JSON = ROOT / "langgraph.json"
OPERATORS_INIT = ROOT / "operators" / "__init__.py"


def operator_files() -> dict[str, tuple[str, ...]]:
    """Each file of ``operators/`` that registers operators -> their names, found by importing every file."""
    import operators
    from modular_rag.registry import catalogue

    for module in pkgutil.iter_modules(operators.__path__):
        importlib.import_module(f"operators.{module.name}")
    found: dict[str, set[str]] = {}
    for info in catalogue(load=False):  # not through PROVIDES, which may name a file that is gone
        package, _, file = info.factory.__module__.partition(".")
        if package == "operators":
            found.setdefault(file, set()).add(info.name)
    return {file: tuple(sorted(names)) for file, names in sorted(found.items())}


def provides_block(files: dict[str, tuple[str, ...]]) -> str:
    """``PROVIDES`` as Python source; ``main`` lets the formatter lay it out."""
    lines = ["PROVIDES: dict[str, tuple[str, ...]] = {"]
    for file, names in files.items():
        items = ", ".join(f'"{name}"' for name in names) + ("," if len(names) == 1 else "")
        lines.append(f'    "{file}": ({items}),')
    return "\n".join([*lines, "}"])


def main() -> None:
    import operators

    source = OPERATORS_INIT.read_text(encoding="utf-8")
    pattern = r"(# provides:start[^\n]*\n).*?(\n# provides:end)"
    OPERATORS_INIT.write_text(
        re.sub(pattern, lambda m: m.group(1) + provides_block(operator_files()) + m.group(2), source, flags=re.S),
        encoding="utf-8",
    )
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", str(OPERATORS_INIT)], check=True)
    importlib.reload(operators)  # the registry lists the files of the table just written
    text = README.read_text(encoding="utf-8")
    block = f"<!-- catalogue:start -->\n{catalogue_markdown()}\n<!-- catalogue:end -->"
    README.write_text(
        re.sub(r"<!-- catalogue:start -->.*?<!-- catalogue:end -->", lambda _: block, text, flags=re.S),
        encoding="utf-8",
    )
    spec = json.loads(LANGGRAPH_JSON.read_text(encoding="utf-8"))
    spec["graphs"] = langgraph_graphs()
    LANGGRAPH_JSON.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
