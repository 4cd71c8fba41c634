"""Reports of evaluation runs: a terminal table, JSON (with per-query records), CSV, and a quality-vs-cost plot.

Outputs are deterministic given the same results (sorted keys, fixed float formatting, no timestamps in files).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from modular_rag.eval.runner import FlowResult
from modular_rag.tables import format_table

__all__ = ["COLUMNS", "summary_rows", "format_results", "write_report", "plot_quality_cost"]

COLUMNS: list[tuple[str, str, str]] = [
    ("config", "config", "s"),
    ("pattern", "pattern", "s"),
    ("scored", "scored", "s"),
    ("ndcg@10", "nDCG@10", ".3f"),
    ("recall@5", "R@5", ".3f"),
    ("all@5", "all@5", ".3f"),
    ("em", "EM", ".3f"),
    ("f1", "F1", ".3f"),
    ("contains", "contains", ".3f"),
    ("supported", "supported", ".3f"),
    ("refused", "refused", ".3f"),
    ("llm_calls", "LLM/q", ".2f"),
    ("retrievals", "retr/q", ".2f"),
    ("tokens", "tok/q", ".0f"),
    ("ms", "ms/q", ".0f"),
    ("errors", "errors", ".0f"),
]
"""Report columns: (summary key, header, format)."""


def summary_rows(results: Sequence[FlowResult]) -> list[dict[str, Any]]:
    """One flat dict per config: its name, pattern, the list its retrieval metrics scored, and summary figures."""
    return [{"config": r.name, "pattern": r.pattern, "scored": r.scored, **r.summary()} for r in results]


ANSWER_METRICS = frozenset({"em", "f1", "contains", "supported", "refused"})
"""Columns that describe answers: a config that answers nothing (generation off) shows "–" there, not 0.000."""


def format_results(results: Sequence[FlowResult]) -> str:
    """The terminal table; answer metrics of a retrieval-only config are "–"."""
    rows = []
    for row in summary_rows(results):
        cells = []
        for key, _, fmt in COLUMNS:
            if fmt == "s":
                cells.append(str(row.get(key, "")))
            elif key in ANSWER_METRICS and not row.get("answered", 1.0):
                cells.append("–")
            else:
                cells.append(format(row.get(key, 0.0), fmt))
        rows.append(cells)
    return format_table([header for _, header, _ in COLUMNS], rows)


def plot_quality_cost(
    results: Sequence[FlowResult], path: Path, *, quality: str = "f1", cost: str = "llm_calls", dataset: str = ""
) -> Path:
    """A scatter plot, one labelled point per config: cost per query (x) against quality (y), titled with the
    dataset and the number of questions. The quality axis spans at least 0.2 (or ten questions' worth, if more),
    so a difference of one question is not stretched across the plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary_rows(results)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for row in rows:
        ax.scatter(row[cost], row[quality], s=40)
        ax.annotate(row["config"], (row[cost], row[quality]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel(
        {"llm_calls": "LLM calls per query", "ms": "milliseconds per query", "tokens": "tokens per query"}.get(
            cost, cost
        )
    )
    ax.set_ylabel(quality)
    questions = int(max((row.get("queries", 0.0) for row in rows), default=0))
    values = [float(row[quality]) for row in rows] or [0.0]
    span = max(0.2, 10.0 / questions if questions else 0.2)
    lo, hi = min(values), max(values)
    if hi - lo < span:
        middle = (lo + hi) / 2
        lo, hi = middle - span / 2, middle + span / 2
        if min(values) >= 0.0 and max(values) <= 1.0:  # a share: slide the window back inside [0, 1]
            shift = max(0.0, -lo) - max(0.0, hi - 1.0)
            lo, hi = lo + shift, hi + shift
    pad = 0.05 * (hi - lo)
    ax.set_ylim(lo - pad, hi + pad)
    where = f"{dataset}, " if dataset else ""
    ax.set_title(f"{quality} vs {cost} ({where}{questions} questions)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def write_report(
    results: Sequence[FlowResult], out: Path, *, dataset: str, quality: str = "f1", cost: str = "llm_calls"
) -> dict[str, Path]:
    """Write ``results.json`` (summaries and per-query records), ``results.csv`` and ``quality_cost.png``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = summary_rows(results)
    data = {
        "dataset": dataset,
        "results": rows,
        "queries": {r.name: [asdict(rec) for rec in r.records] for r in results},
    }
    json_path = out / "results.json"
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    csv_path = out / "results.csv"
    keys = [key for key, _, _ in COLUMNS] + sorted({k for row in rows for k in row} - {k for k, _, _ in COLUMNS})
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()})
    png_path = plot_quality_cost(results, out / "quality_cost.png", quality=quality, cost=cost, dataset=dataset)
    return {"json": json_path, "csv": csv_path, "png": png_path}
