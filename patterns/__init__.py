"""The prebuilt flow patterns, one file and one factory each: ``build_<pattern>(config, *, checkpointer=None)``.

Importing this package registers every pattern (the registry finds it through the ``modular_rag.plugins``
entry point).
"""

from patterns.linear import build_linear

__all__ = ["build_linear"]
