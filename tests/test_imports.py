"""The import graphs of ``modular_rag/`` and ``operators/`` have no cycles, counting imports inside functions too (a
deferred import hides a cycle from Python, not from a reader; imports under ``if TYPE_CHECKING:`` are for type
checkers and do not count), and the imports point one way: doors, patterns, operators, the baseplate."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.unit


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports anywhere in its code, outside ``TYPE_CHECKING`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            # `from pkg import module` imports the module; `from pkg import name` imports the package
            found.update(submodules if len(submodules) == len(node.names) else [base, *submodules])
    return {m for m in found if m in modules and m != name}


def import_cycles(root: Path) -> list[list[str]]:
    """The cycles (strongly connected components of two or more modules) of a package's import graph."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph = {name: _imports(path, name, set(files)) for name, path in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_baseplate_has_no_import_cycles() -> None:
    assert import_cycles(ROOT / "modular_rag") == []


def test_a_deferred_import_that_closes_a_circle_is_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.a import g\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (package / "d.py").write_text("from . import c\n")
    assert import_cycles(package) == [["pkg.a", "pkg.b"]]


def test_patterns_speak_to_slots_not_to_operators() -> None:
    """A pattern imports the baseplate (builder, state, registry, ...), never an operator module: what it needs to
    know about an answer or its evidence is the state's or the builder's API, and every way of doing a step is an
    operator in a slot."""
    reached = {}
    for path in sorted((ROOT / "patterns").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        found = sorted(n for n in names if n == "operators" or n.startswith("operators."))
        if found:
            reached[path.name] = found
    assert reached == {}


def test_the_package_ships_no_development_harness() -> None:
    """Benchmarks and their defaults (a ``../shared/datasets`` next to the checkout) live in ``benchmarks/``: no
    module of the package refers to the shared datasets or imports a benchmark, so what ``pip install`` ships is the
    kit and its command line alone."""
    found = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "modular_rag").rglob("*.py")
        if "shared/datasets" in (text := p.read_text(encoding="utf-8"))
        or "import benchmarks" in text
        or "from benchmarks" in text
    )
    assert found == []


DOORS = ("cli.py", "cli_show.py", "server.py", "eval")
"""The doors of ``modular_rag/``: the command line, the served graphs and evaluation, which run whole flows and may
name operators; the rest is the baseplate operators plug into."""


def _reaches_up(path: Path) -> list[str]:
    """What ``path`` imports from ``operators`` or ``patterns`` (anywhere in its code, type-only imports included),
    and the dotted strings naming one of their files (an ``importlib`` target or a lazy-name table)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level}
    found = {n for n in names if n.split(".")[0] in ("operators", "patterns")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            top, _, rest = node.value.partition(".")
            if top in ("operators", "patterns") and (ROOT / top / f"{rest.replace('.', '/')}.py").is_file():
                found.add(node.value)
    return sorted(found)


def test_the_baseplate_never_reaches_up_into_operators_or_patterns() -> None:
    """Operators and patterns import the baseplate, never the other way: what an operator file holds besides its
    operators (an answer library, the ingest pipeline) is baseplate and lives in ``modular_rag/``."""
    reached = {}
    for path in sorted((ROOT / "modular_rag").rglob("*.py")):
        rel = path.relative_to(ROOT / "modular_rag")
        if rel.parts[0] in DOORS:
            continue
        if found := _reaches_up(path):
            reached[str(rel)] = found
    assert reached == {}


def test_reaching_up_is_seen_in_a_function_and_in_a_lazy_name_table(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('def f():\n    from operators.indexing import x\n_LAZY = {"y": "patterns.linear"}\n')
    assert _reaches_up(module) == ["operators.indexing", "patterns.linear"]


def test_every_file_of_operators_registers_operators() -> None:
    """``operators/`` holds bricks only: each file registers operators (``operators.PROVIDES``, generated from what
    the files register, says which); a library operators share (attribution, the hops' pair ranking, ingest) is
    baseplate and lives in ``modular_rag/``."""
    import operators

    files = {p.stem for p in (ROOT / "operators").glob("*.py") if p.stem != "__init__"}
    assert sorted(files - set(operators.PROVIDES)) == []
    assert all(operators.PROVIDES[name] for name in files)


def test_the_operators_have_no_import_cycles() -> None:
    assert import_cycles(ROOT / "operators") == []
