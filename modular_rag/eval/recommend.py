"""The best config within a budget (``modular-rag recommend``): evaluate candidate flows on a dataset (usually a
small subset of its queries), skip those whose cost model says they cannot fit the LLM-call budget, and pick the
best measured quality among those whose measured cost fits.

Also the pattern runs (:data:`PATTERN_RUNS`, :func:`pattern_config`): every pattern template and the second mode
of some, the default candidates here and the runs of ``python benchmarks/bench.py patterns``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modular_rag.costs import Span

if TYPE_CHECKING:
    from modular_rag.config import FlowConfig
    from modular_rag.eval.datasets import BeirDataset

__all__ = [
    "PATTERN_RUNS",
    "VARIANTS",
    "pattern_config",
    "pattern_candidates",
    "config_candidates",
    "Candidate",
    "Recommendation",
    "recommend",
]

VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "linear": {
        "linear-checked": {"operators": {"generate": {"name": "cited_answer", "params": {"mode": "checked"}}}},
        "linear-multihop": {
            "operators": {
                "retrieve": {"name": "hybrid", "params": {"k": 20, "pool": 20}},
                "rerank": {"name": "link_hop", "params": {"k": 10}},
            }
        },
    },
    "branching": {
        "branching-documents": {
            "params": {"mode": "documents", "branches": 3},
            "operators": {"expand": "none", "fuse": {"name": "replug"}},
        },
    },
    "iterative": {
        "iterative-ircot": {
            "operators": {
                "hop": "thought",
                "retrieve": {"name": "hybrid", "params": {"k": 4}},
                "context": {"name": "budget", "params": {"max_chunks": 12, "max_tokens": 1800}},
            }
        },
    },
    "adaptive": {
        "adaptive-self-rag": {
            "params": {"mode": "self_rag", "max_steps": 2},
            "operators": {"draft": "none", "judge": {"name": "llm_judge"}},
        },
    },
}
"""Pattern -> its named variant runs (a template's overrides): linear with the model answering (checked) and with
the document-graph hop; the second mode of branching and adaptive; the iterative pattern as IRCoT (the next
chain-of-thought sentence as the query, 4 passages a round, up to 12 kept)."""


def _pattern_runs() -> dict[str, tuple[str, dict[str, Any]]]:
    from modular_rag import pattern_names

    runs: dict[str, tuple[str, dict[str, Any]]] = {}
    for pattern in pattern_names():
        runs[pattern] = (pattern, {})
        runs.update((run, (pattern, overrides)) for run, overrides in VARIANTS.get(pattern, {}).items())
    return runs


PATTERN_RUNS: dict[str, tuple[str, dict[str, Any]]] = _pattern_runs()
"""The pattern runs of ``bench patterns`` (and the default candidates of ``recommend``): every pattern's template
(one per pattern template, in the paper's order), each followed by its :data:`VARIANTS`."""


def pattern_config(run: str) -> dict[str, Any]:
    """A template with a run's overrides applied one level deep.

    Raises:
        ConfigError: If the run is unknown (the message lists the runs).
    """
    import yaml

    from modular_rag import template_path
    from modular_rag.errors import ConfigError

    try:
        pattern, overrides = PATTERN_RUNS[run]
    except KeyError:
        raise ConfigError("--runs", f"unknown run {run!r}; runs: {', '.join(PATTERN_RUNS)}") from None
    config = yaml.safe_load(template_path(pattern).read_text(encoding="utf-8"))
    for key, value in overrides.items():
        config[key] = {**config.get(key, {}), **value}
    config["name"] = run
    return config


def pattern_candidates(runs: Iterable[str] | None = None) -> list[tuple[str, FlowConfig]]:
    """``(name, config)`` of pattern runs (default: every run of :data:`PATTERN_RUNS`, in its order).

    Raises:
        ConfigError: If a run is unknown.
    """
    from modular_rag.config import load_config

    return [(run, load_config(pattern_config(run))) for run in (PATTERN_RUNS if runs is None else runs)]


def config_candidates(paths: Iterable[str]) -> list[tuple[str, FlowConfig]]:
    """``(name, config)`` of config files: each config's ``name``, else its file's stem.

    Raises:
        ConfigError: If a file is missing or not a valid config.
    """
    from pathlib import Path

    from modular_rag.config import load_config

    configs = [(Path(p).stem, load_config(p)) for p in paths]
    return [(config.name or stem, config) for stem, config in configs]


@dataclass(frozen=True)
class Candidate:
    """One candidate's outcome.

    Attributes:
        name: The candidate's name.
        pattern: Its pattern.
        modelled_llm_calls: LLM calls per query its cost model predicts (a range).
        summary: Its evaluation summary (:meth:`FlowResult.summary`: quality metrics, ``llm_calls``, ``ms`` ...);
            ``None`` when it was not run, its cost model putting it over the LLM-call budget.
        quality: The measured quality (``summary[quality]``); ``None`` when not run.
        fits: Whether it was run and its measured LLM calls and milliseconds per query are within the budget.
    """

    name: str
    pattern: str
    modelled_llm_calls: Span
    summary: dict[str, float] | None
    quality: float | None
    fits: bool

    @property
    def verdict(self) -> str:
        """The budget column: ``fits``, ``over budget (measured)`` or ``over budget by its cost model``."""
        if self.summary is None:
            return "over budget by its cost model"
        return "fits" if self.fits else "over budget (measured)"

    def cells(self) -> list[str]:
        """The table row: name, pattern, modelled LLM calls/q, measured LLM calls/q, ms/q, quality, verdict."""
        if self.summary is None or self.quality is None:
            return [self.name, self.pattern, str(self.modelled_llm_calls), "-", "-", "-", self.verdict]
        return [
            self.name,
            self.pattern,
            str(self.modelled_llm_calls),
            f"{self.summary['llm_calls']:.2f}",
            f"{self.summary['ms']:.0f}",
            f"{self.quality:.3f}",
            self.verdict,
        ]


@dataclass(frozen=True)
class Recommendation:
    """What :func:`recommend` found.

    Attributes:
        quality: The metric "best" was measured by.
        candidates: Every candidate's outcome, in the order given.
        best: The candidate with the highest quality among those that fit (the first of equals); ``None`` when
            none fits.
    """

    quality: str
    candidates: list[Candidate]
    best: Candidate | None

    @property
    def headers(self) -> list[str]:
        """The table's column headers."""
        return ["config", "pattern", "LLM/q model", "LLM/q measured", "ms/q", self.quality, "budget"]

    def rows(self) -> list[list[str]]:
        """The table's rows, one per candidate (see :meth:`Candidate.cells`)."""
        return [c.cells() for c in self.candidates]


def recommend(
    dataset: BeirDataset,
    candidates: Sequence[tuple[str, FlowConfig]],
    *,
    quality: str = "f1",
    max_llm_calls: float | None = None,
    max_latency_ms: float | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> Recommendation:
    """Evaluate each candidate on the dataset's queries and pick the best within the budget.

    A candidate whose cost model says it may take more LLM calls per query than ``max_llm_calls`` (its worst case)
    is not run. The others are evaluated over the dataset's cached index, chunked as each config chunks
    (:func:`~modular_rag.eval.runner.config_chunker`: the config's own ``indexing.chunker`` when it sets one, else
    the dataset's default) with each config's providers; one fits when its mean LLM calls and milliseconds per query
    are within the budget. ``quality`` ``right`` scores answers as a user does (:func:`~modular_rag.eval.runner.
    answered_right`: the gold value with a citation on a gold passage, a refusal of an unanswerable question).

    Args:
        dataset: The dataset, already cut to the queries to evaluate (``BeirDataset.limited``).
        candidates: ``(name, config)`` pairs (:func:`pattern_candidates`, :func:`config_candidates`).
        quality: The summary metric "best" means (``f1``, ``em``, ``contains``, ``supported``, ``ndcg@10`` ...).
        max_llm_calls: Mean LLM calls per query allowed (``None``: no limit).
        max_latency_ms: Mean milliseconds per query allowed (``None``: no limit).
        progress: Show progress bars while indexing and evaluating.
        log: Where indexing messages go (``dataset_providers``'s ``log``).

    Returns:
        Every candidate's outcome and the best.

    Raises:
        KeyError: If ``quality`` is not in the evaluation summary.
    """
    from modular_rag.costs import estimate
    from modular_rag.eval.runner import config_chunker, dataset_providers, evaluate_flow

    results: list[Candidate] = []
    best: Candidate | None = None
    best_quality = 0.0
    for name, config in candidates:
        est = estimate(config)
        if max_llm_calls is not None and est.llm_calls.hi > max_llm_calls:  # it may call the model more: not run
            results.append(Candidate(name, config.pattern, est.llm_calls, None, None, False))
            continue
        chunker = config_chunker(config, dataset.default_chunker)  # the corpus chunked as the config chunks it
        env = dataset_providers(dataset, config.providers, chunker=chunker, progress=progress, log=log)
        summary = evaluate_flow(config, dataset, env, name=name, progress=progress).summary()
        fits = (max_llm_calls is None or summary["llm_calls"] <= max_llm_calls) and (
            max_latency_ms is None or summary["ms"] <= max_latency_ms
        )
        result = Candidate(name, config.pattern, est.llm_calls, summary, summary[quality], fits)
        results.append(result)
        if fits and (best is None or summary[quality] > best_quality):
            best, best_quality = result, summary[quality]
    return Recommendation(quality, results, best)
