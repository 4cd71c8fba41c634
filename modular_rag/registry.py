"""Register and look up the kit's bricks: operators (by module, sub-module, name) and flow patterns.

The taxonomy has three tiers, after the Modular RAG paper: module (indexing, pre-retrieval, retrieval,
post-retrieval, generation, orchestration) -> sub-module (query transformation, rerank, routing, ...) ->
operator. Each operator also declares the **port** it fits: the stage contract it reads and writes. A flow slot
accepts only operators of its port, so a misplaced operator is refused with the list of slots it fits.

Operators are registered with the :func:`operator` decorator on a *factory*: a function that takes the
operator's validated parameters (a model derived from :class:`OperatorParams`) and the flow's
:class:`~modular_rag.providers.Providers`, binds the heavy things (models, indexes), and returns the operator
itself, a plain ``op(state) -> dict``::

    class TopK(OperatorParams):
        k: int = Field(10, gt=0, description="hits to return")

    @operator("retrieval", "sparse", "bm25", port=Port.RETRIEVE)
    def bm25(params: TopK, providers: Providers) -> Operator:
        '''BM25 over the sparse index.'''
        def run(state: RAGState) -> dict:
            ...
        return run

The baseplate never imports ``operators`` or ``patterns``: they are plugins, found through the
``modular_rag.plugins`` entry-point group and imported on the first lookup.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from modular_rag.errors import RegistryError
from modular_rag.ports import MODULES, PORT_CONTRACTS, PORT_WRITES, Port

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from modular_rag.providers import Providers

__all__ = [
    "MODULES",
    "Port",
    "PORT_CONTRACTS",
    "PORT_WRITES",
    "Operator",
    "Search",
    "Hop",
    "OperatorFactory",
    "OperatorInfo",
    "OperatorParams",
    "NoParams",
    "PatternInfo",
    "SlotSpec",
    "operator",
    "register_pattern",
    "get_operator",
    "find_operator",
    "info_of",
    "register_adapter",
    "adapt",
    "operators_for",
    "catalogue",
    "get_pattern",
    "pattern_names",
    "load_plugins",
]


class Operator(Protocol):
    """An operator: reads the state, returns only the keys it changes, never mutates its input."""

    def __call__(self, state: Mapping[str, Any], /) -> dict[str, Any]: ...


class Search(Protocol):
    """The flow's search as a hop gets it: the retrieve slot run on a state's ``queries`` (its update, trace,
    ledger). Called, it searches in this thread; ``await search.acall(state)`` is the same search in an async
    ``follow`` (several :func:`~modular_rag.concurrency.together`)."""

    def __call__(self, state: Mapping[str, Any], /) -> dict[str, Any]: ...

    async def acall(self, state: Mapping[str, Any], /) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Hop:
    """A hop strategy, as a hop operator's factory builds it (``@operator(..., port=Port.HOP)``): how the next round
    searches, from what the last one left; the pattern gives it the flow's search (its retrieve slot).

    Attributes:
        next_round: ``(state round t left, search) -> {"queries", "candidates"}`` (and the searches' trace and
            ledger); ``{"queries": []}`` when there is nothing to search.
        follow: ``(state whose candidates are passages, search) -> {"branches": [per passage: the passage, then
            what it leads to]}``; ``None`` when the strategy does not start from passages. It may be an ``async def``
            that awaits its searches (``await search.acall(...)``, several
            :func:`~modular_rag.concurrency.together`): async runs await them together on the event loop, sync runs
            in turn.
        think: What a round produces when the hop writes it (IRCoT's next thought), not the generation.
        finished: With ``think``: whether what a round produced ends the loop (the thought gives the answer).
    """

    next_round: Callable[[Mapping[str, Any], Search], dict[str, Any]]
    follow: Callable[[Mapping[str, Any], Search], dict[str, Any] | Awaitable[dict[str, Any]]] | None = None
    think: Callable[[Mapping[str, Any]], str] | None = None
    finished: Callable[[str], bool] | None = None


class OperatorFactory(Protocol):
    """Builds an operator from its validated parameters and the flow's providers."""

    __qualname__: str

    def __call__(self, params: Any, providers: Providers, /) -> Any: ...


class OperatorParams(BaseModel):
    """Base of every operator's params model: unknown keys are refused, so a typo in a config names the field it
    did not expect instead of being silently ignored."""

    model_config = ConfigDict(extra="forbid")


class NoParams(OperatorParams):
    """Parameters of an operator that takes none."""


@dataclass(frozen=True)
class OperatorInfo:
    """A registered operator: where it sits in the taxonomy, the port it fits, how to build it."""

    module: str
    submodule: str
    name: str
    port: Port
    factory: OperatorFactory
    params: type[BaseModel]
    summary: str
    needs_llm: bool = False
    tags: frozenset[str] = frozenset()
    cost: Callable[[Any, Any], Any] | None = None
    answers_itself: Callable[[Any, bool], bool] | None = None

    def param_rows(self) -> list[tuple[str, str, str]]:
        """The parameters as ``(name, default, description)`` rows, for the catalogue."""
        rows = []
        for pname, finfo in self.params.model_fields.items():
            default = "required" if finfo.is_required() else repr(finfo.get_default(call_default_factory=True))
            rows.append((pname, default, finfo.description or ""))
        return rows


@dataclass(frozen=True)
class SlotSpec:
    """A slot of a pattern: the port it takes, its default operator, whether a list (chain) is allowed."""

    port: Port
    default: str | None = "none"
    default_params: Mapping[str, Any] = field(default_factory=dict)
    chain: bool = False
    optional: bool = True
    doc: str = ""


@dataclass(frozen=True)
class PatternInfo:
    """A registered flow pattern: its slots, its parameter model and its factory."""

    name: str
    slots: Mapping[str, SlotSpec]
    params: type[BaseModel]
    factory: Callable[..., CompiledStateGraph]
    summary: str
    check: Callable[[Any, str], None] | None = None
    cost: Callable[[Any], Any] | None = None


_OPERATORS: dict[tuple[Port, str], OperatorInfo] = {}
_PATTERNS: dict[str, PatternInfo] = {}
_LOCK = threading.RLock()
_PLUGINS_LOADED = False

PLUGIN_GROUP = "modular_rag.plugins"
_BUILTIN_PLUGINS = ("operators", "patterns")


def load_plugins() -> None:
    """Import every plugin of the ``modular_rag.plugins`` entry-point group once (the kit's own operators and
    patterns, and any third-party package that declares the group). A plugin package that lists its files in
    ``PLUGIN_MODULES`` has each of them imported with it."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    with _LOCK:
        if _PLUGINS_LOADED:
            return
        names = [ep.value for ep in metadata.entry_points(group=PLUGIN_GROUP)]
        for module_name in dict.fromkeys([*_BUILTIN_PLUGINS, *names]):
            module = importlib.import_module(module_name)
            for part in getattr(module, "PLUGIN_MODULES", ()):
                importlib.import_module(f"{module_name}.{part}")
        _PLUGINS_LOADED = True


def _import_provider(package: str, name: str, present: Callable[[], bool]) -> None:
    """Make ``name`` registered if anything provides it, importing as little as can: the files of the kit's
    ``package`` (operators or patterns) that register that name (its ``PROVIDES``), else every plugin (a third-party
    name, or an unknown one: the error then lists what there is)."""
    if present() or _PLUGINS_LOADED:
        return
    provides = getattr(importlib.import_module(package), "PROVIDES", {})
    for part in [part for part, names in provides.items() if name in names]:
        importlib.import_module(f"{package}.{part}")
    if not present():
        load_plugins()


def _params_model(factory: Callable[..., Any]) -> type[BaseModel]:
    try:
        hints = typing.get_type_hints(factory)
    except NameError:
        hints = {}
    first = next(iter(inspect.signature(factory).parameters), None)
    model = hints.get(first) if first else None
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    return NoParams


def _summary(obj: Any) -> str:
    doc = (inspect.getdoc(obj) or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) if doc else ""


def operator(
    module: str,
    submodule: str,
    name: str,
    *,
    port: Port,
    needs_llm: bool = False,
    tags: tuple[str, ...] = (),
    cost: Callable[[Any, Any], Any] | None = None,
    answers_itself: Callable[[Any, bool], bool] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register an operator factory under ``module / submodule / name`` for ``port``.

    The parameter model is read from the annotation of the factory's first parameter (a pydantic model);
    the one-line summary from its docstring.

    Args:
        module: One of :data:`MODULES`.
        submodule: One of the module's sub-modules.
        name: The name configs use; unique within the port.
        port: The stage contract the operator fits.
        needs_llm: Whether building the operator needs the flow's chat model (shown in the catalogue).
        tags: Finer contract hints a pattern may check (fusion operators: ``candidates`` or ``answer``; a
            retrieval operator that searches nothing: ``no_search``).
        cost: ``cost(params, ctx) -> Cost``: the LLM calls and retrievals one run of the operator makes, given a
            :class:`~modular_rag.costs.CostContext` it may update (see :mod:`modular_rag.costs`).
        answers_itself: A fusion's ``(params, prefill) -> bool``: whether it writes the answer from the branches'
            documents itself (REPLUG's token-level ensemble, with a model that continues answers: ``prefill``).

    Returns:
        The decorator, which returns the factory unchanged.

    Raises:
        RegistryError: If the module or sub-module is unknown, or the name is taken for this port.
    """
    if module not in MODULES:
        raise RegistryError(f"unknown module {module!r}; modules are: {', '.join(MODULES)}")
    if submodule not in MODULES[module]:
        raise RegistryError(
            f"unknown sub-module {submodule!r} of {module}; sub-modules are: {', '.join(MODULES[module])}"
        )
    if name == "none":
        raise RegistryError("'none' is reserved: it disables a slot")

    def register(factory: Callable[..., Any]) -> Callable[..., Any]:
        info = OperatorInfo(
            module=module,
            submodule=submodule,
            name=name,
            port=port,
            factory=factory,
            params=_params_model(factory),
            summary=_summary(factory),
            needs_llm=needs_llm,
            tags=frozenset(tags),
            cost=cost,
            answers_itself=answers_itself,
        )
        with _LOCK:
            existing = _OPERATORS.get((port, name))
            if existing is not None and existing.factory.__qualname__ != factory.__qualname__:
                raise RegistryError(f"operator {name!r} is already registered for port {port.value}")
            _OPERATORS[(port, name)] = info
        return factory

    return register


def operators_for(port: Port) -> list[str]:
    """The names registered for a port, sorted (``none`` is not included)."""
    load_plugins()
    return sorted(name for (p, name) in _OPERATORS if p is port)


def find_operator(name: str) -> list[OperatorInfo]:
    """Every registration of ``name``, whatever its port (empty if unknown), in the ports' order."""
    load_plugins()
    order = list(Port)
    return sorted((info for (_, n), info in _OPERATORS.items() if n == name), key=lambda i: order.index(i.port))


def get_operator(port: Port, name: str) -> OperatorInfo:
    """Look up an operator by port and name.

    Raises:
        RegistryError: If no operator of that name fits the port. The message lists the valid names for the
            port and, when the name exists for another port, which port it fits.
    """
    _import_provider("operators", name, lambda: (port, name) in _OPERATORS)
    info = _OPERATORS.get((port, name))
    if info is not None:
        return info
    valid = ", ".join(["none", *operators_for(port)])
    elsewhere = find_operator(name)
    if elsewhere:
        fits = ", ".join(f"{i.port.value} ({PORT_CONTRACTS[i.port]})" for i in elsewhere)
        raise RegistryError(
            f"operator {name!r} is a {elsewhere[0].module} operator that fits port {fits}, "
            f"not {port.value} ({PORT_CONTRACTS[port]}); operators for {port.value}: {valid}"
        )
    raise RegistryError(f"unknown operator {name!r} for port {port.value}; valid names: {valid}")


def catalogue(*, load: bool = True) -> list[OperatorInfo]:
    """Every registered operator, ordered by module, sub-module and name; with ``load=False`` only those of the files
    imported so far (the plugins are not loaded)."""
    if load:
        load_plugins()
    module_order = {m: i for i, m in enumerate(MODULES)}

    def key(info: OperatorInfo) -> tuple[int, int, str]:
        return (module_order[info.module], MODULES[info.module].index(info.submodule), info.name)

    return sorted(_OPERATORS.values(), key=key)


def info_of(factory: Callable[..., Any]) -> OperatorInfo | None:
    """The registration of a factory object, or ``None`` if it is not registered."""
    load_plugins()
    return next((i for i in _OPERATORS.values() if i.factory is factory), None)


Adapter = Callable[[Any, "Providers"], Any]
_ADAPTERS: list[tuple[type, Port, Adapter]] = []


def register_adapter(kind: type, port: Port) -> Callable[[Adapter], Adapter]:
    """Register how a Python object of ``kind`` becomes an operator for ``port`` (for example a LangChain
    ``BaseRetriever`` in a retrieval slot)."""

    def register(adapter: Adapter) -> Adapter:
        with _LOCK:
            _ADAPTERS.append((kind, port, adapter))
        return adapter

    return register


def adapt(obj: Any, port: Port, env: Providers, *, path: str) -> Any:
    """Turn a Python object placed in a slot into an operator.

    An object with a registered adapter for the slot's port is adapted; any other callable is taken as an
    operator ``op(state) -> dict`` as it is.

    Raises:
        ConfigError: If the object has adapters only for other ports, or is not callable.
    """
    from modular_rag.errors import ConfigError

    load_plugins()
    fits = [p for kind, p, _ in _ADAPTERS if isinstance(obj, kind)]
    for kind, p, adapter in _ADAPTERS:
        if p is port and isinstance(obj, kind):
            return adapter(obj, env)
    if fits:
        raise ConfigError(
            path,
            f"a {type(obj).__name__} fits port {', '.join(sorted({p.value for p in fits}))}, not {port.value}",
        )
    if callable(obj):
        return obj
    raise ConfigError(path, f"a {type(obj).__name__} is not an operator; give a name, or a callable op(state)")


def register_pattern(
    name: str,
    *,
    slots: Mapping[str, SlotSpec],
    params: type[BaseModel],
    check: Callable[[Any, str], None] | None = None,
    cost: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[..., CompiledStateGraph]], Callable[..., CompiledStateGraph]]:
    """Register a pattern factory ``build_<name>(config, *, checkpointer=None)`` with its slots and params.

    Args:
        name: The pattern name configs use.
        slots: The pattern's operator slots.
        params: The model of its ``params`` (loop bounds and knobs).
        check: Optional deeper check of validated params (for example nested sub-flow configs), called with the
            params and their config path; raises ``ConfigError``.
        cost: ``cost(config) -> Cost``: the pattern's LLM calls and retrievals per query (see
            :mod:`modular_rag.costs`).

    Raises:
        RegistryError: If the pattern name is taken.
    """

    def register(factory: Callable[..., CompiledStateGraph]) -> Callable[..., CompiledStateGraph]:
        with _LOCK:
            existing = _PATTERNS.get(name)
            if existing is not None and existing.factory.__qualname__ != factory.__qualname__:
                raise RegistryError(f"pattern {name!r} is already registered")
            _PATTERNS[name] = PatternInfo(name, dict(slots), params, factory, _summary(factory), check, cost)
        return factory

    return register


def pattern_names() -> list[str]:
    """The registered pattern names, sorted."""
    load_plugins()
    return sorted(_PATTERNS)


def get_pattern(name: str) -> PatternInfo:
    """Look up a pattern.

    Raises:
        RegistryError: If unknown; the message lists the registered patterns.
    """
    _import_provider("patterns", name, lambda: name in _PATTERNS)
    try:
        return _PATTERNS[name]
    except KeyError:
        raise RegistryError(f"unknown pattern {name!r}; patterns: {', '.join(pattern_names())}") from None
