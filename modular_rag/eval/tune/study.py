"""The Optuna study a tuning run keeps in ``OUT/study.db``: opening (or resuming) it, reading its trials as rows
and rates, and the two guards of a run (Ctrl-C at a safe point, one run per output folder)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from modular_rag.errors import ConfigError, ModularRagError
from modular_rag.eval.tune.records import TrialRow, TuneSettings
from modular_rag.eval.tune.space import SearchSpace

__all__ = [
    "STUDY",
    "require_optuna",
    "open_study",
    "trial_rows",
    "trial_row",
    "measured_rates",
    "best_value",
    "ran",
    "counted",
    "stale",
    "Interrupt",
    "OutLock",
]


STUDY = "tune"


def require_optuna() -> None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        from modular_rag.errors import MissingDependencyError

        raise MissingDependencyError('modular-rag tune needs Optuna: pip install "modular-rag[eval]"') from None


def measured_rates(study: Any) -> tuple[float | None, float | None]:
    """Per-retrieval and per-LLM-call milliseconds measured by this study's finished trials (medians)."""
    retr, llm = [], []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("ms") is None or a.get("duplicate_of") is not None:
            continue
        if not a.get("llm_calls") and a.get("retrievals"):
            retr.append(a["ms"] / a["retrievals"])
    r = statistics.median(retr) if retr else None
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("ms") is not None and a.get("llm_calls") and a.get("duplicate_of") is None:
            llm.append(max(1.0, a["ms"] - (r or 0.0) * (a.get("retrievals") or 0.0)) / a["llm_calls"])
    return r, (statistics.median(llm) if llm else None)


def trial_rows(study: Any) -> list[TrialRow]:
    """Every trial of the study as a row (with its fit+val score when it was confirmed)."""
    confirmed = study.user_attrs.get("confirmed", {})
    rows = [trial_row(t) for t in study.get_trials(deepcopy=False)]
    for r in rows:
        r.confirmed = (confirmed.get(str(r.number)) or {}).get("both")
    return rows


def trial_row(t: Any) -> TrialRow:
    a = t.user_attrs
    value = t.value if t.state.name == "COMPLETE" else a.get("last_value")
    return TrialRow(
        t.number,
        t.state.name.lower(),
        a.get("verdict", t.state.name.lower()),
        str(a.get("pattern", "")),
        str(a.get("summary", "")),
        value,
        int(a.get("questions", 0)),
        a.get("llm_calls"),
        a.get("retrievals"),
        a.get("ms"),
        bool(a.get("feasible", False)),
        dict(a.get("config") or {}),
        dict(a.get("chunker") or {}),
    )


class Interrupt:
    """Ctrl-C during a search: the first stops the trial at its next batch of questions (a safe point: never
    inside a write to the study file), a second one stops at once."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.hit = False
        self._old: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.hit:
            raise KeyboardInterrupt
        self.hit = True
        self.say("interrupted: stopping after the current batch of questions (Ctrl-C again to stop now)")

    def __enter__(self) -> Interrupt:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None


class OutLock:
    """One ``tune`` per output folder at a time: a ``filelock`` lock on ``path``, which the OS releases if the process
    dies (``flock`` on Unix, ``msvcrt`` locking on Windows; where neither exists, filelock's soft lock, a file that
    outlives a killed run).

    Raises:
        ModularRagError: If another run holds the folder's lock.
    """

    def __init__(self, path: Path) -> None:
        from filelock import FileLock, Timeout

        self.lock = FileLock(path)
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            raise ModularRagError(
                f"another modular-rag tune is running on {path.parent}; wait for it or use another --out"
            ) from None

    def release(self) -> None:
        """Let the next run take the folder."""
        self.lock.release()


def open_study(out: Path, space: SearchSpace, settings: TuneSettings, dataset: str, first_rung: int) -> Any:
    import warnings

    import optuna

    from modular_rag.eval.tune.pruning import PairedPruner  # an Optuna pruner: imported with Optuna, not here

    with warnings.catch_warnings():  # `group` (conditional spaces) is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=settings.seed, multivariate=True, group=True, n_startup_trials=8)
    pruner: Any = {
        "paired": PairedPruner(),
        "halving": optuna.pruners.SuccessiveHalvingPruner(min_resource=first_rung, reduction_factor=settings.reduction),
        "median": optuna.pruners.MedianPruner(n_startup_trials=5),
        "none": optuna.pruners.NopPruner(),
    }[settings.pruner]
    storage = optuna.storages.RDBStorage(f"sqlite:///{(out / 'study.db').resolve()}")
    study = optuna.create_study(
        study_name=STUDY, storage=storage, direction="maximize", sampler=sampler, pruner=pruner, load_if_exists=True
    )
    recorded = {"space": space.fingerprint(), "dataset": dataset, **settings.recorded()}
    stored = study.user_attrs.get("settings")
    if stored is None:
        study.set_user_attr("settings", recorded)
        study.set_user_attr("spent_s", 0.0)
    elif stored != recorded:
        changed = sorted(k for k in recorded if stored.get(k) != recorded[k])
        raise ConfigError(
            "--out",
            f"{out} holds a study made with other settings ({', '.join(changed)}); rerun "
            "with the same ones to continue it, or use another --out",
        )
    # a trial that was running when the process was killed, or stopped by Ctrl-C: close it, run its candidate again
    rerun = {t.user_attrs.get("rerun_of") for t in study.get_trials(deepcopy=False)}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL)):
        if t.state == optuna.trial.TrialState.FAIL and (
            t.user_attrs.get("verdict") != "interrupted" or t.number in rerun
        ):
            continue
        if t.state == optuna.trial.TrialState.RUNNING:
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        if t.params:
            study.enqueue_trial(t.params, user_attrs={"rerun_of": t.number}, skip_if_exists=False)
    return study


def best_value(study: Any) -> float | None:
    values = [
        t.value
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and t.user_attrs.get("feasible") and t.value is not None
    ]
    return max(values) if values else None


def ran(t: Any) -> bool:
    """Whether a finished trial asked questions itself (not rejected before running, not a repeat)."""
    return (
        t.state.name in ("COMPLETE", "PRUNED")
        and bool(t.user_attrs.get("questions"))
        and (t.user_attrs.get("duplicate_of") is None)
    )


def counted(study: Any) -> int:
    """Trials that ran questions (what ``max_trials`` counts; rejections and repeats cost nothing)."""
    return sum(ran(t) for t in study.get_trials(deepcopy=False))


def stale(study: Any, window: int = 30) -> bool:
    """Whether the last ``window`` candidates were all rejected before running or repeats: the space is spent."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.name in ("COMPLETE", "PRUNED")]
    return len(trials) >= window and not any(ran(t) for t in trials[-window:])
