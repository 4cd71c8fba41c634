"""The prebuilt flow patterns, one file and one factory each: ``build_<pattern>(config, **options)``.

Each file registers its pattern when it is imported: the registry imports the one a config names
(:data:`PROVIDES`), and every file when a listing needs them all (:data:`PLUGIN_MODULES`, through the
``modular_rag.plugins`` entry point). ``from patterns import build_linear`` imports that file alone.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from modular_rag import in_paper_order


def _pattern_files() -> tuple[str, ...]:
    """This package's pattern files: each ``<name>.py`` registers the pattern ``<name>``."""
    return in_paper_order(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


PATTERNS: tuple[str, ...] = _pattern_files()
"""Every prebuilt pattern, found as this package's files (a new pattern is its file, its template and its notebook),
in the paper's order (:data:`modular_rag.PAPER_ORDER`)."""

PROVIDES: dict[str, tuple[str, ...]] = {name: (name,) for name in PATTERNS}
"""Each file -> the pattern it registers (checked against the registry by tests/test_registry.py)."""

PLUGIN_MODULES: tuple[str, ...] = tuple(PROVIDES)
"""The files the registry imports to list every pattern."""

__all__ = ["PATTERNS", "PLUGIN_MODULES", "PROVIDES", *(f"build_{name}" for name in PROVIDES)]


def __getattr__(name: str) -> Any:
    """``build_<pattern>`` imports the pattern's file on first use."""
    if name.startswith("build_") and name[len("build_") :] in PATTERNS:
        return getattr(importlib.import_module(f"{__name__}.{name[len('build_') :]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
