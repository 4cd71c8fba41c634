"""The learned router on a mixed workload: NQ-open (one passage per question) and HotpotQA (two) in one BEIR folder.

    .venv/bin/python benchmarks/router.py [--root ../shared/datasets] [--train-fraction 0.5] [--save]

1. Builds ``.modular_rag/datasets/mixed``: both corpora, and every dev question of both sets, each set split by a
   seeded hash into a training part (``train_*`` files) and an evaluation part (the dev files).
2. Trains the learned router on the training part (``modular-rag train-router``) over two routes:
   ``configs/hotpotqa-linear.yaml`` (2 retrievals) and ``configs/hotpotqa-multihop.yaml`` (4, no LLM): per route, a
   model of whether it puts all of a question's gold passages in the top 5; the operating point (how much expected
   quality a retrieval must buy) is the best quality on held-out training questions within 60% of the multi-hop
   route's cost.
3. Runs always-linear, always-multi-hop and the routed flow on the evaluation part, side by side, and prints the
   targets: routed all@5 within 0.01 of always-multi-hop, at <= 60% of its retrievals and latency, and at least half
   of the gap between always-linear and always-multi-hop gained.

``--save`` writes the output to ``benchmarks/results/router-mixed.txt`` (and the eval report to
``benchmarks/results/router-mixed/``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import main as common_main  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run(args: argparse.Namespace) -> int:
    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import load_beir, mixed_dataset
    from modular_rag.eval.report import format_results, write_report
    from modular_rag.eval.router import train_router
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    folder = ROOT / ".modular_rag" / "datasets" / "mixed"
    parts = [load_beir(Path(args.root) / name) for name in ("nq_open_oracle", "hotpotqa")]
    train, dev = mixed_dataset(parts, folder, train_fraction=args.train_fraction, seed=args.seed)
    print(f"mixed workload: {len(train.queries)} training and {len(dev.queries)} evaluation questions "
          f"({', '.join(f'{p.name} {len(p.queries)}' for p in parts)}) -> {folder}")  # fmt: skip
    routes = {name: load_config(ROOT / "configs" / f"{name}.yaml") for name in ("hotpotqa-linear", "hotpotqa-multihop")}
    report = train_router(train, routes, ROOT / ".modular_rag" / "routers" / "mixed", quality="all@5",
                          validation=0.3, seed=args.seed, max_cost_ratio=0.6, log=print)  # fmt: skip
    print(f"router: held-out accuracy {report.accuracy:.3f}; labels {report.labels}; cost weight "
          f"{report.cost_weight}, l2 {report.l2}")  # fmt: skip
    configs = {**routes, "routed": load_config(report.config_file)}
    results = []
    for name, config in configs.items():
        env = dataset_providers(dev, config.providers, chunker=OperatorSpec(name=dev.default_chunker), progress=False)
        env.encoder.clear_cache()  # every flow embeds its questions itself: latencies are comparable
        results.append(evaluate_flow(config, dev, env, name=name))
    print(f"\nevaluation part ({len(dev.queries)} questions, never seen by the router's training):")
    print(format_results(results))
    summary = {r.name: r.summary() for r in results}
    by_source: list[list[str]] = []
    sources = {q.id: q.extra.get("source", "") for q in dev.queries}
    for r in results:
        for source in sorted(set(sources.values())):
            recs = [x for x in r.records if sources[x.qid] == source]
            gold = {q: dev.qrels[q] for q in (x.qid for x in recs)}
            allat5 = sum(all(d in x.docs[:5] for d in gold[x.qid]) for x in recs) / max(len(recs), 1)
            by_source.append([r.name, source, str(len(recs)), f"{allat5:.3f}",
                              f"{sum(x.retrievals for x in recs) / max(len(recs), 1):.2f}"])  # fmt: skip
    print(format_table(["config", "part", "questions", "all@5", "retrievals/q"], by_source))
    lin, mh, routed = summary["hotpotqa-linear"], summary["hotpotqa-multihop"], summary["routed"]
    checks = [
        ("routed all@5 within 0.01 of always-multi-hop", routed["all@5"] >= mh["all@5"] - 0.01,
         f"{routed['all@5']:.3f} vs {mh['all@5']:.3f}"),
        ("routed retrievals <= 60% of always-multi-hop", routed["retrievals"] <= 0.6 * mh["retrievals"],
         f"{routed['retrievals']:.2f} vs {mh['retrievals']:.2f} ({routed['retrievals'] / mh['retrievals']:.0%})"),
        ("routed latency <= 60% of always-multi-hop", routed["ms"] <= 0.6 * mh["ms"],
         f"{routed['ms']:.1f} vs {mh['ms']:.1f} ms/q ({routed['ms'] / mh['ms']:.0%})"),
        ("routed gains >= half the gap linear -> multi-hop",
         routed["all@5"] - lin["all@5"] >= 0.5 * (mh["all@5"] - lin["all@5"]),
         f"gain {routed['all@5'] - lin['all@5']:.3f} of gap {mh['all@5'] - lin['all@5']:.3f}"),
    ]  # fmt: skip
    print(format_table(["target", "met", "measured"], [[t, "yes" if ok else "NO", m] for t, ok, m in checks]))
    if args.save:
        write_report(results, ROOT / "benchmarks" / "results" / "router-mixed", dataset="mixed (dev)",
                     quality="all@5", cost="retrievals")  # fmt: skip
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train-fraction", type=float, default=0.5, help="share of each set's questions for training")
    parser.add_argument("--seed", type=int, default=0)


def main() -> int:
    return common_main("router.py", __doc__ or "", run, _arguments, "router-mixed.txt")


if __name__ == "__main__":
    raise SystemExit(main())
