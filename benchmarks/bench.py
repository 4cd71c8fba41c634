"""Development benchmarks that print their figures (never asserted in tests); not part of the package.

    python benchmarks/bench.py retrieval --dataset ../shared/datasets/scifact [--limit N] [--presets a,b]
                                          [--embeddings MODEL_DIR] [--config FLOW.yaml]
    python benchmarks/bench.py holdout --dataset DIR --split train --fraction 0.2 --out NEW_DIR
    python benchmarks/bench.py patterns [--dataset demo|DIR] [--limit N] [--runs a,b]
    python benchmarks/bench.py datasets [--root ../shared/datasets] [--limit N] [--runs a,b]

``retrieval`` indexes the dataset's corpus once per embedder (cached) and runs each preset's retrieval over the
queries in one process, side by side, printing nDCG@10, MRR@10, recall@10, recall@100 and milliseconds per query.
Each preset runs with its own BM25 settings (``providers.sparse``) over the same dense vectors. ``holdout`` splits a
split's queries in two, to choose fine-tuning settings on queries the model did not train on. Flows are searched
with ``modular-rag tune`` (the one tuning path).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the kit of this checkout

from modular_rag.eval.recommend import PATTERN_RUNS, pattern_config  # noqa: E402

__all__ = ["RETRIEVAL_PRESETS", "retrieval_preset", "PATTERN_RUNS", "pattern_config", "main"]

DEPTH = 100

RETRIEVAL_PRESETS: dict[str, dict[str, Any]] = {
    "bm25": {"operators": {"retrieve": {"name": "bm25", "params": {"k": DEPTH}}}},
    "dense": {"operators": {"retrieve": {"name": "dense", "params": {"k": DEPTH}}}},
    "hybrid": {"operators": {"retrieve": {"name": "hybrid", "params": {"k": DEPTH, "pool": DEPTH, "fusion": "rrf"}}}},
    # tuned settings are configs written by `modular-rag tune`: configs/scifact-best*.yaml
}
"""Retrieval-only linear flows (context and generation off), by name: the operators, and BM25 settings in
``providers.sparse``. The embedder is the bundled MiniLM unless ``--embeddings`` names another."""


def retrieval_preset(name: str) -> dict[str, Any]:
    """The flow config of a retrieval preset.

    Raises:
        ConfigError: If the preset is unknown (the message lists the presets).
    """
    from modular_rag.errors import ConfigError

    try:
        preset = RETRIEVAL_PRESETS[name]
    except KeyError:
        raise ConfigError("--presets", f"unknown preset {name!r}; presets: {', '.join(RETRIEVAL_PRESETS)}") from None
    config: dict[str, Any] = {
        "pattern": "linear",
        "name": name,
        "operators": {**preset["operators"], "context": "none", "generate": "none"},
    }
    if "providers" in preset:
        config["providers"] = preset["providers"]
    return config


def _embeddings(path: str | None) -> Any:
    """``--embeddings``: a sentence-transformers folder, or ``None`` (each config's own embeddings)."""
    from modular_rag.config import SentenceTransformersConfig
    from modular_rag.errors import ConfigError

    if path is None:
        return None
    folder = Path(path)
    if not (folder / "modules.json").exists() and not (folder / "config.json").exists():
        raise ConfigError("--embeddings", f"{path} is not a sentence-transformers model folder (no modules.json)")
    return SentenceTransformersConfig(path=str(folder.resolve()))


def _env_for(config: Any, dataset: Any, chunker: Any, embeddings: Any, quiet: bool) -> Any:
    """Providers over the dataset's cached index for a config's embeddings (or ``--embeddings``) and BM25 settings."""
    from modular_rag.config import ProvidersConfig
    from modular_rag.eval.runner import dataset_providers

    providers = ProvidersConfig(embeddings=embeddings or config.providers.embeddings, sparse=config.providers.sparse)
    return dataset_providers(
        dataset, providers, chunker=chunker, progress=not quiet, log=lambda s: print(s, file=sys.stderr)
    )


def _retrieval(args: argparse.Namespace) -> int:
    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.runner import config_chunker, run_retrieval
    from modular_rag.tables import format_table

    dataset = load_beir(args.dataset, split=args.split).limited(args.limit)
    configs = [load_config(retrieval_preset(p)) for p in args.presets.split(",") if p]
    configs += [load_config(path) for path in args.config or []]
    embeddings = _embeddings(args.embeddings)
    rows = []
    results = []
    for cfg in configs:
        # --chunker, else the config's own (configs/scifact-best.yaml indexes passages), else one chunk per row
        chunker = OperatorSpec(name=args.chunker) if args.chunker else config_chunker(cfg, "document")
        env = _env_for(cfg, dataset, chunker, embeddings, args.quiet)
        res = run_retrieval(cfg, dataset, env, progress=not args.quiet)
        m = res.mean
        rows.append([res.name, m["ndcg@10"], m["mrr@10"], m["recall@10"], m["recall@100"], round(res.ms_per_query, 1)])
        results.append({"name": res.name, **m, "ms_per_query": res.ms_per_query})
    model = args.embeddings or "each config's (default: bundled all-MiniLM-L6-v2)"
    where = args.chunker or "each config's (default: document)"
    print(
        f"{dataset.name} ({dataset.split} split, {len(dataset.queries)} queries, chunker={where}, embeddings={model})"
    )
    print(format_table(["config", "nDCG@10", "MRR@10", "R@10", "R@100", "ms/q"], rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"dataset": dataset.name, "split": dataset.split, "embeddings": args.embeddings, "results": results},
                fh,
                indent=2,
            )
    return 0


def _holdout(args: argparse.Namespace) -> int:
    from modular_rag.eval.datasets import holdout_split, load_beir

    dataset = load_beir(args.dataset, split=args.split)
    first, second = holdout_split(
        dataset,
        args.out,
        fraction=args.fraction,
        seed=args.seed,
        names=(args.names.split(",")[0], args.names.split(",")[-1]),
    )
    for part in (first, second):
        judged = sum(len(v) for v in part.qrels.values())
        print(f"{part.split}: {len(part.queries)} queries, {judged} judgements -> {args.out}")
    return 0


def _patterns(args: argparse.Namespace) -> int:
    from modular_rag.eval.datasets import load_beir, load_demo
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    dataset = load_demo() if args.dataset == "demo" else load_beir(args.dataset)
    dataset = dataset.limited(args.limit, spread=True)
    env = dataset_providers(dataset, progress=not args.quiet, log=lambda s: print(s, file=sys.stderr))
    rows, results, flows = [], [], []
    for run in [r for r in args.runs.split(",") if r]:
        res = evaluate_flow(pattern_config(run), dataset, env, name=run, progress=not args.quiet)
        s = res.summary()
        rows.append(
            [
                run,
                f"{s['llm_calls']:.1f} ({s['llm_calls_max']:.0f})",
                f"{s['retrievals']:.1f} ({s['retrievals_max']:.0f})",
                round(s["tokens"]),
                f"{s['ms'] / 1000:.1f}",
                f"{s['recall@5']:.3f}",
                f"{s['all@5']:.3f}",
                f"{s['f1']:.3f}",
                int(s["errors"]),
            ]
        )
        results.append({"run": run, **s})
        flows.append(res)
        print(
            f"  {run}: {s['llm_calls']:.2f} LLM calls/q, {s['retrievals']:.2f} retrievals/q, {s['ms'] / 1000:.1f} s/q",
            file=sys.stderr,
            flush=True,
        )
    print(f"{dataset.name} ({len(dataset.queries)} questions, local model)")
    print(
        format_table(
            ["run", "LLM calls/q (max)", "retrievals/q (max)", "tokens/q", "s/q", "R@5", "all@5", "F1", "errors"], rows
        )
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"dataset": dataset.name, "queries": len(dataset.queries), "results": results}, fh, indent=2)
    if args.out:
        _write_reports(flows, Path(args.out), dataset=dataset.name, log=lambda s: print(s, file=sys.stderr))
    return 0


def _write_reports(flows: Sequence[Any], out: Path, *, dataset: str, log: Callable[[str], None]) -> None:
    """Write ``modular-rag eval``'s report (JSON, CSV, quality-vs-cost PNG) for one dataset's pattern runs."""
    from modular_rag.eval.report import write_report

    paths = write_report(flows, out, dataset=dataset)
    log(f"wrote {', '.join(str(p) for p in paths.values())}")


def _datasets(args: argparse.Namespace) -> int:
    """One table over several BEIR folders: retrieval presets on sets without answers, pattern runs on QA sets."""
    from modular_rag.config import load_config
    from modular_rag.errors import ConfigError
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.runner import dataset_providers, evaluate_flow, run_retrieval
    from modular_rag.tables import format_table

    root = Path(args.root)
    names = [n for n in args.datasets.split(",") if n]
    missing = [n for n in names if not (root / n / "corpus.jsonl").exists()]
    if missing:
        raise ConfigError("--datasets", f"no BEIR folder (corpus.jsonl) for {', '.join(missing)} under {root}")
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for name in names:
        dataset = load_beir(root / name)
        qa = any(q.answers for q in dataset.queries)
        dataset = dataset.limited(args.limit if qa else args.retrieval_limit, spread=True)
        env = dataset_providers(dataset, progress=not args.quiet, log=log)
        n = len(dataset.queries)
        if not qa:
            for preset in [p for p in args.presets.split(",") if p]:
                res = run_retrieval(load_config(retrieval_preset(preset)), dataset, env)
                m = res.mean
                rows.append(
                    [
                        name,
                        n,
                        preset,
                        f"{m['ndcg@10']:.3f}",
                        f"{m['recall@5']:.3f}",
                        "",
                        "",
                        "",
                        "0",
                        "0",
                        f"{res.ms_per_query / 1000:.2f}",
                        0,
                    ]
                )
                results.append({"dataset": name, "queries": n, "run": preset, **m, "ms": res.ms_per_query})
                log(f"  {name} {preset}: nDCG@10 {m['ndcg@10']:.3f}")
            continue
        flows = []
        for run in [r for r in args.runs.split(",") if r]:
            flow_result = evaluate_flow(pattern_config(run), dataset, env, name=run, progress=not args.quiet)
            s = flow_result.summary()
            rows.append(
                [
                    name,
                    n,
                    run,
                    f"{s['ndcg@10']:.3f}",
                    f"{s['recall@5']:.3f}",
                    f"{s['all@5']:.3f}",
                    f"{s['em']:.3f}",
                    f"{s['f1']:.3f}",
                    f"{s['llm_calls']:.1f}",
                    f"{s['retrievals']:.1f}",
                    f"{s['ms'] / 1000:.2f}",
                    int(s["errors"]),
                ]
            )
            results.append({"dataset": name, "run": run, **s})
            flows.append(flow_result)
            log(f"  {name} {run}: F1 {s['f1']:.3f}, all@5 {s['all@5']:.3f}, {s['llm_calls']:.1f} LLM calls/q")
        if args.out:
            _write_reports(flows, Path(args.out) / name, dataset=name, log=log)
    print(f"shared datasets under {root} (QA sets: {args.limit} questions each, evenly spaced; local model)")
    print(
        format_table(
            ["dataset", "queries", "run", "nDCG@10", "R@5", "all@5", "EM", "F1", "LLM/q", "retr/q", "s/q", "errors"],
            rows,
        )
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"root": str(root), "results": results}, fh, indent=2)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a benchmark command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python benchmarks/bench.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("retrieval", help="retrieval quality of presets / configs on a BEIR folder")
    p.add_argument("--dataset", required=True, help="a BEIR-format folder")
    p.add_argument("--split", default="dev", help="dev (queries.jsonl) or a prefix such as train")
    p.add_argument("--presets", default="bm25,dense,hybrid", help=f"comma-separated: {', '.join(RETRIEVAL_PRESETS)}")
    p.add_argument("--config", action="append", help="also run this flow config (repeatable)")
    p.add_argument("--chunker", help="chunker for the corpus (default: a config's indexing.chunker, else document)")
    p.add_argument("--embeddings", help="a sentence-transformers folder every config runs with (its own index)")
    p.add_argument("--limit", type=int, help="only the first N queries")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_retrieval)
    p = sub.add_parser("holdout", help="split a split's queries in two BEIR splits of a new folder (shared corpus)")
    p.add_argument("--dataset", required=True, help="a BEIR-format folder")
    p.add_argument("--split", default="train", help="the split to divide (default: train)")
    p.add_argument("--fraction", type=float, default=0.2, help="share of the queries held out (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="seeds the draw (default 0)")
    p.add_argument("--names", default="fit,val", help="the two split names (default: fit,val)")
    p.add_argument("--out", required=True, help="the new folder")
    p.set_defaults(func=_holdout)
    p = sub.add_parser("patterns", help="cost (LLM calls, retrievals, tokens, time) and quality of every pattern")
    p.add_argument("--dataset", default="demo", help="'demo' (the bundled questions) or a BEIR-format folder")
    p.add_argument("--runs", default=",".join(PATTERN_RUNS), help=f"comma-separated: {', '.join(PATTERN_RUNS)}")
    p.add_argument("--limit", type=int, default=8, help="questions, evenly spaced over the file (default 8)")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--out", help="also write results.json, results.csv and quality_cost.png (as eval does) here")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_patterns)
    p = sub.add_parser("datasets", help="one table over the shared datasets: retrieval and every pattern's answers")
    p.add_argument("--root", default="../shared/datasets", help="folder holding the BEIR folders")
    p.add_argument("--datasets", default="scifact,hotpotqa,nq_open_oracle,squad_expmrc", help="comma-separated folders")
    p.add_argument("--presets", default="bm25,hybrid", help="retrieval presets for sets without answers")
    p.add_argument(
        "--runs",
        default="linear,conditional,branching,iterative,recursive,adaptive",
        help=f"pattern runs for QA sets: {', '.join(PATTERN_RUNS)}",
    )
    p.add_argument("--limit", type=int, default=20, help="questions per QA set, evenly spaced (default 20)")
    p.add_argument("--retrieval-limit", type=int, help="queries per retrieval-only set (default: all)")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--out", help="also write eval's report (JSON, CSV, quality_cost.png) per QA set into OUT/<set>")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_datasets)
    args = parser.parse_args(argv)
    from modular_rag.errors import ModularRagError

    try:
        return int(args.func(args))
    except ModularRagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
