"""The ``modular-rag tune`` command line (registered by :mod:`modular_rag.cli`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tune`` on the command line's subparsers."""
    p = sub.add_parser(
        "tune",
        help="search flows (patterns, operators, parameters) for the best on a dataset within a budget; "
        "writes best.yaml, the Pareto front and a report; a rerun continues the stored study",
    )
    p.add_argument(
        "--dataset",
        required=True,
        help="'demo', a BEIR folder (tunes on its train split when it has one, else on a share of its "
        "questions), or a folder with corpus/ (documents) and questions.jsonl",
    )
    p.add_argument("--questions", help="the questions file of a folder of documents (default DATASET/questions.jsonl)")
    p.add_argument("--out", required=True, help="the run's folder: study.db, splits, best.yaml, pareto/, report")
    p.add_argument("--budget", default="45m", help="total time across runs: 90s, 45m, 1.5h (default 45m)")
    p.add_argument("--space", help="search space YAML (default: the bundled space of the objective)")
    p.add_argument(
        "--objective",
        help="what to maximise on val: ndcg@10, all@5, f1, em, contains, recall@10, ... (default: the space's)",
    )
    p.add_argument("--max-llm-calls", type=float, help="mean LLM calls per query allowed")
    p.add_argument("--max-latency-ms", type=float, help="mean milliseconds per query allowed")
    p.add_argument(
        "--finetune",
        action="store_true",
        help="first fine-tune the embedder on the fit questions (modular-rag finetune) and search with it",
    )
    p.add_argument("--finetune-epochs", type=int, default=3, help="fine-tune stage: epochs (default 3)")
    p.add_argument("--finetune-lr", type=float, default=3e-5, help="fine-tune stage: learning rate (default 3e-5)")
    p.add_argument(
        "--router",
        action="store_true",
        help="after the search, train the learned router over the Pareto front's flows on the fit "
        "questions; the routed flow competes as one more trial",
    )
    p.add_argument("--compare", nargs="+", default=[], help="configs scored with the best on the report split")
    p.add_argument("--no-report", action="store_true", help="do not score the best on the report split")
    p.add_argument("--trials", type=int, help="stop after this many trials (besides the budget)")
    p.add_argument("--seed", type=int, default=0, help="seeds the split and the sampler (default 0)")
    p.add_argument("--val-fraction", type=float, default=0.25, help="share of the tuning questions in val (0.25)")
    p.add_argument(
        "--report-fraction",
        type=float,
        default=0.3,
        help="share held out for the report when the dataset has no train/dev pair (0.3)",
    )
    p.add_argument("--min-questions", type=int, default=30, help="questions of the first rung (default 30)")
    p.add_argument(
        "--pruner",
        choices=["paired", "halving", "median", "none"],
        default="paired",
        help="stop trailing candidates early: paired (behind the best trial on the same questions by more "
        "than 2 standard errors; default), Optuna's successive halving or median, or none",
    )
    p.add_argument(
        "--confirm",
        type=int,
        default=5,
        help="rescore the best N on the fit questions and choose by fit+val (default 5; 0: by val)",
    )
    p.add_argument("--concurrency", type=int, default=1, help="questions in flight per trial (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or stage lines")
    p.set_defaults(func=_cmd_tune)


def _cmd_tune(args: argparse.Namespace) -> int:
    from modular_rag.eval.recommend import config_candidates
    from modular_rag.eval.tune.search import TuneSettings, parse_budget, tune
    from modular_rag.eval.tune.space import load_space

    space = load_space(args.space, objective=args.objective) if args.space or args.objective else load_space(None)
    objective = args.objective or space.objective
    compare = config_candidates(args.compare)
    finetune = {"epochs": args.finetune_epochs, "learning_rate": args.finetune_lr} if args.finetune else None
    settings = TuneSettings(
        budget_s=parse_budget(args.budget),
        objective=objective,
        max_llm_calls=args.max_llm_calls,
        max_latency_ms=args.max_latency_ms,
        seed=args.seed,
        val_fraction=args.val_fraction,
        report_fraction=args.report_fraction,
        min_questions=args.min_questions,
        pruner=args.pruner,
        max_trials=args.trials,
        confirm=args.confirm,
        finetune=finetune,
        router=args.router,
        report=not args.no_report,
        concurrency=args.concurrency,
    )
    say = None if args.quiet else (lambda line: print(line, file=sys.stderr))
    result = tune(
        args.dataset,
        args.out,
        settings,
        space=space,
        questions=args.questions,
        compare=compare,
        progress=not args.quiet,
        log=say,
    )
    done = sum(r.state in ("complete", "pruned") for r in result.rows)
    print(f"{done} trials in {result.spent_s / 60:.1f} min ({'finished' if result.finished else 'interrupted'})")
    if result.best is not None:
        b = result.best
        print(
            f"best: trial #{b.number} ({b.summary}): val {objective} {b.value:.4f}, {b.llm_calls or 0:.2f} LLM "
            f"calls/q, {b.ms or 0:.0f} ms/q"
        )
    else:
        print("best: none of the trials finished within the budgets; raise --budget or the limits")
    if "report" in result.files:
        print(result.files["report"].read_text(encoding="utf-8"), end="")
    print("wrote " + ", ".join(str(p) for p in result.files.values()))
    return 0 if result.finished else 130
