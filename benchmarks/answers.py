"""Answer quality of the embedded default: the demo's 24 questions, SQuAD and NQ-open held-out questions, the
out-of-scope refusal, next to the recorded answers of the previous default.

    .venv/bin/python benchmarks/answers.py [--root ../shared/datasets] [--llm-limit 40] [--save]

Datasets: the demo; SQuAD and NQ-open dev, each split once by ``bench holdout`` (seed 0) into ``tune`` (100 and
150 questions: every setting of the evidence scorer, the span extraction and the refusal rule was chosen there)
and ``report`` (SQuAD: the other 251; NQ-open: the first 200 of the other 1,708), which this command scores.
Configs, side by side in one run: ``default`` (the linear template: evidence-first context, extractive answer, no
LLM), ``default+multihop`` (the same after the ``link_hop`` hop), and ``checked`` (the model answers, replaced by
the extractive answer when the attribution check does not support it) on the first ``--llm-limit`` questions of
each set (the local model takes seconds per answer). The previous default's answers
(``benchmarks/results/answers-baseline.json``, the template before this change, on commit 7f1ed9b) are rescored
here with the same metrics, so its row and the new ones are comparable question for question.

``--save`` writes the output to ``benchmarks/results/answers.txt``, and the eval reports (every question's answer,
``results.json`` / ``results.csv``, and the quality-cost plot) under ``benchmarks/runs/answers/`` (not kept in git:
the command writes them again).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import main as common_main  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUT_OF_SCOPE = "How do I reset the router to factory settings?"
SPLITS = {"squad": ("squad_expmrc", 0.285, None), "nq": ("nq_open_oracle", 0.0808, 200)}


def _datasets(root: Path) -> dict[str, Any]:
    from modular_rag.eval.datasets import holdout_split, load_beir, load_demo

    out: dict[str, Any] = {"demo": load_demo()}
    for name, (folder, fraction, limit) in SPLITS.items():
        home = ROOT / ".modular_rag" / "datasets" / f"{name}-answers"
        if not (home / "report_queries.jsonl").exists():
            holdout_split(load_beir(root / folder), home, fraction=fraction, seed=0, names=("report", "tune"))
        out[name] = load_beir(home, split="report").limited(limit)
    return out


def _configs() -> dict[str, Any]:
    import yaml

    from modular_rag import template_path

    default = yaml.safe_load(template_path("linear").read_text(encoding="utf-8"))
    default["name"] = "default"
    multihop = json.loads(json.dumps(default))
    multihop["name"] = "default+multihop"
    multihop["operators"]["retrieve"] = {"name": "hybrid", "params": {"k": 20, "pool": 20}}
    multihop["operators"]["rerank"] = {"name": "link_hop", "params": {"k": 10}}
    checked = json.loads(json.dumps(default))
    checked["name"] = "checked"
    checked["operators"]["generate"] = {"name": "cited_answer", "params": {"mode": "checked"}}
    return {"default": default, "default+multihop": multihop, "checked": checked}


def _baseline(name: str, dataset: Any) -> dict[str, float]:
    from modular_rag.answers import strip_citations
    from modular_rag.eval.metrics import best_answer_scores, contains_answer

    recorded = json.loads((ROOT / "benchmarks" / "results" / "answers-baseline.json").read_text())[name]
    gold = {q.id: q.answers for q in dataset.queries}
    rows = [(strip_citations(a["answer"]), a["refused"], gold[q]) for q, a in recorded["answers"].items() if q in gold]
    n = max(len(rows), 1)
    return {
        "queries": float(len(rows)),
        "em": sum(best_answer_scores(t, g)[0] for t, _, g in rows) / n,
        "f1": sum(best_answer_scores(t, g)[1] for t, _, g in rows) / n,
        "contains": sum(0.0 if r else contains_answer(t, g) for t, r, g in rows) / n,
        "refused": sum(r for _, r, _ in rows) / n,
        "llm_calls": 1.0,
        "ms": float(recorded["summary"]["ms"]),
    }


def run(args: argparse.Namespace) -> int:
    from modular_rag.builder import build_flow
    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.report import write_report
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    datasets = _datasets(Path(args.root))
    configs = _configs()
    headers = [
        "set",
        "config",
        "questions",
        "contains",
        "contains+supported citation",
        "EM",
        "F1",
        "supported",
        "refused",
        "LLM/q",
        "ms/q",
    ]
    rows: list[list[str]] = []
    refusals: list[list[str]] = []
    for set_name, dataset in datasets.items():
        base = _baseline(set_name, dataset)
        rows.append(
            [
                set_name,
                "previous default (recorded)",
                f"{base['queries']:.0f}",
                f"{base['contains']:.3f}",
                "-",
                f"{base['em']:.3f}",
                f"{base['f1']:.3f}",
                "-",
                f"{base['refused']:.3f}",
                "1.00",
                f"{base['ms']:.0f}",
            ]
        )
        results = []
        for cname, data in configs.items():
            if cname == "default+multihop" and set_name != "demo":
                continue
            part = dataset.limited(args.llm_limit) if cname == "checked" else dataset
            config = load_config(data)
            env = dataset_providers(
                part, config.providers, chunker=OperatorSpec(name=part.default_chunker), progress=False
            )
            result = evaluate_flow(config, part, env, name=cname)
            results.append(result)
            s = result.summary()
            rows.append(
                [
                    set_name,
                    cname,
                    f"{s['queries']:.0f}",
                    f"{s['contains']:.3f}",
                    f"{s['contains_backed']:.3f}",
                    f"{s['em']:.3f}",
                    f"{s['f1']:.3f}",
                    f"{s['supported']:.3f}",
                    f"{s['refused']:.3f}",
                    f"{s['llm_calls']:.2f}",
                    f"{s['ms']:.0f}",
                ]
            )
            if set_name == "demo":
                out = build_flow(config, providers=env).invoke({"query": OUT_OF_SCOPE})
                refusals.append(
                    [
                        cname,
                        "refused" if out["answer"]["refused"] else "ANSWERED",
                        out["answer"].get("reason", out["answer"]["text"])[:100],
                    ]
                )
        if args.save:
            write_report(
                results, ROOT / "benchmarks" / "runs" / "answers" / set_name, dataset=set_name, quality="contains"
            )
    print(format_table(headers, rows))
    print(f"\nout-of-scope question on the demo: {OUT_OF_SCOPE!r}")
    print(format_table(["config", "outcome", "why"], refusals))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llm-limit", type=int, default=40, help="questions per set for the LLM config (40)")


def main() -> int:
    return common_main("answers.py", __doc__ or "", run, _arguments, "answers.txt")


if __name__ == "__main__":
    raise SystemExit(main())
