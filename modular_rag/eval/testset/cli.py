"""The ``modular-rag testset`` command line (registered by :mod:`modular_rag.cli`)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``testset`` on the command line's subparsers."""
    p = sub.add_parser(
        "testset",
        help="make a labelled test set (a BEIR folder: questions, answers, gold passages, train and dev "
        "splits, report.md) from a folder of documents, for eval, recommend, tune and train-router",
    )
    p.add_argument(
        "docs",
        nargs="*",
        help="files and folders of documents (.md .txt .jsonl .pdf .html .docx), or a BEIR folder (its corpus.jsonl)",
    )
    p.add_argument(
        "--from-feedback",
        metavar="FEEDBACK.sqlite",
        help="instead of documents: the feedback people gave in modular-rag ui (feedback.sqlite in the index's "
        "folder), written as a labelled set of the questions they asked",
    )
    p.add_argument("--overwrite", action="store_true", help="with --from-feedback: replace a dataset in --out")
    p.add_argument("--out", required=True, help="the folder to write")
    p.add_argument("--size", type=int, help="questions in the set, train and dev together (default 200)")
    p.add_argument(
        "--kinds",
        nargs="+",
        metavar="MAKER",
        help="question makers, equal shares (default: inverse_cloze fact_question bridge; llm needs a "
        "model, see --config)",
    )
    p.add_argument(
        "--config",
        help="test-set config (YAML): makers with params and shares, checks, providers, size, train_share, seed",
    )
    p.add_argument("--seed", type=int, help="seeds every draw (default 0)")
    p.set_defaults(func=_cmd_testset)


def _cmd_testset(args: argparse.Namespace) -> int:
    from modular_rag.errors import ConfigError
    from modular_rag.eval.testset import make_testset

    if args.from_feedback:
        if args.docs:
            raise ConfigError("docs", "give documents or --from-feedback, not both")
        from modular_rag.ui.feedback import export_feedback

        print("\n".join(export_feedback(args.from_feedback, args.out, overwrite=args.overwrite).lines()))
        return 0
    if not args.docs:
        raise ConfigError("docs", "no documents given: name files or folders of documents, or --from-feedback FILE")

    result = make_testset(args.docs, args.out, args.config, size=args.size, makers=args.kinds, seed=args.seed)
    print("\n".join(result.lines()))
    return 0
