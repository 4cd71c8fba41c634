"""The evaluation commands of ``modular-rag`` (registered by :mod:`modular_rag.cli`): ``eval`` compares configs on a
dataset, ``recommend`` picks the best within a budget, ``train-router`` learns which flow each question needs.
``tune`` and ``testset`` register themselves from their own packages."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``eval``, ``recommend`` and ``train-router`` on the command line's subparsers."""
    p = sub.add_parser("eval", help="run configs over a BEIR-format dataset: quality, cost, report files")
    p.add_argument("--dataset", required=True, help="a BEIR-format folder, or 'demo' for the bundled questions")
    p.add_argument("--config", nargs="+", required=True, help="flow configs (YAML) to compare")
    p.add_argument("--split", default="dev", help="dev (queries.jsonl) or a prefix such as train")
    p.add_argument("--limit", type=int, help="only N queries")
    p.add_argument("--concurrency", type=int, default=1, help="queries in flight (default 1)")
    p.add_argument(
        "--chunker",
        help="chunker for the corpus (default: the config's indexing.chunker when it sets "
        "one, else document for BEIR rows, recursive for folders)",
    )
    p.add_argument(
        "--milvus",
        metavar="URI",
        help="index the dataset into the Milvus at URI (http://host:19530, "
        "a milvus-lite server) and evaluate there, not in the cached Chroma",
    )
    p.add_argument("--out", help="write results.json, results.csv and quality_cost.png here")
    p.add_argument("--quality", default="f1", help="y axis of the plot (f1, em, contains, supported, ndcg@10)")
    p.add_argument("--cost", default="llm_calls", help="x axis of the plot (llm_calls, ms, tokens)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("recommend", help="evaluate the pattern templates (or configs) and pick the best in budget")
    p.add_argument("--dataset", required=True, help="a BEIR-format folder, or 'demo'")
    p.add_argument("--max-llm-calls", type=float, help="mean LLM calls per query allowed")
    p.add_argument("--max-latency-ms", type=float, help="mean milliseconds per query allowed")
    p.add_argument("--config", nargs="+", help="candidate configs (default: every pattern template and mode)")
    p.add_argument(
        "--quality",
        default="auto",
        help="what 'best' is: right (the gold value with a citation on a gold passage, refusals of unanswerable "
        "questions), f1, em, contains, supported, ndcg@10, all@5; auto: right when the questions have gold "
        "answers, else ndcg@10",
    )
    p.add_argument("--split", default="dev")
    p.add_argument("--limit", type=int, default=20, help="queries evaluated (default 20)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_recommend)

    p = sub.add_parser("train-router", help="train the learned router over candidate flows on a training split")
    p.add_argument("--dataset", required=True, help="a BEIR-format folder with a training split")
    p.add_argument("--config", nargs="+", required=True, help="the candidate flows (YAML), one route each")
    p.add_argument("--out", required=True, help="folder for router.json and routed.yaml")
    p.add_argument("--split", default="train", help="the training split (never the one you report on)")
    p.add_argument("--quality", default="all@5", help="what a route must achieve: all@5, recall@5, f1, contains")
    p.add_argument(
        "--classes",
        choices=["auto", "passages", "outcome", "both"],
        default=None,
        help="kinds of questions the router tells apart: passages (one relevant passage or several), "
        "outcome (the cheapest flow that did best), both (the pair), auto: cross-validation chooses "
        "(default: both with evidence features, else auto)",
    )
    p.add_argument(
        "--features",
        default=None,
        help="what the router reads, comma-separated: question (its embedding and wording), wording (its "
        "length, digits, comparison words, first word: no embedding), evidence (what "
        "the candidates' shared first retrieval found: the routed flow retrieves once, before the "
        "router); default question,evidence (question when the flows share no first retrieval)",
    )
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds over the training questions (5)")
    p.add_argument(
        "--max-cost-ratio",
        type=float,
        default=None,
        help="spend at most this share of the costliest flow's cost on average; the best quality within it "
        "by cross-validation, and the routed flow holds it over the questions it serves (default 0.7)",
    )
    p.add_argument(
        "--max-quality-loss",
        type=float,
        help="instead: the cheapest operating point within this of the best flow's quality (cross-validated)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, help="only N training questions")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_train_router)


def _load_dataset(spec: str, split: str, limit: int | None) -> Any:
    from modular_rag.eval.datasets import load_beir, load_demo

    dataset = load_demo() if spec == "demo" else load_beir(spec, split=split)
    return dataset.limited(limit, spread=spec == "demo")


def _cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.report import format_results, write_report
    from modular_rag.eval.runner import config_chunker, dataset_providers, evaluate_flow

    dataset = _load_dataset(args.dataset, args.split, args.limit)
    configs = [load_config(path) for path in args.config]  # all validated before anything loads
    if args.milvus:  # each config's vector store replaced by that Milvus (a collection per corpus and setting)
        from modular_rag.config import MilvusConfig

        store = MilvusConfig(uri=args.milvus)
        configs = [c.with_vectorstore(store) for c in configs]
    results = []
    for path, config in zip(args.config, configs, strict=True):
        # --chunker, else the config's indexing.chunker when it sets one, else the dataset's default
        chunker = OperatorSpec(name=args.chunker) if args.chunker else config_chunker(config, dataset.default_chunker)
        env = dataset_providers(
            dataset,
            config.providers,
            chunker=chunker,
            progress=not args.quiet,
            log=lambda line: print(line, file=sys.stderr),
        )
        name = config.name or Path(path).stem
        results.append(
            evaluate_flow(config, dataset, env, name=name, concurrency=args.concurrency, progress=not args.quiet)
        )
    print(f"{dataset.name} ({dataset.split}, {len(dataset.queries)} queries)")
    print(format_results(results))
    if args.out:
        paths = write_report(results, Path(args.out), dataset=dataset.name, quality=args.quality, cost=args.cost)
        print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_train_router(args: argparse.Namespace) -> int:
    from pathlib import Path

    from modular_rag.config import load_config
    from modular_rag.eval.router import train_router

    dataset = _load_dataset(args.dataset, args.split, args.limit)
    configs = {}
    for path in args.config:
        config = load_config(path)
        configs[config.name or Path(path).stem] = config
    given: dict[str, Any] = {}  # what the command line left out takes train_router's defaults
    if args.features is not None:
        given["features"] = [f.strip() for f in args.features.split(",") if f.strip()]
    if args.max_cost_ratio is not None:
        given["max_cost_ratio"] = args.max_cost_ratio
    report = train_router(
        dataset,
        configs,
        args.out,
        quality=args.quality,
        classes=args.classes,
        folds=args.folds,
        seed=args.seed,
        max_quality_loss=args.max_quality_loss,
        progress=not args.quiet,
        log=print,
        **given,
    )
    print(
        f"cross-validated accuracy: routes {report.accuracy:.3f} (labels: the cheapest flow reaching the best "
        f"{args.quality}), question kinds ({report.classes}) {report.class_accuracy:.3f}"
    )
    print(f"wrote {report.model_file} and {report.config_file} (modular-rag eval --config {report.config_file})")
    return 0


def _cmd_recommend(args: argparse.Namespace) -> int:
    from modular_rag.eval.recommend import config_candidates, pattern_candidates, recommend
    from modular_rag.tables import format_table

    dataset = _load_dataset(args.dataset, args.split, args.limit)
    candidates = config_candidates(args.config) if args.config else pattern_candidates()
    if args.quality == "auto":
        args.quality = "right" if any(q.answers for q in dataset.queries) else "ndcg@10"
    result = recommend(
        dataset,
        candidates,
        quality=args.quality,
        max_llm_calls=args.max_llm_calls,
        max_latency_ms=args.max_latency_ms,
        progress=not args.quiet,
        log=lambda line: print(line, file=sys.stderr),
    )
    print(
        f"{dataset.name} ({len(dataset.queries)} queries); budget: LLM calls/q <= {args.max_llm_calls}, "
        f"ms/q <= {args.max_latency_ms}; quality = {args.quality}"
    )
    print(format_table(result.headers, result.rows()))
    if result.best is None:
        print("recommendation: none of the configs fits the budget; raise it or add cheaper configs")
        return 1
    print(f"recommendation: {result.best.name} ({args.quality} {result.best.quality:.3f})")
    return 0
