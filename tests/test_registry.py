"""Registry: three tiers, ports, lookup errors generated from the registry."""

from __future__ import annotations

import pytest

from modular_rag import registry
from modular_rag.errors import RegistryError
from modular_rag.registry import MODULES, Port

pytestmark = pytest.mark.unit


def test_catalogue_is_ordered_by_the_taxonomy() -> None:
    infos = registry.catalogue()
    assert infos, "plugins were not loaded"
    order = [list(MODULES).index(i.module) for i in infos]
    assert order == sorted(order)
    for info in infos:
        assert info.submodule in MODULES[info.module]
        assert info.summary, f"{info.name} has no docstring summary"


def test_unknown_name_lists_the_valid_names_from_the_registry() -> None:
    with pytest.raises(RegistryError) as err:
        registry.get_operator(Port.RETRIEVE, "bm26")
    message = str(err.value)
    for name in registry.operators_for(Port.RETRIEVE):
        assert name in message
    assert "none" in message


def test_misplaced_operator_says_which_port_it_fits() -> None:
    with pytest.raises(RegistryError, match="fits port retrieve"):
        registry.get_operator(Port.REFINE, "bm25")


def test_registering_a_name_twice_for_a_port_is_refused() -> None:
    from modular_rag.providers import Providers

    def other(params: registry.NoParams, env: Providers) -> None:
        """Another bm25."""

    with pytest.raises(RegistryError, match="already registered"):
        registry.operator("retrieval", "sparse", "bm25", port=Port.RETRIEVE)(other)


def test_unknown_module_and_submodule_are_refused() -> None:
    with pytest.raises(RegistryError, match="modules are"):
        registry.operator("retrieving", "sparse", "x", port=Port.RETRIEVE)
    with pytest.raises(RegistryError, match="sub-modules are"):
        registry.operator("retrieval", "fuzzy", "x", port=Port.RETRIEVE)


def test_unknown_pattern_lists_patterns() -> None:
    with pytest.raises(RegistryError, match="linear"):
        registry.get_pattern("spiral")
