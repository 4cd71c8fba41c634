"""What the benchmark commands share: running one while its output is printed and kept for ``--save``."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_and_keep(script: str, run: Callable[[Any], int], args: Any, save_to: Path | None) -> int:
    """Run ``run(args)`` printing as it goes, its output headed by its command line; with ``save_to``, also write
    that output there."""
    buffer = io.StringIO()

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            sys.__stdout__.write(text)
            buffer.write(text)
            return len(text)

    with redirect_stdout(Tee()):  # type: ignore[type-var]
        print(f"$ .venv/bin/python benchmarks/{script} " + " ".join(sys.argv[1:]))
        code = run(args)
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        save_to.write_text(buffer.getvalue(), encoding="utf-8")
    return code


def main(
    script: str,
    doc: str,
    run: Callable[[Any], int],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    result: str,
) -> int:
    """A benchmark command's entry point: ``--root`` (the shared datasets), the command's own arguments, ``--save``
    (its output to ``benchmarks/results/<result>``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--root", default=str(ROOT.parent / "shared" / "datasets"), help="the shared datasets")
    add_arguments(parser)
    parser.add_argument("--save", action="store_true", help=f"write the output to benchmarks/results/{result}")
    args = parser.parse_args()
    keep = ROOT / "benchmarks" / "results" / result
    return run_and_keep(script, run, args, keep if args.save else None)
