"""A config is resolved once per build: every operator's params, the pattern's and the chunker's are validated one
time, however the flow is built, and the cost model reads the same resolution."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from modular_rag import registry, template_path
from modular_rag.builder import build_flow
from modular_rag.config import load_config
from modular_rag.costs import estimate
from modular_rag.errors import ConfigError
from modular_rag.resolve import resolve
from patterns import PATTERNS

pytestmark = pytest.mark.unit


def _params_models() -> set[type[BaseModel]]:
    models = {registry.get_pattern(name).params for name in PATTERNS}
    for port in registry.Port:
        models.update(registry.get_operator(port, name).params for name in registry.operators_for(port))
    return models


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How many times each params model validates a mapping (``model_validate`` of every registered one)."""
    counts: Counter[str] = Counter()
    validate = BaseModel.__dict__["model_validate"].__func__  # pydantic's own, not a subclass's patched one

    def counted(cls: type[BaseModel], obj: Any, *args: Any, **kwargs: Any) -> Any:
        counts[cls.__name__] += 1
        return validate(cls, obj, *args, **kwargs)

    for model in _params_models():
        monkeypatch.setattr(model, "model_validate", classmethod(counted))
    yield counts


@pytest.mark.parametrize("pattern", [p for p in PATTERNS if p != "conditional"])
def test_a_build_validates_each_params_once(pattern: str, validations: Counter[str]) -> None:
    build_flow(template_path(pattern))
    assert validations and max(validations.values()) == 1, validations


def test_a_conditional_build_validates_its_routes_once(validations: Counter[str]) -> None:
    config = load_config(template_path("conditional"))
    chunker = resolve(config).chunker.operator.params.__name__  # type: ignore[union-attr]
    validations.clear()
    build_flow(config)
    built = Counter(validations)
    validations.clear()
    for route in config.params["routes"].values():  # each route's flow on its own
        build_flow(route["flow"])
    # the router twice: as configured when the config is checked, then with the routes the pattern gives it
    assert built == validations + Counter({"ConditionalParams": 1, "RouterParams": 2, chunker: 1})


def test_the_cost_model_reads_the_resolution_the_builder_builds(validations: Counter[str]) -> None:
    flow = resolve(load_config(template_path("iterative"), check=False))
    checked = sum(validations.values())
    estimate(flow)
    build_flow(flow)
    assert sum(validations.values()) == checked  # neither validates anything again


def test_resolution_applies_defaults_enabled_and_none_in_one_place() -> None:
    config = load_config(
        {
            "pattern": "linear",
            "operators": {
                "rerank": [{"name": "mmr", "params": {"k": 5}}, {"name": "dedup", "enabled": False}],
                "generate": "none",
            },
        }
    )
    flow = resolve(config)
    assert [s.name for s in flow.slot("retrieve")] == ["hybrid"]  # the registered default
    assert [(s.name, s.path) for s in flow.slot("rerank")] == [("mmr", "operators.rerank.0")]
    assert flow.slot("rerank")[0].params.k == 5  # type: ignore[union-attr]
    assert not flow.active("generate") and not flow.active("rewrite")
    assert [s.name for s in flow.slot("rewrite", default="hyde")] == ["hyde"]  # a pattern mode's default
    assert flow.slot("verify", default="none") == []
    # a step's config path is its place in the list as written, disabled steps counted
    later = resolve(
        load_config(
            {
                "pattern": "linear",
                "operators": {"rerank": [{"name": "dedup", "enabled": False}, {"name": "mmr", "params": {"k": 5}}]},
            }
        )
    )
    assert [s.path for s in later.slot("rerank")] == ["operators.rerank.1"]
    with pytest.raises(ConfigError, match=r"operators\.rerank\.1\.params\.k"):
        resolve(
            load_config(
                {
                    "pattern": "linear",
                    "operators": {"rerank": [{"name": "dedup", "enabled": False}, {"name": "mmr", "params": {"k": 0}}]},
                },
                check=False,
            )
        )
    with pytest.raises(ConfigError, match="operators.retrieve.params.k"):
        resolve(
            load_config(
                {"pattern": "linear", "operators": {"retrieve": {"name": "bm25", "params": {"k": 0}}}}, check=False
            )
        )
