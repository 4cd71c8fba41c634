"""The Evaluate page's work: a test set (a BEIR folder) through one to four configs, each config through
:func:`~modular_rag.eval.runner.evaluate_flow` over the dataset's index built as ``modular-rag eval`` and
``recommend`` build it (:func:`~modular_rag.eval.runner.dataset_providers`, chunked by
:func:`~modular_rag.eval.runner.config_chunker`), so the page cannot score differently from the command line. An
:class:`Evaluation` holds the runs' records: the summary table, the quality-vs-cost chart, the per-question table
and the run behind each of its cells are read from them."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modular_rag.errors import ConfigError

if TYPE_CHECKING:
    from modular_rag.eval.datasets import BeirDataset
    from modular_rag.eval.runner import FlowResult, QueryRecord
    from modular_rag.providers import Providers

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_CONFIGS",
    "MAX_LIMIT",
    "DatasetChoice",
    "Evaluation",
    "check_configs",
    "check_limit",
    "dataset_choice",
    "demo_dataset",
]

DEFAULT_LIMIT = 20
"""Questions evaluated unless the page asks for another number (``modular-rag recommend``'s default)."""
MAX_LIMIT = 1000
"""The most questions one evaluation from the page runs."""
MAX_CONFIGS = 4
"""The most configs one evaluation compares."""

_QUALITY_LABELS = {"right": "answered right (share)", "ndcg@10": "nDCG@10"}
_COST_LABELS = {"llm_calls": "LLM calls per question", "ms": "ms per question"}


@dataclass(frozen=True)
class DatasetChoice:
    """A test set the page offers: a BEIR folder (``path``), or the bundled demo questions (``path`` empty)."""

    name: str
    path: str = ""
    origin: str = "bundled"
    """Where it came from: ``bundled`` (the demo set), ``--dataset`` or ``feedback export``."""

    def load(self, limit: int | None = None) -> BeirDataset:
        """The dataset cut to ``limit`` questions as ``modular-rag eval --limit`` cuts it (the demo set's evenly
        spaced, a folder's first ones).

        Raises:
            DatasetError: If the folder is not a BEIR folder any more (the message names the missing file).
        """
        from modular_rag.eval.datasets import load_beir, load_demo

        if not self.path:
            return load_demo().limited(limit, spread=True)
        return load_beir(self.path).limited(limit)


def demo_dataset() -> DatasetChoice:
    """The bundled demo set (``modular-rag eval --dataset demo``): 24 questions with answers and gold documents."""
    return DatasetChoice("demo")


def dataset_choice(path: str | Path, origin: str = "--dataset", name: str | None = None) -> DatasetChoice:
    """A BEIR folder as a choice of the page, named after the folder unless ``name`` is given.

    Raises:
        DatasetError: If the folder is not a BEIR folder (the message names the missing file).
    """
    from modular_rag.eval.datasets import load_beir

    folder = Path(path)
    load_beir(folder)  # refused now, not when the page runs it
    return DatasetChoice(name or folder.resolve().name, str(folder), origin)


def check_limit(limit: object) -> int:
    """The number of questions to evaluate.

    Raises:
        ConfigError: If it is not a whole number from 1 to :data:`MAX_LIMIT`.
    """
    if isinstance(limit, str) and limit.strip().isdigit():
        limit = int(limit)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigError("limit", f"{limit!r}: evaluate a whole number of questions from 1 to {MAX_LIMIT}")
    return limit


def check_configs(names: object, known: dict[str, Any]) -> list[str]:
    """One to :data:`MAX_CONFIGS` distinct known config names.

    Raises:
        ConfigError: If the names are not a list, there are none or too many, or one is unknown (the message lists
            the configs).
    """
    if not isinstance(names, list | tuple):
        raise ConfigError("configs", f"give a list of one to {MAX_CONFIGS} config names, not {names!r}")
    chosen = list(dict.fromkeys(str(n) for n in names))
    if not 1 <= len(chosen) <= MAX_CONFIGS:
        raise ConfigError("configs", f"{len(chosen)} distinct configs chosen; evaluate one to {MAX_CONFIGS}")
    for name in chosen:
        if name not in known:
            raise ConfigError("configs", f"unknown config {name!r}; configs: {', '.join(known)}")
    return chosen


@dataclass
class Evaluation:
    """One evaluation the page started: its choices, how far it is, and, per config, the :class:`FlowResult` of
    ``evaluate_flow`` (or the message of why that config could not run)."""

    id: str
    dataset: DatasetChoice
    configs: list[str]
    limit: int
    state: str = "queued"
    """``queued`` (another evaluation runs), ``running``, ``done`` or ``error`` (the set could not be read)."""
    step: str = "waiting for the evaluation before it to finish"
    done: int = 0
    total: int = 0
    error: str = ""
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    data: BeirDataset | None = None
    results: dict[str, FlowResult] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    envs: dict[str, Providers] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def quality(self) -> str:
        """The quality metric: ``right`` when the questions have gold answers, else ``ndcg@10`` (``recommend
        --quality auto``'s choice)."""
        return "right" if self.data is not None and any(q.answers for q in self.data.queries) else "ndcg@10"

    @property
    def cost(self) -> str:
        """The chart's cost axis: ``llm_calls`` when a config called a model, else ``ms``."""
        return "llm_calls" if any(r.summary()["llm_calls"] > 0 for r in self.results.values()) else "ms"

    def advance(self, record: QueryRecord | None = None) -> None:
        """One more question scored (``evaluate_flow``'s ``on_record``)."""
        with self.lock:
            self.done += 1

    def status(self) -> dict[str, Any]:
        """How far it is, as JSON for the page, with the :meth:`report` once it is done."""
        with self.lock:
            out: dict[str, Any] = {
                "id": self.id,
                "dataset": self.dataset.name,
                "configs": list(self.configs),
                "limit": self.limit,
                "state": self.state,
                "step": self.step,
                "done": self.done,
                "total": self.total,
                "error": self.error,
                "seconds": round(self.seconds or time.time() - self.started, 1),
            }
        if out["state"] == "done":
            out["report"] = self.report()
        return out

    def report(self) -> dict[str, Any]:
        """What the page shows: each config's summary (``FlowResult.summary()``, the numbers ``modular-rag eval``
        prints), the quality-vs-cost chart (SVG), and a row per question with a cell per config (``value``: 1.0
        right, 0.0 wrong, ``None`` not judged, when the set has gold answers; else the question's nDCG@10)."""
        from modular_rag.ui.chart import quality_cost_svg

        data = self.data
        queries = data.queries if data is not None else []
        quality, cost = self.quality, self.cost
        configs: list[dict[str, Any]] = []
        points: list[tuple[str, float, float]] = []
        for name in self.configs:
            result = self.results.get(name)
            if result is None:
                configs.append({"config": name, "error": self.failed.get(name, "not run")})
                continue
            summary = result.summary()
            configs.append({"config": name, "pattern": result.pattern, "scored": result.scored, "summary": summary})
            points.append((name, summary[cost], summary.get(quality, 0.0)))
        rows = [
            {"qid": q.id, "question": q.text, "cells": [self._cell(name, q.id) for name in self.configs]}
            for q in queries
        ]
        return {
            "dataset": self.dataset.name,
            "origin": self.dataset.origin,
            "path": self.dataset.path,
            "questions": len(queries),
            "quality": quality,
            "quality_label": _QUALITY_LABELS[quality],
            "cost": cost,
            "cost_label": _COST_LABELS[cost],
            "configs": configs,
            "chart": quality_cost_svg(points, x_label=_COST_LABELS[cost], y_label=_QUALITY_LABELS[quality]),
            "rows": rows,
        }

    def _cell(self, name: str, qid: str) -> dict[str, Any]:
        from modular_rag.eval.runner import judge_right

        result = self.results.get(name)
        record = _record_of(result, qid) if result is not None else None
        if result is None or record is None or self.data is None:
            return {"config": name, "value": None, "label": "error", "kind": "error"}
        ndcg = result.per_query.get(qid, {}).get("ndcg@10", 0.0)
        if self.quality == "ndcg@10":
            return {"config": name, "value": ndcg, "label": f"{ndcg:.2f}", "kind": "metric"}
        query = next((q for q in self.data.queries if q.id == qid), None)
        value, _ = judge_right(query, self.data.qrels.get(qid, {}), record)
        if value is None:
            return {"config": name, "value": None, "label": f"nDCG {ndcg:.2f}", "kind": "unjudged"}
        label = "error" if record.error else ("right" if value else "wrong")
        return {"config": name, "value": value, "label": label, "kind": label}

    def run(self, config: str, qid: str) -> dict[str, Any]:
        """The run behind a cell: the question, the config's answer with its citations (each passage's title and
        whether it is of a gold document), the documents the run returned against the gold ones, its scores and
        cost, and whether and why it was judged wrong (:func:`~modular_rag.eval.runner.judge_right`).

        Raises:
            ConfigError: If the evaluation is not done, or did not run that config or that question.
        """
        from modular_rag.eval.runner import judge_right

        if self.state != "done" or self.data is None:
            raise ConfigError("evaluation", f"evaluation {self.id} is {self.state}; open a cell once it is done")
        if config not in self.configs:
            raise ConfigError(
                "config", f"evaluation {self.id} ran no config {config!r}; it ran {', '.join(self.configs)}"
            )
        if config in self.failed:
            raise ConfigError("config", f"{config} did not run: {self.failed[config]}")
        query = next((q for q in self.data.queries if q.id == qid), None)
        record = _record_of(self.results[config], qid)
        if query is None or record is None:
            raise ConfigError("qid", f"evaluation {self.id} asked no question {qid!r}; pick a row of its table")
        gold = {d: s for d, s in self.data.qrels.get(qid, {}).items() if s > 0}
        value, why = judge_right(query, gold, record)
        if self.quality == "ndcg@10":
            value, why = None, []
        chunks = self._chunks(config, [str(c.get("chunk_id", "")) for c in record.citations])
        citations = [
            dict(
                c,
                title=str((chunks.get(str(c.get("chunk_id"))) or {}).get("metadata", {}).get("title") or c["chunk_id"]),
                gold=c.get("doc_id") in gold,
            )
            for c in record.citations
        ]
        rank = {d: i + 1 for i, d in enumerate(record.docs)}
        return {
            "evaluation": self.id,
            "config": config,
            "qid": qid,
            "question": query.text,
            "gold_answers": list(query.answers),
            "answer": {"text": record.answer, "refused": record.refused, "citations": citations},
            "error": record.error,
            "retrieved": [{"doc_id": d, "rank": i + 1, "gold": d in gold} for i, d in enumerate(record.docs)],
            "scored": record.scored,
            "gold": [{"doc_id": d, "rank": rank.get(d)} for d in gold],
            "verdict": "not judged" if value is None else ("right" if value else "wrong"),
            "why": why,
            "metrics": {
                "em": record.em,
                "f1": record.f1,
                "contains": record.contains,
                **self.results[config].per_query.get(qid, {}),
            },
            "cost": {
                "llm_calls": record.llm_calls,
                "tokens": record.prompt_tokens + record.completion_tokens,
                "retrievals": record.retrievals,
                "ms": round(record.ms, 1),
            },
        }

    def _chunks(self, config: str, ids: list[str]) -> dict[str, Any]:
        env = self.envs.get(config)
        if env is None or not ids:
            return {}
        try:
            return dict(env.index.chunks(ids))
        except Exception:  # a title is a nicety; the chunk id stands in
            return {}


def _record_of(result: FlowResult, qid: str) -> QueryRecord | None:
    return next((r for r in result.records if r.qid == qid), None)
