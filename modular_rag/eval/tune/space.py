"""Search spaces for ``modular-rag tune``: a flow config in which any value may be a distribution.

A space is YAML::

    objective: ndcg@10                 # the default objective of this space
    base: {providers: {llm: {name: local}}}        # merged under every candidate
    chunker: {choice: [{name: document}, {name: recursive, params: {chunk_size: {int: [400, 1200], step: 200}}}]}
    providers: {sparse: {k1: {float: [0.5, 2.0], step: 0.1}, b: {float: [0.2, 1.0], step: 0.05}}}
    patterns:                          # each pattern's config template (operators, params)
      linear:
        operators:
          retrieve: {choice: [{name: bm25, params: {k: 100}}, {name: hybrid, params: {k: 100, pool: {int: [50, 300]}}}]}

Three forms are distributions; everything else is a literal (lists and mappings are searched inside):

- ``{choice: [a, b, ...]}``: one of the alternatives, which may themselves hold distributions;
- ``{int: [lo, hi], step: s, log: false}``: an integer;
- ``{float: [lo, hi], step: s, log: false}``: a real number (``step`` makes it discrete).

A candidate is drawn by an Optuna trial (define-by-run: a parameter exists only when the alternative that holds it
was drawn), so the optimiser learns per alternative. Parameter names are the config paths
(``linear.operators.retrieve``, ``linear.operators.retrieve=hybrid.params.pool``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from modular_rag.errors import ConfigError

__all__ = ["Sampler", "SearchSpace", "Candidate", "load_space", "default_space_path", "OBJECTIVES", "deep_merge"]

OBJECTIVES = ("ndcg@10", "mrr@10", "recall@5", "recall@10", "all@5", "em", "f1", "contains", "supported")
"""Objectives ``tune`` can maximise: any summary figure of :class:`~modular_rag.eval.runner.FlowResult`."""

_DISTRIBUTIONS = ("choice", "int", "float")


class Sampler(Protocol):
    """What drawing a candidate needs from an Optuna trial (``optuna.Trial`` satisfies it)."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int: ...

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``over``, mappings merged key by key (lists and scalars replaced)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _kind(node: Any) -> str | None:
    """The distribution a node is (``choice``/``int``/``float``), or ``None`` for a literal."""
    if isinstance(node, Mapping) and node and next(iter(node)) in _DISTRIBUTIONS:
        keys = set(node)
        kind = next(k for k in _DISTRIBUTIONS if k in keys)
        if kind == "choice" and keys == {"choice"} or kind != "choice" and keys <= {kind, "step", "log"}:
            return kind
    return None


def _label(option: Any, index: int) -> str:
    """A short, readable label for an alternative (its operator name, or the scalar itself)."""
    if isinstance(option, Mapping) and isinstance(option.get("name"), str):
        return str(option["name"])
    if option is None or isinstance(option, str | int | float | bool):
        return str(option)
    return f"#{index}"


def _labels(options: Sequence[Any]) -> list[str]:
    raw = [_label(o, i) for i, o in enumerate(options)]
    return [f"{label}#{i}" if raw.count(label) > 1 else label for i, label in enumerate(raw)]


def _check(node: Any, path: str) -> None:
    """Raise a ConfigError naming the path of a malformed distribution."""
    kind = _kind(node)
    if kind == "choice":
        options = node["choice"]
        if not isinstance(options, list) or not options:
            raise ConfigError(path, "'choice' needs a non-empty list of alternatives")
        for label, option in zip(_labels(options), options, strict=True):
            _check(option, f"{path}={label}")
    elif kind in ("int", "float"):
        bounds = node[kind]
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds)):
            raise ConfigError(path, f"'{kind}' needs [low, high] numbers, got {bounds!r}")
        if bounds[0] > bounds[1]:
            raise ConfigError(path, f"'{kind}' low {bounds[0]} is above high {bounds[1]}")
        step = node.get("step")
        if step is not None and (not isinstance(step, int | float) or step <= 0):
            raise ConfigError(path, f"'step' must be a positive number, got {step!r}")
        if node.get("log") and (bounds[0] <= 0 or step is not None):
            raise ConfigError(path, "'log' needs a positive low bound and no step")
    elif isinstance(node, Mapping):
        for key, value in node.items():
            _check(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check(value, f"{path}[{i}]")


def _draw(node: Any, path: str, trial: Sampler) -> Any:
    kind = _kind(node)
    if kind == "choice":
        options = node["choice"]
        if len(options) == 1:
            return _draw(options[0], path, trial)
        labels = _labels(options)
        label = trial.suggest_categorical(path, labels)
        return _draw(options[labels.index(label)], f"{path}={label}", trial)
    if kind == "int":
        lo, hi = (int(b) for b in node["int"])
        return trial.suggest_int(path, lo, hi, step=int(node.get("step") or 1), log=bool(node.get("log")))
    if kind == "float":
        lo_f, hi_f = (float(b) for b in node["float"])
        step = node.get("step")
        value = trial.suggest_float(path, lo_f, hi_f, step=float(step) if step else None, log=bool(node.get("log")))
        return round(value, 6)
    if isinstance(node, Mapping):
        return {key: _draw(value, f"{path}.{key}" if path else str(key), trial) for key, value in node.items()}
    if isinstance(node, list):
        return [_draw(value, f"{path}[{i}]", trial) for i, value in enumerate(node)]
    return node


def _size(node: Any) -> float:
    """How many candidates a node spans (continuous ranges count as 10), to describe a space."""
    kind = _kind(node)
    if kind == "choice":
        return float(sum(_size(o) for o in node["choice"]))
    if kind in ("int", "float"):
        lo, hi = node[kind]
        step = node.get("step")
        return float(int((hi - lo) / step) + 1) if step else 10.0
    if isinstance(node, Mapping):
        out = 1.0
        for value in node.values():
            out *= _size(value)
        return out
    if isinstance(node, list):
        out = 1.0
        for value in node:
            out *= _size(value)
        return out
    return 1.0


@dataclass(frozen=True)
class Candidate:
    """One drawn configuration: the flow config (a mapping ``load_config`` accepts) and the chunker it indexes with.

    ``params`` are the values the trial drew, by parameter name (the config path).
    """

    config: dict[str, Any]
    chunker: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)

    def key(self) -> str:
        """A content hash of what the candidate runs (identical candidates are run once)."""
        blob = json.dumps({"config": self.config, "chunker": self.chunker}, sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def summary(self) -> str:
        """The drawn values, shortest names first: ``retrieve=hybrid pool=200 k1=0.9``."""
        parts = []
        for name, value in self.params.items():
            short = name.rsplit(".", 1)[-1].split("=", 1)[0]
            parts.append(f"{short}={round(value, 6) if isinstance(value, float) else value}")
        return " ".join(parts) or str(self.config.get("pattern"))


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space (see the module docs for the YAML)."""

    patterns: dict[str, Any]
    objective: str = "ndcg@10"
    base: dict[str, Any] = field(default_factory=dict)
    providers: dict[str, Any] = field(default_factory=dict)
    chunker: Any = None
    source: str = ""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "") -> SearchSpace:
        """Validate a space given as a mapping.

        Raises:
            ConfigError: If a key is unknown, ``patterns`` is missing or names an unregistered pattern, the objective
                is not one of :data:`OBJECTIVES`, or a distribution is malformed (the path says where).
        """
        from modular_rag.registry import pattern_names

        allowed = {"objective", "base", "providers", "chunker", "patterns"}
        unknown = set(data) - allowed
        if unknown:
            raise ConfigError(", ".join(sorted(unknown)), f"unknown space key; allowed: {', '.join(sorted(allowed))}")
        patterns = data.get("patterns")
        if not isinstance(patterns, Mapping) or not patterns:
            raise ConfigError("patterns", "a space needs 'patterns': a mapping of pattern name -> config template")
        known = set(pattern_names())
        for name, template in patterns.items():
            if name not in known:
                raise ConfigError(f"patterns.{name}", f"unknown pattern; patterns: {', '.join(sorted(known))}")
            if template is not None and not isinstance(template, Mapping):
                raise ConfigError(f"patterns.{name}", "a pattern's template must be a mapping (operators, params)")
        objective = str(data.get("objective", "ndcg@10"))
        if objective not in OBJECTIVES:
            raise ConfigError("objective", f"unknown objective {objective!r}; objectives: {', '.join(OBJECTIVES)}")
        for key in ("base", "providers"):
            if data.get(key) is not None and not isinstance(data[key], Mapping):
                raise ConfigError(key, "must be a mapping")
        _check(data.get("providers") or {}, "providers")
        _check(data.get("chunker"), "chunker")
        for name, template in patterns.items():
            _check(template or {}, name)
        return cls(
            patterns={name: dict(t or {}) for name, t in patterns.items()},
            objective=objective,
            base=dict(data.get("base") or {}),
            providers=dict(data.get("providers") or {}),
            chunker=data.get("chunker"),
            source=source,
        )

    def size(self) -> float:
        """Roughly how many distinct candidates the space holds (continuous ranges count as 10 values)."""
        per_pattern = sum(_size(t) for t in self.patterns.values())
        return per_pattern * _size(self.providers) * _size(self.chunker)

    def fingerprint(self) -> str:
        """A hash of the space (a stored study is only resumed with the same space)."""
        blob = json.dumps([self.patterns, self.objective, self.base, self.providers, self.chunker], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def draw(self, trial: Sampler, *, default_chunker: str = "document") -> Candidate:
        """Draw one candidate with the trial's suggestions.

        The config is ``base``, then the drawn ``providers``, then the drawn pattern's template, merged; the chunker
        is the drawn one, or the one ``base.indexing.chunker`` names, or ``default_chunker``.
        """
        names = list(self.patterns)
        pattern = names[0] if len(names) == 1 else trial.suggest_categorical("pattern", names)
        template = _draw(self.patterns[pattern], pattern, trial)
        providers = _draw(self.providers, "providers", trial)
        config = deep_merge(self.base, {"pattern": pattern})
        if providers:
            config = deep_merge(config, {"providers": providers})
        config = deep_merge(config, template)
        if self.chunker is not None:
            chunker = _draw(self.chunker, "chunker", trial)
        else:
            chunker = ((self.base.get("indexing") or {}).get("chunker")) or {"name": default_chunker}
        chunker = {"name": chunker} if isinstance(chunker, str) else dict(chunker)
        params = dict(getattr(trial, "params", {}) or {})
        return Candidate(config=config, chunker=chunker, params=params)


def default_space_path(objective: str) -> Path:
    """The bundled default space for an objective: retrieval ranking, multi-hop coverage, or answers.

    Raises:
        ConfigError: If the objective is unknown.
    """
    if objective not in OBJECTIVES:
        raise ConfigError("--objective", f"unknown objective {objective!r}; objectives: {', '.join(OBJECTIVES)}")
    name = {"all@5": "multihop", "em": "answers", "f1": "answers", "contains": "answers", "supported": "answers"}
    return Path(__file__).parent / "spaces" / f"{name.get(objective, 'retrieval')}.yaml"


def load_space(source: str | Path | Mapping[str, Any] | None, *, objective: str | None = None) -> SearchSpace:
    """Load a search space from a YAML file or a mapping; ``None`` loads the default space of ``objective``.

    Raises:
        ConfigError: If the file is missing or not YAML, or the space is invalid.
    """
    if source is None:
        path = default_space_path(objective or "ndcg@10")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return SearchSpace.from_mapping(data, source=f"default ({path.name})")
    if isinstance(source, Mapping):
        return SearchSpace.from_mapping(source, source="<mapping>")
    path = Path(source)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("--space", f"{path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError("--space", f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError("--space", f"{path} must hold a mapping with 'patterns'")
    return SearchSpace.from_mapping(data, source=str(path))
