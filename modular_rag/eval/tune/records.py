"""What a tuning run is told and what it records: its settings, one row per trial, its result, and the pure
functions over rows (the Pareto front, a candidate's identity, the ranking the confirmation reads)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from modular_rag.errors import ConfigError

if TYPE_CHECKING:
    from modular_rag.eval.runner import FlowResult
    from modular_rag.eval.tune.data import TuneData

__all__ = ["TuneSettings", "TrialRow", "TuneResult", "parse_budget", "rungs", "pareto_front", "identity", "ranked"]


def parse_budget(text: str | float) -> float:
    """Seconds from ``90s``, ``45m``, ``1.5h`` or a bare number of seconds.

    Raises:
        ConfigError: If the text is none of these or not positive.
    """
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        raw = text.strip().lower()
        scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(raw[-1:])
        try:
            seconds = float(raw[:-1]) * scale if scale else float(raw)
        except ValueError:
            raise ConfigError("--budget", f"{text!r} is not a duration; use 90s, 45m, 1.5h or seconds") from None
    if not seconds > 0:
        raise ConfigError("--budget", f"the budget must be positive (got {text!r})")
    return seconds


def rungs(n: int, *, min_questions: int = 20, reduction: int = 3) -> list[int]:
    """The question counts a candidate is scored at: ``r, r * reduction, ...`` below ``n``, then ``n``, where
    ``r = max(min_questions, n / reduction**2)`` (the successive-halving pruner checks at exactly these)."""
    first = min(n, max(min_questions, math.ceil(n / reduction**2)))
    out = []
    while first < n:
        out.append(first)
        first *= reduction
    return [*out, n]


@dataclass(frozen=True)
class TuneSettings:
    """How a tuning run searches. Budgets of ``None`` are not enforced."""

    budget_s: float
    objective: str = "ndcg@10"
    max_llm_calls: float | None = None
    max_latency_ms: float | None = None
    seed: int = 0
    val_fraction: float = 0.25
    report_fraction: float = 0.3
    min_questions: int = 30
    reduction: int = 3
    pruner: Literal["paired", "halving", "median", "none"] = "paired"
    max_trials: int | None = None
    confirm: int = 5
    finetune: Mapping[str, Any] | None = None
    router: bool = False
    report: bool = True
    concurrency: int = 1
    max_trial_share: float = 0.25
    """One trial may take at most this share of the budget (projected from its first questions)."""

    def recorded(self) -> dict[str, Any]:
        """What must match for a stored study to be resumed (the budget and the report may change)."""
        return {
            "objective": self.objective,
            "max_llm_calls": self.max_llm_calls,
            "max_latency_ms": self.max_latency_ms,
            "seed": self.seed,
            "min_questions": self.min_questions,
            "reduction": self.reduction,
            "pruner": self.pruner,
            "finetune": dict(self.finetune) if self.finetune is not None else None,
        }


@dataclass
class TrialRow:
    """One trial as the report shows it."""

    number: int
    state: str
    verdict: str
    pattern: str
    summary: str
    value: float | None
    questions: int
    llm_calls: float | None
    retrievals: float | None
    ms: float | None
    feasible: bool
    config: dict[str, Any]
    chunker: dict[str, Any]
    confirmed: float | None = None


@dataclass
class TuneResult:
    """What a tuning run found and wrote."""

    out: Path
    objective: str
    rows: list[TrialRow]
    best: TrialRow | None
    front: list[TrialRow]
    spent_s: float
    finished: bool
    data: TuneData
    files: dict[str, Path] = field(default_factory=dict)
    report: list[FlowResult] = field(default_factory=list)


def pareto_front(rows: Sequence[TrialRow]) -> list[TrialRow]:
    """The feasible complete trials no other one beats on quality without costing more LLM calls and time
    (ties on quality and cost keep the earliest), by quality."""
    done = [r for r in rows if r.state == "complete" and r.feasible and r.value is not None and r.ms is not None]
    unique: dict[str, TrialRow] = {}
    for r in done:
        unique.setdefault(identity(r), r)
    pool = list(unique.values())

    def beats(a: TrialRow, b: TrialRow) -> bool:
        qa, qb = a.value or 0.0, b.value or 0.0
        la, lb, ma, mb = a.llm_calls or 0.0, b.llm_calls or 0.0, a.ms or 0.0, b.ms or 0.0
        return qa >= qb and la <= lb and ma <= mb and (qa > qb or la < lb or ma < mb)

    front = [r for r in pool if not any(beats(o, r) for o in pool if o is not r)]
    return sorted(front, key=lambda r: (-(r.value or 0.0), r.llm_calls or 0.0, r.ms or 0.0))


def identity(row: TrialRow) -> str:
    """What a trial ran, without its name (duplicates of one candidate share it)."""
    return json.dumps([{k: v for k, v in row.config.items() if k != "name"}, row.chunker], sort_keys=True)


def ranked(rows: Sequence[TrialRow]) -> list[TrialRow]:
    """Feasible complete trials by val quality, then cheaper first; one row per distinct candidate."""
    seen: set[str] = set()
    out = []
    for r in sorted(rows, key=lambda r: (-(r.value or 0.0), r.llm_calls or 0.0, r.ms or 0.0, r.number)):
        blob = identity(r)
        if r.state == "complete" and r.feasible and r.value is not None and blob not in seen:
            seen.add(blob)
            out.append(r)
    return out
