"""Which cases of a parametrized test CI runs: the rest are marked ``slow`` (``pytest -m slow`` runs them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest


def slow_except(values: Iterable[Any], in_ci: set[str], name: Callable[[Any], str] = str) -> list[Any]:
    """``values`` as pytest params named by ``name``, each marked ``slow`` unless its name is in ``in_ci``.

    Raises:
        ValueError: If a name in ``in_ci`` is not among the values' names (a renamed case would silently leave CI).
    """
    params = [(name(v), v) for v in values]
    unknown = in_ci - {n for n, _ in params}
    if unknown:
        raise ValueError(f"cases kept in CI but not parametrized: {sorted(unknown)}; cases: {[n for n, _ in params]}")
    return [pytest.param(v, id=n, marks=() if n in in_ci else pytest.mark.slow) for n, v in params]
