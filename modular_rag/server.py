"""Graph entry points for LangGraph Server (``langgraph dev``, ``langgraph up``, LangGraph Platform).

The repository's ``langgraph.json`` names one module-level compiled graph per pattern, each built from the
pattern's template::

    "graphs": {"linear": "./modular_rag/server.py:linear", ...}

Building is cheap and loads nothing: the embedder, the index and the local llama-server load on the first
query. The templates keep their index under ``.modular_rag/demo`` relative to the server's working directory.
To serve your own configs, set ``MODULAR_RAG_FLOWS`` to a folder holding ``<pattern>.yaml`` files; a pattern
without a file there is built from its template.
"""

from __future__ import annotations

import os
from pathlib import Path

from modular_rag import template_path
from modular_rag.builder import build_flow

__all__ = [
    "PATTERNS",
    "config_path",
    "linear",
    "conditional",
    "branching",
    "iterative",
    "recursive",
    "adaptive",
]

PATTERNS = ("linear", "conditional", "branching", "iterative", "recursive", "adaptive")


def config_path(pattern: str) -> Path:
    """The config a pattern's graph is built from: ``$MODULAR_RAG_FLOWS/<pattern>.yaml`` if it exists, else
    the pattern's template."""
    folder = os.environ.get("MODULAR_RAG_FLOWS")
    if folder:
        own = Path(folder) / f"{pattern}.yaml"
        if own.is_file():
            return own
    return template_path(pattern)


# the server attaches its own checkpointer and its threads are conversations: every new question starts clean
linear = build_flow(config_path("linear"), threads=True)
conditional = build_flow(config_path("conditional"), threads=True)
branching = build_flow(config_path("branching"), threads=True)
iterative = build_flow(config_path("iterative"), threads=True)
recursive = build_flow(config_path("recursive"), threads=True)
adaptive = build_flow(config_path("adaptive"), threads=True)
