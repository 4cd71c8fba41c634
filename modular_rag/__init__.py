"""modular-rag: the Modular RAG taxonomy as working software.

Pick one of six prebuilt LangGraph flow patterns, swap operators in a config file, run the graph::

    from modular_rag import build_flow, load_config

    flow = build_flow("my-flow.yaml")
    result = flow.invoke({"query": "What does error E07 mean?"})
    print(result["answer"]["text"], result["answer"]["citations"])

Names are imported lazily so ``import modular_rag`` stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the lazy names, for type checkers
    from modular_rag.builder import build_flow
    from modular_rag.config import FlowConfig, load_config
    from modular_rag.errors import (
        ConfigError,
        DatasetError,
        IndexingError,
        ModularRagError,
        OperatorError,
        ProviderError,
    )
    from modular_rag.ingest import index_documents, index_paths
    from modular_rag.providers import Providers
    from modular_rag.registry import catalogue
    from modular_rag.state import RAGState
    from modular_rag.tool import as_tool

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "build_flow",
    "load_config",
    "FlowConfig",
    "Providers",
    "RAGState",
    "catalogue",
    "as_tool",
    "template_path",
    "pattern_names",
    "PAPER_ORDER",
    "in_paper_order",
    "demo_corpus_path",
    "index_paths",
    "index_documents",
    "ModularRagError",
    "ConfigError",
    "IndexingError",
    "ProviderError",
    "OperatorError",
    "DatasetError",
]

_LAZY = {
    "build_flow": "modular_rag.builder",
    "load_config": "modular_rag.config",
    "FlowConfig": "modular_rag.config",
    "Providers": "modular_rag.providers",
    "RAGState": "modular_rag.state",
    "catalogue": "modular_rag.registry",
    "as_tool": "modular_rag.tool",
    "index_paths": "modular_rag.ingest",
    "index_documents": "modular_rag.ingest",
    "ModularRagError": "modular_rag.errors",
    "ConfigError": "modular_rag.errors",
    "IndexingError": "modular_rag.errors",
    "ProviderError": "modular_rag.errors",
    "OperatorError": "modular_rag.errors",
    "DatasetError": "modular_rag.errors",
}

_HERE = Path(__file__).resolve().parent


PAPER_ORDER = ("linear", "conditional", "branching", "iterative", "recursive", "adaptive")
"""The order the Modular RAG paper presents its flow patterns in; listings follow it, and a pattern it does not name
comes after them, by name."""


def in_paper_order(names: Iterable[str]) -> tuple[str, ...]:
    """Pattern names sorted as :data:`PAPER_ORDER`, any other after them by name."""
    return tuple(sorted(names, key=lambda n: (PAPER_ORDER.index(n) if n in PAPER_ORDER else len(PAPER_ORDER), n)))


def pattern_names() -> tuple[str, ...]:
    """Every prebuilt pattern, as its template (``templates/<pattern>.yaml``; a pattern is its file in ``patterns/``,
    its template and its notebook), in :data:`PAPER_ORDER`. Imports no pattern."""
    return in_paper_order(p.stem for p in (_HERE / "templates").glob("*.yaml"))


def template_path(pattern: str) -> Path:
    """The YAML template users start from for a pattern (``linear``, ``conditional``, ...).

    Raises:
        ConfigError: If there is no template of that name (the message lists the templates).
    """
    path = _HERE / "templates" / f"{pattern}.yaml"
    if not path.exists():
        from modular_rag.errors import ConfigError

        names = ", ".join(sorted(p.stem for p in (_HERE / "templates").glob("*.yaml")))
        raise ConfigError("pattern", f"no template named {pattern!r}; templates: {names}")
    return path


def demo_corpus_path() -> Path:
    """The bundled demo corpus folder (36 short Markdown documents written for the kit)."""
    return _HERE / "demo" / "corpus"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'modular_rag' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
