"""Test sets from documents: a labelled BEIR folder made from a client's corpus alone (``modular-rag testset``).

Question makers and checks are registered operators (ports ``question`` and ``check``, module ``testset``), so a
config swaps them like any other brick; :func:`make_testset` runs them, balances the kinds and writes the folder.
The names below are imported on first use, so the command line's parser stays cheap to build.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "make_testset",
    "TestsetConfig",
    "TestsetResult",
    "MakerSpec",
    "CheckSpec",
    "load_testset_config",
    "DEFAULT_MAKERS",
    "DEFAULT_CHECKS",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("modular_rag.eval.testset.build"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
