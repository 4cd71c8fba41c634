"""Flow search: ``modular-rag tune`` finds the best flow of a search space for a dataset within a budget.

:mod:`~modular_rag.eval.tune.space` reads search spaces, :mod:`~modular_rag.eval.tune.data` splits the questions,
:mod:`~modular_rag.eval.tune.search` runs the Optuna study (:mod:`~modular_rag.eval.tune.study`), and
:mod:`~modular_rag.eval.tune.output` writes what it found.
"""

from modular_rag.eval.tune.search import TuneResult, TuneSettings, parse_budget, tune
from modular_rag.eval.tune.space import SearchSpace, load_space

__all__ = ["tune", "TuneSettings", "TuneResult", "parse_budget", "SearchSpace", "load_space"]
