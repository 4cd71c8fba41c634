"""The stages of a tuning run around its trials: the providers over the dataset's index per setting, the time
budget spent and left, the embedder's fine-tune before the search, and after it the confirmation of the best on the
fit questions and the learned router's trial."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from modular_rag.eval.datasets import BeirDataset
from modular_rag.eval.tune.data import TuneData
from modular_rag.eval.tune.records import TrialRow, TuneSettings, pareto_front, ranked

__all__ = ["Envs", "SearchStages"]


class Envs:
    """Providers over the dataset's index per (chunker, providers) setting; the last few are kept open."""

    def __init__(self, dataset: BeirDataset, keep: int = 3) -> None:
        self.dataset = dataset
        self.keep = keep
        self.open: dict[str, Any] = {}

    @staticmethod
    def _key(providers: Any, chunker: Any) -> str:
        return providers.model_dump_json(exclude={"vectorstore"}) + "|" + chunker.model_dump_json()

    def indexed(self, providers: Any, chunker: Any) -> bool:
        from modular_rag.eval.runner import index_folder

        return (index_folder(self.dataset, providers, chunker) / "complete.json").exists()

    def get(self, providers: Any, chunker: Any) -> Any:
        from modular_rag.eval.runner import dataset_providers

        key = self._key(providers, chunker)
        if key not in self.open:
            while len(self.open) >= self.keep:
                self.open.pop(next(iter(self.open)))
            self.open[key] = dataset_providers(self.dataset, providers, chunker=chunker, progress=False)
        self.open[key] = self.open.pop(key)  # most recently used last
        return self.open[key]


class SearchStages:
    """What a tuning run does besides its trials (the search in :mod:`~modular_rag.eval.tune.search` derives from
    it and sets these attributes)."""

    study: Any
    settings: TuneSettings
    data: TuneData
    out: Path
    say: Callable[[str], None]
    envs: Envs
    started: float
    spent_before: float
    base_providers: dict[str, Any]

    # ------------------------------------------------------------------------------------------------ budget
    def spent(self) -> float:
        return self.spent_before + time.monotonic() - self.started

    def left(self) -> float:
        return self.settings.budget_s - self.spent()

    def _save_spent(self) -> None:
        self.study.set_user_attr("spent_s", round(self.spent(), 1))

    # ---------------------------------------------------------------------------------------------- stages
    def _finetune_stage(self) -> None:
        """Fine-tune the embedder on the fit split once (kept in OUT/model); candidates then embed with it."""
        if self.settings.finetune is None:
            return
        from modular_rag.finetune import finetune, last_checkpoint

        model = self.out / "model"
        if not (model / "finetune.json").exists():
            interrupted = last_checkpoint(model)  # a fine-tune killed with the search continues from its checkpoint
            self.say(
                f"fine-tuning the embedder on {len(self.data.fit.queries)} fit questions -> {model}"
                + (f" (continuing from {interrupted.name})" if interrupted is not None else "")
            )
            start = time.monotonic()
            report = finetune(
                self.data.folder,
                model,
                split="fit",
                settings=dict(self.settings.finetune),
                overwrite=interrupted is None,
                resume=interrupted is not None,
                progress=False,
                log=self.say,
            )
            self.say(f"fine-tuned in {time.monotonic() - start:.0f}s ({report.steps} steps)")
            self._save_spent()
        self.base_providers = {"embeddings": {"name": "sentence_transformers", "path": str(model)}}

    # ---------------------------------------------------------------------------------------------- choice
    def _fit_usable(self) -> bool:
        """Whether the fit questions are unseen by every candidate (no stage trained on them)."""
        return self.settings.finetune is None and not self.settings.router and bool(self.data.fit.queries)

    def confirm(self, rows: list[TrialRow]) -> None:
        """Rescore the best few candidates on the fit questions (when no stage trained on them) to pick the best by
        fit and val together: one lucky val score is not enough to win."""
        if self.settings.confirm <= 1 or not self._fit_usable():
            return
        from modular_rag.config import OperatorSpec, load_config
        from modular_rag.eval.runner import evaluate_flow

        for row in ranked(rows)[: self.settings.confirm]:
            if row.confirmed is not None:
                continue
            config = load_config(row.config)
            res = evaluate_flow(
                config,
                self.data.fit,
                self.envs.get(config.providers, OperatorSpec.model_validate(row.chunker)),
                concurrency=self.settings.concurrency,
            )
            fit_value = float(res.summary().get(self.settings.objective, 0.0))
            n_fit, n_val = len(self.data.fit.queries), max(row.questions, 1)
            both = (fit_value * n_fit + (row.value or 0.0) * n_val) / (n_fit + n_val)
            confirmed = dict(self.study.user_attrs.get("confirmed", {}))
            confirmed[str(row.number)] = {"fit": round(fit_value, 6), "both": round(both, 6)}
            self.study.set_user_attr("confirmed", confirmed)
            row.confirmed = round(both, 6)
            self.say(f"confirm #{row.number}: val {row.value:.4f}, fit {fit_value:.4f}, both {both:.4f}")

    def router_stage(self, rows: list[TrialRow]) -> None:
        """Train the learned router over the Pareto front's flows (cheapest to best, at most four, one index) on
        the fit questions, and score the routed flow on val as one more trial, so it competes for best.yaml."""
        if not self.settings.router or any(r.summary.startswith("learned router") for r in rows):
            return
        import optuna

        from modular_rag.config import OperatorSpec, load_config
        from modular_rag.eval.router import train_router
        from modular_rag.eval.runner import evaluate_flow

        order = ranked(rows)
        if not order:
            return
        chunker = order[0].chunker
        routes = [r for r in pareto_front(rows) if r.chunker == chunker][:4]
        if len(routes) < 2:  # a front of one: route between the best and the cheapest flow
            cheapest = min(
                (r for r in order if r.chunker == chunker and r is not order[0]),
                key=lambda r: (r.llm_calls or 0.0, r.retrievals or 0.0, r.ms or 0.0),
                default=None,
            )
            routes = [order[0], cheapest] if cheapest is not None else []
        if len(routes) < 2:
            self.say("router stage skipped: one distinct flow finished")
            return
        quality = (
            self.settings.objective
            if self.settings.objective in ("all@5", "recall@5", "f1", "em", "contains")
            else "recall@5"
        )
        configs = {f"trial{r.number}": load_config({**r.config, "name": f"trial{r.number}"}) for r in routes}
        self.say(f"router stage: training over {', '.join(configs)} on the fit questions ({quality})")
        training = train_router(
            self.data.fit, configs, self.out / "router", quality=quality, seed=self.settings.seed, log=self.say
        )
        import yaml

        routed_map = yaml.safe_load(training.config_file.read_text(encoding="utf-8"))
        routed = load_config(routed_map)
        env = self.envs.get(routed.providers, OperatorSpec.model_validate(chunker))
        summary = evaluate_flow(routed, self.data.val, env, concurrency=self.settings.concurrency).summary()
        value = float(summary.get(self.settings.objective, 0.0))
        attrs = {
            "config": routed_map,
            "chunker": chunker,
            "pattern": routed.pattern,
            "summary": f"learned router over {', '.join(configs)}",
            "key": "router",
            "questions": len(self.data.val.queries),
            "llm_calls": round(summary["llm_calls"], 4),
            "retrievals": round(summary["retrievals"], 4),
            "ms": round(summary["ms"], 2),
        }
        s = self.settings
        attrs["feasible"] = (s.max_llm_calls is None or summary["llm_calls"] <= s.max_llm_calls) and (
            s.max_latency_ms is None or summary["ms"] <= s.max_latency_ms
        )
        attrs["verdict"] = "complete" if attrs["feasible"] else "over budget (measured)"
        self.study.add_trial(optuna.trial.create_trial(value=value, user_attrs=attrs))
        self.say(
            f"router stage: routed flow val {self.settings.objective} {value:.4f}, "
            f"{summary['llm_calls']:.2f} LLM calls/q, {summary['retrievals']:.2f} retrievals/q"
        )
