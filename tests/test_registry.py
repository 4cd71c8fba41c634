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


def test_each_files_provides_list_is_what_it_registers() -> None:
    # a worker imports only the files its config names (through PROVIDES): a name missing from a list would make
    # every lookup of it import the whole catalogue, a stale entry an import for nothing
    import importlib
    import pkgutil

    import operators
    import patterns

    registry.load_plugins()
    for pkg in (operators, patterns):  # every file, listed or not: a new file missing from PROVIDES must show
        for module in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{module.name}")
    registered: dict[str, set[str]] = {}
    for info in registry.catalogue():
        registered.setdefault(info.factory.__module__, set()).add(info.name)
    for name in registry.pattern_names():
        registered.setdefault(registry.get_pattern(name).factory.__module__, set()).add(name)
    listed = {
        f"{pkg.__name__}.{part}": set(names) for pkg in (operators, patterns) for part, names in pkg.PROVIDES.items()
    }
    assert listed == registered, "run: .venv/bin/python scripts/sync_readme.py"


def test_every_pattern_file_has_its_template() -> None:
    # the served graphs and the pattern runs list the templates; the registry, the files
    import patterns
    from modular_rag import pattern_names

    assert pattern_names() == patterns.PATTERNS
    assert set(registry.pattern_names()) == set(pattern_names())


def test_a_flow_imports_the_files_its_config_names_and_no_others() -> None:
    # at 1M chunks a new worker's first answer took 0.59 s, 0.21-0.27 s of it load_config importing every operator
    # and pattern file to look up the few the config names
    import json
    import subprocess
    import sys

    code = (
        "import json, sys; from modular_rag.config import load_config; load_config({'pattern': 'linear', "
        "'operators': {'retrieve': 'bm25', 'generate': 'none', 'context': 'none'}}); "
        "print(json.dumps([m for m in sys.modules if m.startswith(('operators.', 'patterns.'))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    assert {"patterns.linear", "operators.retrieval", "operators.indexing"} <= loaded
    assert not loaded & {
        "patterns.adaptive",
        "patterns.recursive",
        "operators.judging",
        "operators.questions",
        "operators.pre_retrieval",
        "operators.hops",
    }, loaded
