"""Graph entry points for LangGraph Server (``langgraph dev``, ``langgraph up``, LangGraph Platform).

The repository's ``langgraph.json`` names one module-level compiled graph per pattern, each built from the
pattern's template::

    "graphs": {"linear": "./modular_rag/server.py:linear", ...}

Building is cheap and loads nothing: the embedder, the index and the local llama-server load on the first
query. The templates keep their index under ``.modular_rag/demo`` relative to the server's working directory.
To serve your own configs, set ``MODULAR_RAG_FLOWS`` to a folder holding ``<pattern>.yaml`` files; a pattern
without a file there is built from its template.

One more graph, ``flow``, is a graph factory: each run builds (once, then from a cache) the config its assistant
names in its context, ``{"flow": "<name>"}``: ``<name>.yaml`` in ``MODULAR_RAG_FLOWS`` (default ``configs/`` in
the server's working directory), or a pattern's template. An assistant per client, each with its own config,
and a config edited or added on disk is picked up at the next run, without restarting the server.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from modular_rag import template_path
from modular_rag.builder import build_flow
from modular_rag.state import FlowOutput

if TYPE_CHECKING:  # LangGraph Server resolves the name itself when it reads flow's signature
    from langgraph_sdk.runtime import ServerRuntime

__all__ = [
    "PATTERNS",
    "FlowContext",
    "flow_names",
    "flow_path",
    "flow",
    "config_path",
    "served",
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


def served(path: str | os.PathLike[str]) -> CompiledStateGraph:
    """A config's graph as the server runs it. The server attaches its own checkpointer and its threads are
    conversations: every new question starts clean, and a run returns the answer, its citations and its cost
    (:class:`~modular_rag.state.FlowOutput`); the working state stays in the checkpoint."""
    return build_flow(path, threads=True, output_schema=FlowOutput)


linear = served(config_path("linear"))
conditional = served(config_path("conditional"))
branching = served(config_path("branching"))
iterative = served(config_path("iterative"))
recursive = served(config_path("recursive"))
adaptive = served(config_path("adaptive"))

class FlowContext(TypedDict, total=False):
    """The context of a ``flow`` assistant (LangGraph Studio shows it as the assistant's form)."""

    flow: str
    """The config to run: a ``<name>.yaml`` of the flows folder, or a pattern name (its template)."""


def _flows_folder() -> Path:
    return Path(os.environ.get("MODULAR_RAG_FLOWS") or "configs")


def flow_names() -> list[str]:
    """The configs a ``flow`` assistant may name: the flows folder's YAML files, then the pattern templates."""
    folder = _flows_folder()
    own = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
    return own + [p for p in PATTERNS if p not in own]


def flow_path(name: str) -> Path:
    """The file a config name stands for.

    Raises:
        ConfigError: If no config has that name (the message lists the names).
    """
    own = _flows_folder() / f"{name}.yaml"
    if "/" not in name and own.is_file():
        return own
    if name in PATTERNS:
        return template_path(name)
    from modular_rag.errors import ConfigError

    raise ConfigError("context.flow", f"no config named {name!r}; configs: {', '.join(flow_names())}")


_BUILT: dict[Path, tuple[int, Any]] = {}
_BUILD_LOCK = threading.Lock()


def flow(config: RunnableConfig, runtime: ServerRuntime) -> CompiledStateGraph:
    """LangGraph Server graph factory: the graph of the config the run's context (or ``configurable``) names
    under ``flow`` (default ``linear``), on threads; rebuilt when its file changes."""
    context = getattr(runtime, "context", None) or {}
    name = (context.get("flow") if isinstance(context, dict) else getattr(context, "flow", None)) or (
        (config.get("configurable") or {}).get("flow") or "linear")  # fmt: skip
    path = flow_path(str(name)).resolve()
    stamp = path.stat().st_mtime_ns
    with _BUILD_LOCK:
        built = _BUILT.get(path)
        if built is None or built[0] != stamp:
            graph = served(path)
            graph.context_schema = FlowContext  # type: ignore[assignment]
            _BUILT[path] = built = (stamp, graph)
    return built[1]
