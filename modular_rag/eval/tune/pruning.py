"""Pruning on growing question subsets.

A candidate's score on the first questions is an estimate, not a learning curve: Optuna's median pruner compares a
trial's best value so far (right for training curves, wrong here: a lucky first rung would shield a candidate
forever), and successive halving keeps only the best third of every rung, which on a few dozen questions prunes good
candidates on noise (seen on SciFact: hybrid retrievers pruned at 23 questions behind a dense one that then scored
0.05 lower on all of them). :class:`PairedPruner` compares like with like: at a rung, the candidate and the best
finished trial on the *same* questions, and prunes only when the candidate is behind by more than ``z`` standard
errors of the per-question differences (a paired test; the questions are the variance both share).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

__all__ = ["PairedPruner", "per_question", "SCORES"]

SCORES = "per_question"
"""The user attribute holding a trial's per-question objective values, in val order."""


def per_question(records: Sequence[Any], qrels: Mapping[str, Mapping[str, int]], objective: str) -> list[float]:
    """Each question's value of the objective, in the records' order (the means of these are the summary's)."""
    if objective in ("em", "f1", "contains"):
        return [float(getattr(r, objective)) for r in records]
    if objective == "supported":
        return [float(r.supported or 0.0) for r in records]
    if objective == "all@5":
        out = []
        for r in records:
            gold = [d for d, s in qrels.get(r.qid, {}).items() if s > 0]
            out.append(float(all(d in r.docs[:5] for d in gold)))
        return out
    from modular_rag.eval.metrics import retrieval_metrics

    run = {r.qid: {d: float(len(r.docs) - i) for i, d in enumerate(r.docs)} for r in records}
    recall = sorted({int(objective.split("@")[1])} | {10}) if objective.startswith("recall@") else [10]
    metrics = retrieval_metrics({r.qid: qrels.get(r.qid, {}) for r in records}, run, recall_at=recall)
    return [float(metrics[r.qid][objective]) for r in records]


class PairedPruner(optuna.pruners.BasePruner):
    """Prune a trial at a rung when it trails the best finished trial on the same questions by more than ``z``
    standard errors of the paired per-question differences (and by more than ``margin``)."""

    def __init__(self, *, z: float = 2.0, margin: float = 0.0, min_trials: int = 1) -> None:
        self.z, self.margin, self.min_trials = z, margin, min_trials

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        mine = trial.user_attrs.get(SCORES) or []
        if not mine:
            return False
        done = [
            t
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get(SCORES) and t.user_attrs.get("feasible", True) and t.value is not None
        ]
        if len(done) < self.min_trials:
            return False
        best = max(done, key=lambda t: t.value or 0.0)
        theirs = best.user_attrs[SCORES][: len(mine)]
        if len(theirs) < len(mine) or len(mine) < 2:
            return False
        diffs = [a - b for a, b in zip(mine, theirs, strict=True)]
        n = len(diffs)
        mean = sum(diffs) / n
        var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
        se = math.sqrt(var / n)
        return mean < -self.margin and mean + self.z * se < 0.0
