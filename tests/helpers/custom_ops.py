"""A custom operator importable by path, for the allow_imports test."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def keep_two(params: dict[str, Any], env: Any):
    """Keep the first two candidates."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        return {"candidates": list(state.get("candidates") or [])[:2]}

    return run
