"""Performance benchmarks: framework overhead, indexing throughput, sparse retrieval at scale, concurrent batches,
start-up. Each subcommand runs the things it compares side by side in one process (interleaved, alternating their
order), so the ratios hold on a noisy shared machine, and prints a table with the ratio against its target.

    .venv/bin/python -m benchmarks.perf overhead    [--dataset DIR] [--queries 300] [--retrieve hybrid,bm25]
    .venv/bin/python -m benchmarks.perf indexing    [--dataset DIR] [--limit N] [--compare backends|precisions]
                                                    [--datasets scifact,hotpotqa]
    .venv/bin/python -m benchmarks.perf sparse      [--dataset DIR] [--sizes 100000,1000000] [--queries 1019]
    .venv/bin/python -m benchmarks.perf concurrency [--queries 64] [--concurrency 16] [--latency 1.0]
                                                    [--slots 4] [--local-queries 16]
    .venv/bin/python -m benchmarks.perf startup     [--runs 3]
    .venv/bin/python -m benchmarks.perf latency     [--rounds 3] [--cold-runs 3] [--index-limit 500]
                                                    [--parts warm,cold,indexing,answers]
    .venv/bin/python -m benchmarks.perf scale       [--sizes 100000,1000000] [--stores chroma,milvus] [--old COMMIT]
    .venv/bin/python -m benchmarks.perf server      [--requests 64] [--latency 1.0] [--rounds 2] [--old COMMIT]
    .venv/bin/python -m benchmarks.perf llama       [--builds portable,native,native-no-amx] [--threads 1,2]
    .venv/bin/python -m benchmarks.perf memory      [--mb 50] [--types txt,md,jsonl,html,pdf,docx]
    .venv/bin/python -m benchmarks.perf ingest      [--manual django] [--rounds 1]

Run from the repository's root. Add ``--save`` to write the command line and its output to
``benchmarks/results/perf-<subcommand>.txt``. What each measures, and how, is in the docstring of its module
(``benchmarks/perf/<subcommand>.py``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import concurrency, indexing, ingest, latency, llama, memory, overhead, scale, server, sparse, startup
from .common import DEFAULT_DATASET, RESULTS, ROOT, Report

__all__ = ["main"]

COMMANDS: dict[str, Callable[[argparse.Namespace, Report], None]] = {
    "overhead": overhead.run,
    "indexing": indexing.run,
    "sparse": sparse.run,
    "concurrency": concurrency.run,
    "startup": startup.run,
    "latency": latency.run,
    "scale": scale.run,
    "server": server.run,
    "llama": llama.run,
    "memory": memory.run,
    "ingest": ingest.run,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("overhead", help="graph vs the same operator functions called directly")
    p.add_argument("--queries", type=int, default=300, help="SciFact queries (dev, then train); default 300")
    p.add_argument("--retrieve", default="hybrid,bm25", help="retrieval operators to compare (comma-separated)")
    p = sub.add_parser("indexing", help="index_paths vs raw encode() on the SciFact corpus, or fp32 vs int8")
    p.add_argument("--limit", type=int, help="only the first N documents (default: all)")
    p.add_argument(
        "--compare",
        choices=("backends", "precisions"),
        default="backends",
        help="backends: onnx and torch against raw encode() on --dataset; precisions: the ONNX export in "
        "fp32 and int8 on each of --datasets",
    )
    p.add_argument(
        "--datasets",
        default="scifact,hotpotqa",
        help="with --compare precisions: corpora (names beside --dataset's folder, or paths)",
    )
    p = sub.add_parser("sparse", help="BM25 at 100k / 1M chunks: the kit's segments vs bm25s (and rank_bm25)")
    p.add_argument("--sizes", default="100000,1000000", help="corpus sizes in chunks (comma-separated)")
    p.add_argument("--queries", type=int, help="SciFact queries (default: all of dev + train)")
    p.add_argument(
        "--slow-queries",
        type=int,
        default=20,
        help="rank_bm25 runs 5x this many queries (at sizes up to 200k only); default 20",
    )
    p.add_argument("--scratch", type=Path, help="folder for the kit's segments (default: the system's temp folder)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus")
    p = sub.add_parser("concurrency", help="serial vs batch/abatch/eval --concurrency against slow endpoints")
    p.add_argument("--queries", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--latency", type=float, default=1.0, help="seconds per call of the stub endpoint")
    p.add_argument("--slots", type=int, default=4, help="llama-server parallel slots (and concurrency)")
    p.add_argument("--local-queries", type=int, default=16, help="queries against the local llama-server")
    p = sub.add_parser("startup", help="modular-rag run on the demo: total and split")
    p.add_argument("--runs", type=int, default=3)
    p = sub.add_parser("latency", help="warm answers to unseen questions with and without stored sentence vectors")
    p.add_argument("--rounds", type=int, default=3, help="times the 24 demo questions are asked, each time as new")
    p.add_argument("--cold-runs", type=int, default=3, help="runs of `modular-rag run` from a cold start")
    p.add_argument("--index-limit", type=int, default=500, help="SciFact abstracts indexed with and without")
    p.add_argument("--scratch", type=Path, help="folder for the indexes made (default: the system's temp folder)")
    p.add_argument("--parts", default="warm,cold,indexing,answers", help="what to measure (default: all four)")
    scale.add_arguments(sub.add_parser("scale", help="the index at 100k / 1M chunks: workers, latency, changes"))
    server.add_arguments(sub.add_parser("server", help="concurrent requests through langgraph dev: async vs before"))
    llama.add_arguments(sub.add_parser("llama", help="the local model's tokens/s with each llama.cpp build"))
    memory.add_arguments(sub.add_parser("memory", help="peak memory of indexing a 50 MB file of each type"))
    ingest.add_arguments(
        sub.add_parser("ingest", help="a real HTML manual: the kit's template vs LangChain's pipeline")
    )
    for p in sub.choices.values():
        p.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="the SciFact folder (BEIR format)")
        p.add_argument("--save", action="store_true", help="also write benchmarks/results/perf-<command>.txt")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    out = Report()
    COMMANDS[args.command](args, out)
    if args.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        file = RESULTS / f"perf-{out.name or args.command}.txt"
        command = "$ .venv/bin/python -m benchmarks.perf " + " ".join(shlex.quote(a) for a in argv)
        file.write_text(command + "\n" + "\n".join(out.lines) + "\n", encoding="utf-8")
        print(f"wrote {file.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
