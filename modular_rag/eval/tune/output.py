"""What ``tune`` writes: ``best.yaml``, the Pareto front (``pareto/*.yaml`` and ``pareto.png``), the trial table
(``trials.txt``), the report split's table (``report.txt``) and everything in ``tune.json``.

Every YAML file is a self-contained flow config (``load_config`` loads it; ``modular-rag eval`` and ``run`` run
it): the candidate's config with its chunker under ``indexing.chunker``, headed by comments saying where it
came from.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from modular_rag.tables import format_table

if TYPE_CHECKING:
    from modular_rag.eval.tune.records import TrialRow, TuneResult, TuneSettings
    from modular_rag.eval.tune.space import SearchSpace

__all__ = ["flow_yaml", "trial_table", "write_outputs", "plot_front"]


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def flow_yaml(row: TrialRow, *, name: str, header: Sequence[str] = ()) -> str:
    """The trial's candidate as a flow config file (comments first, then the config)."""
    config = {k: v for k, v in row.config.items() if k != "name"}
    ordered: dict[str, Any] = {"pattern": config.pop("pattern"), "name": name}
    ordered.update(config)
    ordered["indexing"] = {**(ordered.get("indexing") or {}), "chunker": row.chunker}
    lines = [f"# {line}" if line else "#" for line in header]
    body = yaml.safe_dump(ordered, sort_keys=False, default_flow_style=None, width=110)
    return "\n".join(lines) + ("\n" if lines else "") + body


def trial_table(rows: Sequence[TrialRow], objective: str) -> str:
    """Every trial: its number, what it drew, its val quality, its measured cost, and what was decided."""
    body = []
    for r in sorted(rows, key=lambda r: r.number):
        body.append(
            [
                str(r.number),
                r.pattern,
                r.summary[:90],
                _num(r.value, ".4f"),
                str(r.questions or "-"),
                _num(r.llm_calls, ".2f"),
                _num(r.retrievals, ".2f"),
                _num(r.ms, ".0f"),
                _num(r.confirmed, ".4f"),
                r.verdict[:70],
            ]
        )
    headers = [
        "#",
        "pattern",
        "candidate",
        f"val {objective}",
        "questions",
        "LLM/q",
        "retr/q",
        "ms/q",
        "fit+val",
        "decision",
    ]
    return format_table(headers, body)


def plot_front(rows: Sequence[TrialRow], front: Sequence[TrialRow], path: Path, *, objective: str, title: str) -> Path:
    """Quality against cost for every finished trial, the Pareto front joined up and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r.state == "complete" and r.value is not None and r.ms is not None]
    uses_llm = any((r.llm_calls or 0) > 0 for r in done)
    cost = (lambda r: r.llm_calls or 0.0) if uses_llm else (lambda r: r.ms or 0.0)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    ax.scatter([cost(r) for r in done], [r.value or 0.0 for r in done], s=12, color="0.7", label="trials")
    pts = sorted(front, key=cost)
    ax.plot([cost(r) for r in pts], [r.value or 0.0 for r in pts], "o-", color="C0", label="Pareto front")
    for r in pts:
        ax.annotate(f"#{r.number}", (cost(r), r.value or 0.0), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("LLM calls per query" if uses_llm else "milliseconds per query")
    ax.set_ylabel(f"{objective} (val)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def _command(dataset: str, out: Path, space: SearchSpace, settings: TuneSettings) -> str:
    """The command line that reproduces the search (the settings that differ from the defaults)."""
    from modular_rag.eval.tune.records import TuneSettings

    parts = [
        f"modular-rag tune --dataset {dataset} --out {out} --budget {settings.budget_s / 60:g}m",
        f"--objective {settings.objective}",
    ]
    if not space.source.startswith("default"):
        parts.append(f"--space {space.source}")
    defaults = TuneSettings(budget_s=1)
    flags = {
        "max_llm_calls": "--max-llm-calls",
        "max_latency_ms": "--max-latency-ms",
        "seed": "--seed",
        "pruner": "--pruner",
        "min_questions": "--min-questions",
        "confirm": "--confirm",
    }
    for field, flag in flags.items():
        value = getattr(settings, field)
        if value != getattr(defaults, field):
            parts.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    if settings.finetune is not None:
        parts.append("--finetune")
    if settings.router:
        parts.append("--router")
    return " ".join(parts)


def write_outputs(result: TuneResult, *, space: SearchSpace, settings: TuneSettings, dataset: str) -> dict[str, Path]:
    """Write the run's files into ``result.out``; return them by kind."""
    from modular_rag.eval.report import format_results

    out = result.out
    files: dict[str, Path] = {}
    split = result.data.record
    n_val = len(result.data.val.queries)
    where = (
        f"{dataset} ({split.get('tuned_on')} questions: {len(split['fit'])} fit / {n_val} val, seed {split['seed']})"
    )
    command = _command(dataset, out, space, settings)
    if result.best is not None:
        b = result.best
        chosen = f"val {settings.objective} {b.value:.4f} on {b.questions} questions" + (
            f", fit+val {b.confirmed:.4f}" if b.confirmed is not None else ""
        )
        header = [
            f"chosen by modular-rag tune (trial #{b.number} of {len(result.rows)}) on {where}",
            chosen,
            f"measured: {b.llm_calls or 0:.2f} LLM calls/q, {b.retrievals or 0:.2f} retrievals/q, {b.ms or 0:.0f} ms/q",
            f"space: {space.source}",
            f"reproduce the search: {command}",
        ]
        files["best"] = out / "best.yaml"
        files["best"].write_text(flow_yaml(b, name="tune-best", header=header), encoding="utf-8")
    front_dir = out / "pareto"
    front_dir.mkdir(exist_ok=True)
    for old in front_dir.glob("*.yaml"):
        old.unlink()
    for i, r in enumerate(result.front, start=1):
        path = front_dir / f"{i:02d}-trial{r.number}.yaml"
        path.write_text(
            flow_yaml(
                r,
                name=f"tune-pareto-{i}",
                header=[
                    f"Pareto front of modular-rag tune on {where}: val {settings.objective} {r.value:.4f}, "
                    f"{r.llm_calls or 0:.2f} LLM calls/q, {r.ms or 0:.0f} ms/q (trial #{r.number})"
                ],
            ),
            encoding="utf-8",
        )
    files["pareto"] = front_dir
    if any(r.state == "complete" for r in result.rows):
        files["plot"] = plot_front(
            result.rows,
            result.front,
            out / "pareto.png",
            objective=settings.objective,
            title=f"{dataset}: {n_val} val questions, {len(result.rows)} trials",
        )
    table = trial_table(result.rows, settings.objective)
    state = "finished" if result.finished else "interrupted (rerun the same command to continue)"
    files["trials"] = out / "trials.txt"
    files["trials"].write_text(
        f"{where}; {state}; {result.spent_s:.0f}s spent of {settings.budget_s:.0f}s\n{table}\n", encoding="utf-8"
    )
    if result.report:
        assert result.data.report is not None
        files["report"] = out / "report.txt"
        files["report"].write_text(
            f"report split ({split.get('report_split')}, {len(result.data.report.queries)} questions, read once "
            f"after the search)\n{format_results(result.report)}\n",
            encoding="utf-8",
        )
    data = {
        "dataset": dataset,
        "objective": settings.objective,
        "finished": result.finished,
        "spent_s": round(result.spent_s, 1),
        "budget_s": settings.budget_s,
        "space": space.source,
        "split": {k: v for k, v in split.items() if k not in ("fit", "val", "report")},
        "best": result.best.number if result.best else None,
        "front": [r.number for r in result.front],
        "trials": [asdict(r) for r in result.rows],
        "report": [{"config": r.name, **r.summary()} for r in result.report],
    }
    files["json"] = out / "tune.json"
    files["json"].write_text(json.dumps(data, indent=1, sort_keys=True, default=str), encoding="utf-8")
    return files
