"""``modular-rag tune``: search a space of flows for the best one on a client's data, within a budget.

The optimiser is Optuna's TPE (multivariate, with the budget constraints as TPE constraints); each candidate is
scored on growing prefixes of the validation questions (rungs of 1/9, 1/3 and all of them, at least
``min_questions``), and a pruner stops the ones that trail at a rung: by default
:class:`~modular_rag.eval.tune.pruning.PairedPruner` (behind the best finished trial on the same questions by more than
two standard errors of the paired differences), or Optuna's successive halving or median pruner. Before a
candidate runs, the kit's cost model (:func:`modular_rag.costs.estimate`) rejects it when its fewest LLM calls
exceed ``max_llm_calls``, when its predicted latency (cost model x per-call and per-retrieval times measured in
this study) exceeds ``max_latency_ms``, or when its first rung (and, for an index not built yet, the indexing)
cannot fit the time left. Identical candidates run once. The study lives in ``OUT/study.db`` (SQLite): a rerun of
the same command continues it, after an interrupt (Ctrl-C) or a kill; a trial that was running when the process
died is run again. The time spent is stored with the study, so ``--budget`` is the total across runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from modular_rag.errors import ModularRagError
from modular_rag.eval.runner import FlowResult
from modular_rag.eval.tune.data import TuneData, prepare_data, subset
from modular_rag.eval.tune.records import (
    TrialRow,
    TuneResult,
    TuneSettings,
    identity,
    pareto_front,
    parse_budget,
    ranked,
    rungs,
)
from modular_rag.eval.tune.space import Candidate, SearchSpace
from modular_rag.eval.tune.stages import Envs, SearchStages
from modular_rag.eval.tune.study import (
    Interrupt,
    OutLock,
    best_value,
    counted,
    measured_rates,
    open_study,
    require_optuna,
    stale,
    trial_rows,
)

# TuneSettings, TrialRow, TuneResult and the row functions live in tune.records; re-exported here
__all__ = ["TuneSettings", "TrialRow", "TuneResult", "tune", "rungs", "parse_budget", "pareto_front", "identity"]

_BATCH = 10
"""Questions evaluated between checks of a trial's time."""


def merge_results(parts: Sequence[FlowResult]) -> FlowResult:
    """One result from runs over disjoint question sets (retrieval metrics are per-query means)."""
    records = [r for p in parts for r in p.records]
    total = sum(len(p.records) for p in parts) or 1
    keys = {k for p in parts for k in p.retrieval}
    retrieval = {k: sum(p.retrieval.get(k, 0.0) * len(p.records) for p in parts) / total for k in sorted(keys)}
    return FlowResult(parts[0].name, parts[0].pattern, records, retrieval, sum(p.seconds for p in parts))


def tune(
    dataset: str,
    out: str | Path,
    settings: TuneSettings,
    *,
    space: SearchSpace | None = None,
    questions: str | None = None,
    compare: Sequence[tuple[str, Any]] = (),
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> TuneResult:
    """Search ``space`` for the flow that maximises ``settings.objective`` on the validation questions, within
    the budget, and write ``best.yaml``, the Pareto front, the trial table and a plot to ``out``.

    Args:
        dataset: ``demo``, a BEIR folder, or a folder of documents (``corpus/``) with ``questions.jsonl``.
        out: The run's folder (the study, the splits, the outputs); a rerun with it continues the study.
        settings: Objective, budgets, split and pruning settings, optional stages.
        space: The search space (default: the bundled one for the objective).
        questions: A questions file for a folder of documents (default ``DATASET/questions.jsonl``).
        compare: ``(name, config)`` pairs scored with the best on the report split (for example a shipped config).
        progress: Show a progress bar (budget spent, trials, best so far).
        log: Receives one line per stage.

    Returns:
        The trials, the best, the front, and the files written. ``finished`` is false when the run was
        interrupted (the outputs then describe the trials finished so far).

    Raises:
        ConfigError: If the space or a setting is invalid, or ``out`` holds a study made with other settings.
        DatasetError: If the dataset cannot be read or split.
    """
    require_optuna()
    import optuna

    from modular_rag.eval.tune.space import load_space

    say = log or (lambda _line: None)
    space = space or load_space(None, objective=settings.objective)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    lock = OutLock(folder / ".lock")
    try:
        data = prepare_data(
            dataset,
            folder,
            seed=settings.seed,
            val_fraction=settings.val_fraction,
            report_fraction=settings.report_fraction,
            questions=questions,
        )
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        first = rungs(len(data.val.queries), min_questions=settings.min_questions, reduction=settings.reduction)[0]
        study = open_study(folder, space, settings, dataset, first)
        say(
            f"{dataset}: {len(data.fit.queries)} fit / {len(data.val.queries)} val questions"
            f"{f' / {len(data.report.queries)} report' if data.report else ''} ({data.folder / 'split.json'}); "
            f"space {space.source}, ~{space.size():.3g} candidates; study {folder / 'study.db'} "
            f"({len(study.trials)} trials stored)"
        )
        runner = _Search(study, space, settings, data, folder, say)
        finished = runner.run(progress=progress)
        rows = trial_rows(study)
        if finished:
            runner.confirm(rows)
            runner.router_stage(trial_rows(study))
            rows = trial_rows(study)
        result = runner.result(rows, finished)
        from modular_rag.eval.tune.output import write_outputs

        if finished and settings.report and data.report is not None and result.best is not None:
            result.report = runner.report(result.best, compare)
        result.files = write_outputs(result, space=space, settings=settings, dataset=dataset)
        return result
    finally:
        lock.release()


class _Search(SearchStages):
    """One tuning run over a stored study."""

    def __init__(
        self,
        study: Any,
        space: SearchSpace,
        settings: TuneSettings,
        data: TuneData,
        out: Path,
        say: Callable[[str], None],
    ) -> None:
        self.study, self.space, self.settings, self.data, self.out, self.say = study, space, settings, data, out, say
        self.envs = Envs(data.val)
        self.rungs = rungs(len(data.val.queries), min_questions=settings.min_questions, reduction=settings.reduction)
        self.started = time.monotonic()
        self.spent_before = float(study.user_attrs.get("spent_s", 0.0))
        self.base_providers: dict[str, Any] = {}
        self.interrupt = Interrupt(say)

    # ----------------------------------------------------------------------------------------------- trial
    def _cost_check(self, config: Any, chunker: Any) -> str | None:
        """Why the cost model rules the candidate out before it runs, or ``None``."""
        from modular_rag.costs import estimate

        est = estimate(config)
        s = self.settings
        if s.max_llm_calls is not None and est.llm_calls.lo > s.max_llm_calls:
            return f"cost model: at least {est.llm_calls.lo:g} LLM calls/q > {s.max_llm_calls:g}"
        retr_ms, llm_ms = measured_rates(self.study)
        floor = est.retrievals.lo * (retr_ms or 0.0) + est.llm_calls.lo * (llm_ms or 0.0)
        if s.max_latency_ms is not None and floor > s.max_latency_ms:
            return f"cost model: at least {floor:.0f} ms/q (measured rates) > {s.max_latency_ms:g}"
        need = self.rungs[0] * (est.retrievals.hi * (retr_ms or 0.0) + est.llm_calls.hi * (llm_ms or 0.0)) / 1000
        if not self.envs.indexed(config.providers, chunker):
            rate = self.study.user_attrs.get("index_s_per_doc")
            need += (rate or 0.0) * self.study.user_attrs.get("corpus_docs", 0)
        if need > self.left():
            return f"cost model: its first rung needs ~{need:.0f}s, {max(self.left(), 0):.0f}s of budget left"
        return None

    def _env(self, config: Any, chunker: Any) -> Any:
        fresh = not self.envs.indexed(config.providers, chunker)
        start = time.monotonic()
        env = self.envs.get(config.providers, chunker)
        if fresh:
            from modular_rag.eval.runner import index_folder

            info = json.loads((index_folder(self.data.val, config.providers, chunker) / "complete.json").read_text())
            docs = max(1, int(info.get("chunks", 1)))
            self.study.set_user_attr("index_s_per_doc", (time.monotonic() - start) / docs)
            self.study.set_user_attr("corpus_docs", docs)
            self.say(
                f"indexed the corpus for {chunker.name} / {config.providers.embeddings.name} in "
                f"{time.monotonic() - start:.0f}s"
            )
        return env

    def objective(self, trial: Any) -> float:
        import optuna

        from modular_rag.config import OperatorSpec, load_config
        from modular_rag.eval.runner import evaluate_flow
        from modular_rag.eval.tune.pruning import SCORES, per_question

        candidate: Candidate = self.space.draw(trial, default_chunker=self.data.val.default_chunker)
        config_map = candidate.config
        if self.base_providers:
            from modular_rag.eval.tune.space import deep_merge

            config_map = deep_merge(config_map, {"providers": self.base_providers})
        config_map = {**config_map, "name": f"tune-{trial.number}"}
        trial.set_user_attr("config", config_map)
        trial.set_user_attr("chunker", candidate.chunker)
        trial.set_user_attr("pattern", str(config_map.get("pattern")))
        trial.set_user_attr("summary", candidate.summary())
        key = candidate.key()
        trial.set_user_attr("key", key)
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        for done in self.study.get_trials(deepcopy=False, states=states):
            if done.user_attrs.get("key") != key or done.number == trial.number:
                continue
            if done.state == optuna.trial.TrialState.PRUNED:
                verdict = str(done.user_attrs.get("verdict", ""))
                if verdict.startswith(("pruned at", "invalid")):
                    trial.set_user_attr("duplicate_of", done.number)
                    trial.set_user_attr("verdict", f"same as #{done.number} ({verdict})"[:200])
                    raise optuna.TrialPruned()
                continue
            for name in ("questions", "llm_calls", "retrievals", "ms", "feasible", "constraints", "metrics", SCORES):
                if name in done.user_attrs:
                    trial.set_user_attr(name, done.user_attrs[name])
            trial.set_user_attr("duplicate_of", done.number)
            trial.set_user_attr("verdict", f"same as #{done.number}")
            return float(done.value)
        try:
            config = load_config(config_map)
            chunker = OperatorSpec.model_validate(candidate.chunker)
        except ModularRagError as exc:
            trial.set_user_attr("verdict", f"invalid: {exc}"[:200])
            raise optuna.TrialPruned() from None
        why = self._cost_check(config, chunker)
        if why:
            trial.set_user_attr("verdict", why)
            raise optuna.TrialPruned()
        env = self._env(config, chunker)
        parts: list[FlowResult] = []
        done_q = 0
        result: FlowResult | None = None
        started = time.monotonic()
        cap = self.settings.max_trial_share * self.settings.budget_s
        for rung in self.rungs:
            while done_q < rung:  # in batches, so a candidate far slower than the budget allows is stopped early
                if self.interrupt.hit:  # Ctrl-C: stop here, between questions, not inside a write to the study
                    trial.set_user_attr("verdict", "interrupted")
                    raise KeyboardInterrupt
                upto = min(rung, done_q + _BATCH)
                part = subset(self.data.val, self.data.val.queries[done_q:upto])
                parts.append(evaluate_flow(config, part, env, concurrency=self.settings.concurrency))
                done_q = upto
                spent = time.monotonic() - started
                if done_q < self.rungs[-1] and spent / done_q * self.rungs[-1] > cap:  # projected to all of val
                    self._record(trial, merge_results(parts).summary(), done_q)
                    trial.set_user_attr(
                        "verdict",
                        f"too slow: {spent:.1f}s for {done_q} questions; one trial may take {cap:.1f}s of the budget",
                    )
                    raise optuna.TrialPruned()
            result = merge_results(parts)
            value = self._record(trial, result.summary(), rung)
            trial.set_user_attr(
                SCORES,
                [round(v, 5) for v in per_question(result.records, self.data.val.qrels, self.settings.objective)],
            )
            trial.report(value, rung)
            if rung < self.rungs[-1]:
                if trial.should_prune():
                    trial.set_user_attr("verdict", f"pruned at {rung} questions")
                    raise optuna.TrialPruned()
                if self.left() <= 0:
                    trial.set_user_attr("verdict", f"budget ran out at {rung} questions")
                    raise optuna.TrialPruned()
        assert result is not None
        llm_over, ms_over = trial.user_attrs["constraints"]
        trial.set_constraint("llm_calls", llm_over)  # TPE then draws fewer candidates like the infeasible ones
        trial.set_constraint("ms", ms_over)
        trial.set_user_attr("verdict", "complete" if trial.user_attrs.get("feasible") else "over budget (measured)")
        return value

    def _record(self, trial: Any, summary: Mapping[str, float], questions: int) -> float:
        """Store what the trial measured on its first ``questions``; return its objective value there."""
        s = self.settings
        value = float(summary.get(s.objective, 0.0))
        constraints = [
            summary["llm_calls"] - s.max_llm_calls if s.max_llm_calls is not None else 0.0,
            summary["ms"] - s.max_latency_ms if s.max_latency_ms is not None else 0.0,
        ]
        trial.set_user_attr("questions", questions)
        trial.set_user_attr("last_value", value)
        trial.set_user_attr("llm_calls", round(summary["llm_calls"], 4))
        trial.set_user_attr("retrievals", round(summary["retrievals"], 4))
        trial.set_user_attr("ms", round(summary["ms"], 2))
        trial.set_user_attr("constraints", constraints)
        trial.set_user_attr("feasible", all(c <= 0 for c in constraints))
        keep = ("ndcg@10", "mrr@10", "recall@5", "recall@10", "all@5", "em", "f1", "contains", "supported", "refused")
        trial.set_user_attr("metrics", {k: round(float(summary[k]), 4) for k in keep if k in summary})
        return value

    # -------------------------------------------------------------------------------------------------- run
    def _more(self, study: Any) -> bool:
        """Whether budget and trial count allow another trial."""
        return self.left() > 0 and (self.settings.max_trials is None or counted(study) < self.settings.max_trials)

    def run(self, *, progress: bool) -> bool:
        """Run trials until the budget, ``max_trials`` or an interrupt; return whether it ended by itself."""

        self._finetune_stage()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(
                total=int(self.settings.budget_s),
                initial=min(int(self.spent()), int(self.settings.budget_s)),
                unit="s",
                desc="tune",
                leave=True,
            )

        def after(study: Any, trial: Any) -> None:
            self._save_spent()
            if self.interrupt.hit:
                study.stop()
            if bar is not None:
                bar.n = min(int(self.spent()), bar.total)
                best = best_value(study)
                bar.set_postfix_str(
                    f"trials {len(study.trials)}, best {best:.4f}"
                    if best is not None
                    else f"trials {len(study.trials)}"
                )
                bar.refresh()
            if not self._more(study):
                study.stop()
            elif stale(study):
                self.say("the space looks spent: the last 30 candidates were repeats or ruled out before running")
                study.stop()

        try:
            with self.interrupt:
                if self._more(self.study):
                    self.study.optimize(
                        self.objective, callbacks=[after], gc_after_trial=False, catch=(ModularRagError,)
                    )
            if self.interrupt.hit:
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            self._save_spent()
            self.say(
                f"interrupted: {counted(self.study)} trials are stored in {self.out / 'study.db'}; rerun the "
                "same command to continue"
            )
            return False
        finally:
            if bar is not None:
                bar.close()
        return True

    def result(self, rows: list[TrialRow], finished: bool) -> TuneResult:
        order = ranked(rows)
        confirmed = [r for r in order if r.confirmed is not None]
        best = max(confirmed, key=lambda r: r.confirmed or 0.0) if confirmed else (order[0] if order else None)
        return TuneResult(
            self.out, self.settings.objective, rows, best, pareto_front(rows), self.spent(), finished, self.data
        )

    def report(self, best: TrialRow, compare: Sequence[tuple[str, Any]]) -> list[FlowResult]:
        """Score the best (and the configs to compare) once on the report split."""
        from modular_rag.config import load_config
        from modular_rag.eval.runner import config_chunker, dataset_providers, evaluate_flow

        assert self.data.report is not None
        results = []
        best_config = {**best.config, "name": "best", "indexing": {"chunker": best.chunker}}  # as best.yaml has it
        for name, cfg in [("best", best_config), *compare]:
            config = load_config(cfg)
            chunker = config_chunker(config, self.data.report.default_chunker)
            env = dataset_providers(self.data.report, config.providers, chunker=chunker, progress=False)
            results.append(
                evaluate_flow(config, self.data.report, env, name=name, concurrency=self.settings.concurrency)
            )
            self.say(
                f"report split: {name} {self.settings.objective} "
                f"{results[-1].summary().get(self.settings.objective, 0.0):.4f}"
            )
        return results
