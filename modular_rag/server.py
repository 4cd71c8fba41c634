"""Graph entry points for LangGraph Server (``langgraph dev``, ``langgraph up``, LangGraph Platform).

The repository's ``langgraph.json`` names one graph per pattern, and ``flow``::

    "graphs": {"linear": "./modular_rag/server.py:linear", ..., "flow": "./modular_rag/server.py:flow"}

Each is a graph factory with a typed context (:class:`FlowContext`), so one deployed graph serves every client
through its own assistant: the context names the client's config (``flow``), its index (``index``: a collection of
the config's vector store) and its budget (``budget``: the most LLM calls and retrievals a question may cost, as the
cost model bounds the flow; a config over it is refused). Without a context, a pattern's graph runs
``$MODULAR_RAG_FLOWS/<pattern>.yaml`` if that file exists, else the pattern's template; ``flow`` runs ``linear``.

Each config is built once per (file version, index) and cached; a config edited or added on disk is picked up at the
next run, without restarting the server. Building is cheap and loads nothing: the embedder, the index and the local
llama-server load on the first query. The templates keep their index under ``.modular_rag/demo`` relative to the
server's working directory. Configs named by an assistant are read from ``MODULAR_RAG_FLOWS`` (default ``configs/``
in the server's working directory), by name (``acme``) or by path inside it (``clients/acme.yaml``).
"""

import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from modular_rag import pattern_names, template_path
from modular_rag.builder import FlowSource, build_flow
from modular_rag.config import ChromaConfig, FlowConfig, MilvusConfig, load_config
from modular_rag.errors import ConfigError
from modular_rag.state import FlowOutput

PATTERNS = pattern_names()
"""The patterns served, one graph each (their templates, in the paper's order)."""

# no `from __future__ import annotations`: FlowContext's annotations must be real types for the JSON schema of a module
# LangGraph Server loads from its file (not importable by name); ServerRuntime, only quoted, it resolves itself
if TYPE_CHECKING:
    from langgraph_sdk.runtime import ServerRuntime

__all__ = [
    "PATTERNS",
    "Budget",
    "FlowContext",
    "flow_names",
    "flow_path",
    "served_graph",
    "flow",
    "config_path",
    "served",
    "langgraph_graphs",
    *PATTERNS,
]


class Budget(TypedDict, total=False):
    """The most one question may cost a client, as the cost model bounds its flow (``modular-rag cost``)."""

    max_llm_calls: int
    """LLM calls per question (the flow's worst case must not exceed it)."""
    max_retrievals: int
    """Retrievals per question (the flow's worst case must not exceed it)."""


class FlowContext(TypedDict, total=False):
    """The context of an assistant of any served graph: one client's config, index and budget (LangGraph Studio
    shows it as the assistant's form). Every key is optional."""

    flow: str
    """The config to run: a name (``acme``: ``acme.yaml`` of the flows folder, or a pattern's template) or a path
    inside the flows folder (``clients/acme.yaml``). A pattern's graph runs configs of its pattern only."""
    index: str
    """The collection of the config's vector store (Chroma or Milvus) to answer from, instead of the config's own."""
    budget: Budget
    """The most a question may cost; a config whose worst case exceeds it is refused."""


def config_path(pattern: str) -> Path:
    """The config a pattern's graph runs without a context: ``$MODULAR_RAG_FLOWS/<pattern>.yaml`` if it exists, else
    the pattern's template."""
    if os.environ.get("MODULAR_RAG_FLOWS"):
        own = _flows_folder() / f"{pattern}.yaml"
        if own.is_file():
            return own
    return template_path(pattern)


def served(config: FlowSource) -> CompiledStateGraph:
    """A config's graph as the server runs it. The server attaches its own checkpointer and its threads are
    conversations: every new question starts clean, and a run returns the answer, its citations and its cost
    (:class:`~modular_rag.state.FlowOutput`); the working state stays in the checkpoint. Its context schema is
    :class:`FlowContext`."""
    graph = build_flow(config, threads=True, output_schema=FlowOutput)
    graph.context_schema = FlowContext  # type: ignore[assignment]
    return graph


_STARTED_IN = Path.cwd()
"""The server's working directory when it loaded this module (off its event loop, where ``os.getcwd`` is refused):
relative flows folders are read from there."""


def _flows_folder() -> Path:
    return _STARTED_IN / (os.environ.get("MODULAR_RAG_FLOWS") or "configs")


def flow_names() -> list[str]:
    """The configs an assistant may name: the flows folder's YAML files (by name, or by path without ``.yaml`` for
    files in subfolders), then the pattern templates."""
    own = sorted(_yaml_names(_flows_folder()))
    return own + [p for p in PATTERNS if p not in own]


def _yaml_names(folder: Path, prefix: str = "", depth: int = 4) -> Iterator[str]:
    """The ``.yaml`` files under ``folder`` as config names, hidden entries left out, ``depth`` folders deep. Listed
    with ``os.listdir`` and ``os.path.isdir``, which LangGraph Server allows on its event loop (it calls graph
    factories there, and refuses ``os.scandir``, which ``Path.rglob`` uses)."""
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return
    for name in entries:
        if name.startswith("."):
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            if depth > 1:
                yield from _yaml_names(Path(path), f"{prefix}{name}/", depth - 1)
        elif name.endswith(".yaml"):
            yield f"{prefix}{name[: -len('.yaml')]}"


def flow_path(name: str) -> Path:
    """The file a config name or path stands for: ``<name>.yaml`` (or ``<name>`` ending in ``.yaml``) inside the
    flows folder, else a pattern's template.

    Raises:
        ConfigError: If no config has that name, or the path leads out of the flows folder (the message lists the
            names).
    """
    folder = _flows_folder().resolve()
    own = (folder / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")).resolve()
    if own.is_relative_to(folder) and own.is_file():
        return own
    if name in PATTERNS:
        return template_path(name)
    raise ConfigError("context.flow", f"no config named {name!r} in {folder}; configs: {', '.join(flow_names())}")


_INDEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{1,126}[A-Za-z0-9]")
"""An index an assistant may name: a collection name valid for Chroma and Milvus alike, and never a path."""


def _with_index(config: FlowConfig, index: str) -> FlowConfig:
    """The config reading another collection of its vector store."""
    store = config.providers.vectorstore
    if not _INDEX_NAME.fullmatch(index):
        raise ConfigError(
            "context.index",
            f"{index!r} is not a collection name: 3 to 128 letters, digits, '_' or "
            "'-', starting and ending with a letter or digit",
        )
    if not isinstance(store, ChromaConfig | MilvusConfig):
        raise ConfigError(
            "context.index",
            f"the config's vector store ({type(store).__name__}) has no collections "
            "the server can choose; use vectorstore chroma or milvus",
        )
    if isinstance(store, MilvusConfig) and "-" in index:
        raise ConfigError("context.index", f"{index!r}: a Milvus collection name has no '-'")
    return config.with_vectorstore(store.model_copy(update={"collection": index}))


def _check_budget(name: str, config: FlowConfig, budget: Mapping[str, Any]) -> None:
    """Refuse a config whose worst case, as the cost model bounds it, exceeds the assistant's budget."""
    from modular_rag.costs import estimate

    unknown = sorted(set(budget) - set(Budget.__annotations__))
    if unknown:
        raise ConfigError("context.budget", f"unknown keys {unknown}; allowed: {', '.join(Budget.__annotations__)}")
    cost = estimate(config)
    for key, span, what in (
        ("max_llm_calls", cost.llm_calls, "LLM calls"),
        ("max_retrievals", cost.retrievals, "retrievals"),
    ):
        limit = budget.get(key)
        if limit is not None and span.hi > limit:
            raise ConfigError(
                f"context.budget.{key}",
                f"config {name!r} may take up to {span.hi:g} {what} per question, over the budget of {limit}",
            )


_BUILT: dict[tuple[Path, int, str | None], tuple[FlowConfig, CompiledStateGraph]] = {}
_BUILD_LOCK = threading.Lock()


def _context(config: RunnableConfig, runtime: Any) -> Mapping[str, Any]:
    """The run's context (an assistant's context, merged with the run's), else the ``configurable`` values.

    Raises:
        ConfigError: If the context has a key :class:`FlowContext` does not.
    """
    context = getattr(runtime, "context", None)
    if context is not None and not isinstance(context, Mapping):
        context = {key: getattr(context, key) for key in FlowContext.__annotations__ if hasattr(context, key)}
    if context:
        unknown = sorted(set(context) - set(FlowContext.__annotations__))
        if unknown:
            raise ConfigError("context", f"unknown keys {unknown}; allowed: {', '.join(FlowContext.__annotations__)}")
        return context
    configurable = config.get("configurable") or {}
    return {key: configurable[key] for key in FlowContext.__annotations__ if key in configurable}


def served_graph(config: RunnableConfig, runtime: Any, pattern: str | None = None) -> CompiledStateGraph:
    """The graph a run's context asks for (see :class:`FlowContext`): its config, on its index, within its budget;
    built once per file version and index, then cached. Nothing is opened here but the config file: LangGraph
    Server calls factories on its event loop, where a store's I/O would block every run (``langgraph dev`` refuses it).

    Args:
        config: The run's config (its ``configurable`` stands in for a missing context).
        runtime: LangGraph Server's runtime (``None`` outside the server).
        pattern: The pattern a graph serves (its configs must be of it), or ``None`` for the ``flow`` graph.

    Raises:
        ConfigError: If the context names no config, a config of another pattern, an invalid index, or a config over
            its budget.
    """
    context = _context(config, runtime)
    name = str(context.get("flow") or pattern or "linear")
    path = (flow_path(name) if context.get("flow") or pattern is None else config_path(pattern)).resolve()
    index = context.get("index") or None
    key = (path, path.stat().st_mtime_ns, index)
    with _BUILD_LOCK:
        built = _BUILT.get(key)
        if built is None:
            flow_config = load_config(path)
            if index is not None:
                flow_config = _with_index(flow_config, str(index))
            _BUILT[key] = built = (flow_config, served(flow_config))
    if pattern is not None and built[0].pattern != pattern:
        raise ConfigError(
            "context.flow",
            f"config {name!r} is a {built[0].pattern} flow; this graph serves {pattern} "
            "configs (the flow graph serves any)",
        )
    if context.get("budget"):
        _check_budget(name, built[0], context["budget"])
    return built[1]


def flow(config: RunnableConfig, runtime: "ServerRuntime") -> CompiledStateGraph:
    """LangGraph Server graph factory: the graph of the config the run's context names under ``flow`` (default
    ``linear``), on its index, within its budget (:class:`FlowContext`); rebuilt when its file changes."""
    return served_graph(config, runtime)


def _pattern_graph(pattern: str) -> Callable[[RunnableConfig, "ServerRuntime"], CompiledStateGraph]:
    """The LangGraph Server graph factory of one pattern (``langgraph.json`` names it): its default config, or the
    config of that pattern, index and budget an assistant's context names (:func:`served_graph`)."""

    def factory(config: RunnableConfig, runtime: "ServerRuntime") -> CompiledStateGraph:
        return served_graph(config, runtime, pattern)

    factory.__name__ = factory.__qualname__ = pattern
    factory.__doc__ = f"The {pattern} pattern's graph (:func:`served_graph`)."
    return factory


def langgraph_graphs() -> dict[str, str]:
    """The ``graphs`` of the repository's ``langgraph.json``: one factory per pattern, then ``flow``
    (``scripts/sync_readme.py`` writes them; a test checks the file is current)."""
    return {name: f"./modular_rag/server.py:{name}" for name in (*PATTERNS, "flow")}


for _pattern in PATTERNS:  # one factory per pattern file: linear, conditional, ... (langgraph.json is generated)
    globals()[_pattern] = _pattern_graph(_pattern)
