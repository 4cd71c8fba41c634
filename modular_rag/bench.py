"""Benchmark commands that print their figures (never asserted in tests).

    python -m modular_rag.bench retrieval --dataset ../shared/datasets/scifact [--limit N] [--presets a,b]

``retrieval`` indexes the dataset's corpus once (cached) and runs each preset's retrieval over the queries in one
process, side by side, printing nDCG@10, MRR@10, recall@10, recall@100 and milliseconds per query.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["RETRIEVAL_PRESETS", "retrieval_preset", "main"]

DEPTH = 100

RETRIEVAL_PRESETS: dict[str, dict[str, Any]] = {
    "bm25": {"retrieve": {"name": "bm25", "params": {"k": DEPTH}}},
    "dense": {"retrieve": {"name": "dense", "params": {"k": DEPTH}}},
    "hybrid": {"retrieve": {"name": "hybrid", "params": {"k": DEPTH, "pool": DEPTH, "fusion": "rrf"}}},
}
"""Retrieval-only linear flows (context and generation off), by name."""


def retrieval_preset(name: str) -> dict[str, Any]:
    """The flow config of a retrieval preset.

    Raises:
        ConfigError: If the preset is unknown (the message lists the presets).
    """
    from modular_rag.errors import ConfigError

    try:
        operators = RETRIEVAL_PRESETS[name]
    except KeyError:
        raise ConfigError("--presets", f"unknown preset {name!r}; presets: {', '.join(RETRIEVAL_PRESETS)}") from None
    return {"pattern": "linear", "name": name, "operators": {**operators, "context": "none", "generate": "none"}}


def _retrieval(args: argparse.Namespace) -> int:
    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.runner import dataset_providers, run_retrieval
    from modular_rag.tables import format_table

    dataset = load_beir(args.dataset, split=args.split).limited(args.limit)
    configs = [retrieval_preset(p) for p in args.presets.split(",") if p]
    configs += [load_config(path).model_dump(mode="json") for path in args.config or []]
    chunker = OperatorSpec(name=args.chunker)
    env = dataset_providers(dataset, chunker=chunker, progress=not args.quiet, log=lambda s: print(s, file=sys.stderr))
    rows = []
    results = []
    for cfg in configs:
        res = run_retrieval(cfg, dataset, env, progress=not args.quiet)
        m = res.mean
        rows.append([res.name, m["ndcg@10"], m["mrr@10"], m["recall@10"], m["recall@100"], round(res.ms_per_query, 1)])
        results.append({"name": res.name, **m, "ms_per_query": res.ms_per_query})
    print(f"{dataset.name} ({dataset.split} split, {len(dataset.queries)} queries, chunker={args.chunker})")
    print(format_table(["config", "nDCG@10", "MRR@10", "R@10", "R@100", "ms/q"], rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"dataset": dataset.name, "split": dataset.split, "results": results}, fh, indent=2)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a benchmark command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m modular_rag.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("retrieval", help="retrieval quality of presets / configs on a BEIR folder")
    p.add_argument("--dataset", required=True, help="a BEIR-format folder")
    p.add_argument("--split", default="dev", help="dev (queries.jsonl) or a prefix such as train")
    p.add_argument("--presets", default="bm25,dense,hybrid", help=f"comma-separated: {', '.join(RETRIEVAL_PRESETS)}")
    p.add_argument("--config", action="append", help="also run this flow config (repeatable)")
    p.add_argument("--chunker", default="document", help="chunker for the corpus (default: document)")
    p.add_argument("--limit", type=int, help="only the first N queries")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_retrieval)
    args = parser.parse_args(argv)
    from modular_rag.errors import ModularRagError

    try:
        return int(args.func(args))
    except ModularRagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
