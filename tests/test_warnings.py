"""The suite shows dependencies' deprecation warnings and fails on any the kit's own code raises (pyproject.toml's
``filterwarnings``), instead of ignoring every DeprecationWarning."""

from __future__ import annotations

import warnings

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("module", ["modular_rag.builder", "operators.retrieval", "patterns.linear"])
def test_a_deprecation_warning_from_the_kit_fails_the_test(module: str) -> None:
    with pytest.raises(DeprecationWarning, match="old call"):
        warnings.warn_explicit("old call", DeprecationWarning, f"{module.replace('.', '/')}.py", 1, module=module)


def test_a_dependencys_deprecation_warning_is_shown_not_raised() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn_explicit("old call", DeprecationWarning, "langgraph/graph.py", 1, module="langgraph.graph")
    assert [str(w.message) for w in seen] == ["old call"]
