"""Moved to :mod:`modular_rag.eval.tune`; this name re-exports its public API for one release."""

from modular_rag.eval.tune import SearchSpace, TuneResult, TuneSettings, load_space, parse_budget, tune

__all__ = ["tune", "TuneSettings", "TuneResult", "parse_budget", "SearchSpace", "load_space"]
