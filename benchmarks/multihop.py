"""Every pattern on HotpotQA and NQ-open dev: retrieval-only rows without an LLM on every question, and the
LLM-driven patterns on a sample.

    .venv/bin/python benchmarks/multihop.py [--root ../shared/datasets] [--llm-limit 60] [--skip-llm] [--runs a,b]
                                            [--save]

Retrieval-only rows (generation off, no LLM anywhere) on all 350 HotpotQA and all 1,858 NQ-open dev questions: the
configs in ``configs/`` (single-shot hybrid; linear + ``link_hop``; iterative with the ``links`` and ``evidence``
hops; branching ``mode: passages`` with links and with evidence; recursive ``expand: hop`` with links). The
weights of the pair ranking were chosen on a fit split of 120 HotpotQA questions (sha256 of ``hotpot-fit:<id>``);
the command also prints each row on the other 230 alone.

LLM rows, on the first ``--llm-limit`` HotpotQA questions spread over the file: each pattern's template (local
SmolLM2-135M), which writes its hops with the model (ITER-RETGEN, IRCoT, multi-query branching, Tree of
Clarifications, FLARE), with the 95% interval of its all@5.

``--save`` writes the output to ``benchmarks/results/multihop.txt``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import main as common_main  # noqa: E402

RETRIEVAL = [
    "hotpotqa-linear",
    "hotpotqa-multihop",
    "hotpotqa-iterative-links",
    "hotpotqa-branching-passages",
    "hotpotqa-recursive-links",
]
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "iterative-evidence (MDR, beam 1)": (
        "hotpotqa-iterative-links",
        {"operators": {"hop": {"name": "evidence", "params": {"beam": 1}}}},
    ),
    "branching-passages-evidence": ("hotpotqa-branching-passages", {"operators": {"hop": "evidence"}}),
}
LLM_RUNS = ["linear-checked", "iterative", "iterative-ircot", "branching", "recursive", "adaptive"]


def _fit_ids(dataset: Any) -> set[str]:
    ids = [q.id for q in dataset.queries]
    order = sorted(ids, key=lambda q: hashlib.sha256(f"hotpot-fit:{q}".encode()).hexdigest())
    return set(order[:120])


def run(args: argparse.Namespace) -> int:
    import yaml

    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.recommend import pattern_config
    from modular_rag.eval.runner import FlowResult, dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    root = Path(args.root)
    configs: dict[str, Any] = {}
    for name in RETRIEVAL:
        configs[name] = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text(encoding="utf-8"))
    for label, (base, extra) in VARIANTS.items():
        data = yaml.safe_load((ROOT / "configs" / f"{base}.yaml").read_text(encoding="utf-8"))
        operators = dict(data.get("operators", {}))
        for slot, spec in extra["operators"].items():  # another operator in the slot; the base's params stay
            spec = {"name": spec} if isinstance(spec, str) else spec
            base_spec = operators.get(slot)
            base_params = base_spec.get("params", {}) if isinstance(base_spec, dict) else {}
            operators[slot] = {**spec, "params": {**base_params, **spec.get("params", {})}}
        data["operators"] = operators
        data["name"] = label
        configs[label] = data
    headers = ["set", "config", "questions", "all@5", "R@5", "R@10", "nDCG@10", "retrievals/q", "LLM calls/q", "ms/q"]

    def row(set_name: str, result: FlowResult, note: str = "") -> list[str]:
        s = result.summary()
        return [
            set_name,
            result.name + note,
            f"{s['queries']:.0f}",
            f"{s['all@5']:.3f}",
            f"{s['recall@5']:.3f}",
            f"{s['recall@10']:.3f}",
            f"{s['ndcg@10']:.3f}",
            f"{s['retrievals']:.2f}",
            f"{s['llm_calls']:.2f}",
            f"{s['ms']:.0f}",
        ]

    rows: list[list[str]] = []
    rest_rows: list[list[str]] = []
    for set_name, folder in (("hotpotqa", "hotpotqa"), ("nq-open", "nq_open_oracle")):
        dataset = load_beir(root / folder)
        results = []
        for name, data in configs.items():
            config = load_config(data)
            env = dataset_providers(dataset, config.providers, chunker=OperatorSpec(name="document"), progress=False)
            result = evaluate_flow(config, dataset, env, name=name)
            results.append(result)
            rows.append(row(set_name, result))
            if set_name == "hotpotqa":
                fit = _fit_ids(dataset)
                rest = [r for r in result.records if r.qid not in fit]
                gold = dataset.qrels
                all5 = sum(all(d in r.docs[:5] for d in gold[r.qid]) for r in rest) / len(rest)
                rest_rows.append([name, str(len(rest)), f"{all5:.3f}"])
    print("retrieval only, no LLM, every dev question:")
    print(format_table(headers, rows))
    print("\nHotpotQA, the 230 questions outside the fit split the pair weights were chosen on:")
    print(format_table(["config", "questions", "all@5"], rest_rows))
    if not args.skip_llm:
        dataset = load_beir(root / "hotpotqa").limited(args.llm_limit, spread=True)
        llm_rows = []
        for run_name in args.runs.split(","):
            config = load_config(pattern_config(run_name))
            env = dataset_providers(dataset, config.providers, chunker=OperatorSpec(name="document"), progress=False)
            result = evaluate_flow(config, dataset, env, name=run_name)
            s = result.summary()
            half = 1.96 * math.sqrt(max(s["all@5"] * (1 - s["all@5"]), 1e-9) / s["queries"])
            llm_rows.append(
                row("hotpotqa", result, f" (all@5 ±{half:.2f})") + [f"{s['f1']:.3f}", f"{s['contains']:.3f}"]
            )
        print(f"\nthe templates, LLM-driven (local SmolLM2-135M), {args.llm_limit} HotpotQA questions spread over dev:")
        print(format_table([*headers, "F1", "contains"], llm_rows))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llm-limit", type=int, default=60, help="HotpotQA questions for the LLM rows (60)")
    parser.add_argument("--skip-llm", action="store_true", help="only the retrieval-only rows")
    parser.add_argument("--runs", default=",".join(LLM_RUNS), help=f"the LLM runs (default: {','.join(LLM_RUNS)})")


def main() -> int:
    return common_main("multihop.py", __doc__ or "", run, _arguments, "multihop.txt")


if __name__ == "__main__":
    raise SystemExit(main())
