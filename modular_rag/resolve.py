"""One resolution of a config: for each slot, the operator's registry entry, its validated params and its config
path, with the rules for defaults, ``enabled: false`` and ``none`` applied here and nowhere else.

:func:`resolve` does every check a config gets against the registry (pattern, slots, ports, lists in slots that do
not chain, ``none`` in a required slot, import paths, operator and pattern parameters, the chunker) and validates
each operator's params once. The builder builds the graph from the :class:`ResolvedFlow` and the cost model reads
the same object, so the graph and the cost estimate cannot disagree on which operators run with which params::

    flow = resolve(load_config("configs/scifact-best.yaml", check=False))
    [(step.name, step.params) for step in flow.slot("retrieve")]
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from modular_rag import registry
from modular_rag.errors import ConfigError, RegistryError
from modular_rag.registry import OperatorInfo, PatternInfo, Port
from modular_rag.specs import OperatorSpec
from modular_rag.validation import validate_params

if TYPE_CHECKING:
    from modular_rag.config import FlowConfig
    from modular_rag.providers import Providers

__all__ = ["ResolvedStep", "ResolvedFlow", "resolve", "check_flow", "Default", "resolve_operator"]

P = TypeVar("P", bound=BaseModel)

Default = str | OperatorSpec | None
"""A slot's default as a pattern mode gives it: an operator name, a spec with params, ``"none"`` (no operator), or
``None`` (the slot's registered default)."""


@dataclass(frozen=True)
class ResolvedStep:
    """One operator of a slot, resolved.

    Attributes:
        slot: The slot it fills.
        port: The slot's port.
        spec: The spec as configured (or the default's), with its step controls.
        path: Its dotted config path (``operators.rerank.1``).
        operator: Its registry entry; ``None`` for a Python object in the slot or an import path (``module:factory``),
            which the builder resolves when it builds the step.
        params: Its validated params model; ``None`` when ``operator`` is.
    """

    slot: str
    port: Port
    spec: OperatorSpec
    path: str
    operator: OperatorInfo | None
    params: BaseModel | None

    @property
    def name(self) -> str:
        """The operator's name as the trace shows it."""
        return self.operator.name if self.operator is not None else self.spec.name


@dataclass
class ResolvedFlow(Generic[P]):
    """A config resolved against the registry (see :func:`resolve`).

    Attributes:
        config: The config.
        pattern: The pattern's registry entry.
        params: The pattern's validated params.
        chunker: The indexing chunker, resolved.
    """

    config: FlowConfig
    pattern: PatternInfo
    params: P
    chunker: ResolvedStep
    path: str = ""
    _slots: dict[tuple[str, str], list[ResolvedStep]] = field(default_factory=dict, repr=False)

    def slot(
        self, name: str, *, default: Default = None, inject: Mapping[str, Any] | None = None
    ) -> list[ResolvedStep]:
        """The active operators of a slot, in order: as configured, else the slot's default.

        Args:
            name: The slot.
            default: Replaces the registered default when the slot is not configured (a pattern mode may need
                another one): a name, a spec with params, or ``"none"``.
            inject: Parameters the pattern adds to every named operator of the slot; the merged params are
                validated (once per distinct injection).

        Raises:
            ConfigError: If the slot is unknown, or a default's or an injection's params are invalid.
        """
        if name not in self.pattern.slots:
            raise ConfigError(
                self._at(f"operators.{name}"),
                f"pattern {self.pattern.name!r} has no slot {name!r}; slots: {', '.join(self.pattern.slots)}",
            )
        key = (name, _key(None if name in self.config.operators else default, inject))
        if key not in self._slots:
            self._slots[key] = self._resolve_slot(name, default, inject)
        return self._slots[key]

    def answers_itself(self, name: str, *, prefill: bool, default: Default = None) -> bool:
        """Whether the slot's one operator writes the answer from the branches' documents itself (REPLUG's
        token-level ensemble with a model that continues partial answers), so the branches need not answer.

        Args:
            name: The slot (a fusion).
            prefill: Whether the flow's chat model continues partial answers and gives token log-probabilities.
            default: Replaces the registered default when the slot is not configured.
        """
        steps = self.slot(name, default=default)
        info = steps[0].operator if len(steps) == 1 else None
        return info is not None and info.answers_itself is not None and info.answers_itself(steps[0].params, prefill)

    def active(self, name: str, *, default: Default = None) -> bool:
        """Whether a slot runs at all under the config (configured and enabled, or defaulting to an operator)."""
        return bool(self.slot(name, default=default))

    def _at(self, sub: str) -> str:
        return f"{self.path}.{sub}" if self.path else sub

    def _specs(self, name: str, default: Default) -> list[tuple[int, OperatorSpec]]:
        """The one rule for what a slot holds: its configured specs, else the default (the pattern mode's, else
        the registered one with its default params); ``none`` and ``enabled: false`` leave it empty. Each spec
        comes with its index in the slot's list as configured (its config path keeps it)."""
        if name in self.config.operators:
            specs = self.config.slot(name)
        elif isinstance(default, OperatorSpec):
            specs = [default]
        elif default is not None:
            specs = [] if default == "none" else [OperatorSpec(name=default)]
        else:
            info = self.pattern.slots[name]
            specs = (
                []
                if info.default in (None, "none")
                else [OperatorSpec(name=info.default, params=dict(info.default_params))]
            )
        return [(i, spec) for i, spec in enumerate(specs) if spec.active]

    def _resolve_slot(self, name: str, default: Default, inject: Mapping[str, Any] | None) -> list[ResolvedStep]:
        port = self.pattern.slots[name].port
        listed = isinstance(self.config.operators.get(name), list)
        steps = []
        for i, spec in self._specs(name, default):
            path = self._at(f"operators.{name}" + (f".{i}" if listed else ""))
            if inject and spec.object is None:
                spec = spec.model_copy(update={"params": {**spec.params, **inject}})
            if spec.object is not None or ":" in spec.name:
                steps.append(ResolvedStep(name, port, spec, path, None, None))
                continue
            try:
                info = registry.get_operator(port, spec.name)
            except RegistryError as exc:
                raise ConfigError(f"{path}.name", f"{exc} (slot {name!r})") from None
            steps.append(
                ResolvedStep(name, port, spec, path, info, validate_params(info.params, spec.params, f"{path}.params"))
            )
        return steps


def _key(default: Default, inject: Mapping[str, Any] | None) -> str:
    if isinstance(default, OperatorSpec):
        default = default.model_dump_json()
    return repr((default, sorted((inject or {}).items(), key=lambda kv: kv[0]) if inject else None))


def resolve(config: FlowConfig, *, path: str = "") -> ResolvedFlow[Any]:
    """Resolve a structurally valid config against the registry, checking it on the way.

    Args:
        config: The config (from :func:`~modular_rag.config.load_config` with ``check=False``, or checked already).
        path: Dotted path of this config inside a larger one (a conditional pattern's route).

    Returns:
        The resolution: every configured slot's operators with validated params, the pattern's params, the chunker.

    Raises:
        ConfigError: On the first problem, naming its path and the allowed values.
    """

    def at(sub: str) -> str:
        return f"{path}.{sub}" if path else sub

    try:
        pattern = registry.get_pattern(config.pattern)
    except RegistryError as exc:
        raise ConfigError(at("pattern"), str(exc)) from None
    for slot_name in config.operators:
        if slot_name not in pattern.slots:
            raise ConfigError(
                at(f"operators.{slot_name}"),
                f"pattern {pattern.name!r} has no slot {slot_name!r}; slots: {', '.join(pattern.slots)}",
            )
    flow: ResolvedFlow[Any] = ResolvedFlow(config, pattern, None, None, path)  # type: ignore[arg-type]
    for slot_name, slot in pattern.slots.items():
        raw = config.operators.get(slot_name)
        if isinstance(raw, list) and not slot.chain:
            raise ConfigError(
                at(f"operators.{slot_name}"),
                f"slot {slot_name!r} takes one operator, not a list (chains are allowed in "
                f"{', '.join(s for s, v in pattern.slots.items() if v.chain) or 'no slot'})",
            )
        for i, spec in enumerate(config.slot(slot_name)):
            spec_path = at(f"operators.{slot_name}" + (f".{i}" if isinstance(raw, list) else ""))
            if spec.name == "none" and spec.object is None and not slot.optional:
                raise ConfigError(f"{spec_path}.name", f"slot {slot_name!r} is required; it cannot be 'none'")
            if ":" in spec.name and spec.object is None and not config.allow_imports:
                raise ConfigError(
                    f"{spec_path}.name",
                    f"{spec.name!r} is an import path; set allow_imports: true in "
                    "the config to allow custom operators by import path",
                )
        if slot_name in config.operators:  # the configured operators are checked now, the defaults when asked for
            flow.slot(slot_name)
    flow.params = validate_params(pattern.params, config.params, at("params"))
    if pattern.check is not None:
        pattern.check(flow.params, at("params"))
    chunker_path = at("indexing.chunker")
    try:
        chunker_info = registry.get_operator(Port.CHUNK, config.indexing.chunker.name)
    except RegistryError as exc:
        raise ConfigError(f"{chunker_path}.name", str(exc)) from None
    flow.chunker = ResolvedStep(
        "chunker",
        Port.CHUNK,
        config.indexing.chunker,
        chunker_path,
        chunker_info,
        validate_params(chunker_info.params, config.indexing.chunker.params, f"{chunker_path}.params"),
    )
    return flow


def check_flow(config: FlowConfig, *, path: str = "") -> FlowConfig:
    """Check a structurally valid config against the registry: :func:`resolve` it and keep the config.

    Returns:
        The same config, for chaining.

    Raises:
        ConfigError: On the first problem, naming its path and the allowed values.
    """
    resolve(config, path=path)
    return config


def resolve_operator(
    spec: OperatorSpec, port: Port, env: Providers, *, path: str, allow_imports: bool = False
) -> tuple[str, Callable[[Mapping[str, Any]], dict[str, Any]]]:
    """Build the operator a spec names for a port: look it up, validate its params, call its factory.

    Returns:
        ``(operator name, operator callable)``.

    Raises:
        ConfigError: If the name is unknown, fits another port, its params are invalid, or an import path is
            used without ``allow_imports``.
    """
    obj = spec.object
    if obj is not None:
        return spec.name, registry.adapt(obj, port, env, path=path)
    if ":" in spec.name:
        if not allow_imports:
            raise ConfigError(f"{path}.name", f"{spec.name!r} is an import path; set allow_imports: true to allow it")
        module_name, _, attr = spec.name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{path}.name", f"cannot import {spec.name!r}: {exc}") from None
        info = registry.info_of(factory)
        if info is not None and info.port is not port:
            raise ConfigError(f"{path}.name", f"{spec.name!r} fits port {info.port.value}, not {port.value}")
        params: Any = validate_params(info.params, spec.params, f"{path}.params") if info else dict(spec.params)
        return spec.name, factory(params, env)
    try:
        info = registry.get_operator(port, spec.name)
    except registry.RegistryError as exc:
        raise ConfigError(f"{path}.name", str(exc)) from None
    params = validate_params(info.params, spec.params, f"{path}.params")
    return info.name, info.factory(params, env)
