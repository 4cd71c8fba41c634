"""The prebuilt flow patterns, one file and one factory each: ``build_<pattern>(config, **options)``.

Importing this package registers every pattern (the registry finds it through the ``modular_rag.plugins``
entry point).
"""

from patterns.adaptive import build_adaptive
from patterns.branching import build_branching
from patterns.conditional import build_conditional
from patterns.iterative import build_iterative
from patterns.linear import build_linear
from patterns.recursive import build_recursive

__all__ = [
    "build_adaptive",
    "build_branching",
    "build_conditional",
    "build_iterative",
    "build_linear",
    "build_recursive",
]
