"""Does a test set made from a manual alone rank flows by their answers as the manual's real questions do?

    .venv/bin/python benchmarks/manual_testset.py [--manuals git,django] [--configs default,default+dense,...]
                                                  [--size 200] [--save]

For each manual (``benchmarks/manuals/``: git-doc's HTML pages, Django's Sphinx reference), ``modular-rag testset``
with its defaults makes a set from the manual's folder alone (its LLM-free makers; on a manual the
``manual_question`` maker takes the share of passages that define an option or a setting), and ``recommend`` with
``--max-llm-calls 0`` scores every candidate flow on the set's dev questions by ``right`` (the gold value in the
answer with a citation on a gold passage; retrieval-only questions are not judged), each over the set's corpus
chunked as the flow chunks it. The same flows answer the manual's written questions (206 written before any tuning,
``benchmarks/manuals.py``), scored by the share judged right (answerable ones right, unanswerable ones refused).

Printed per manual: each flow's figure on both, Kendall tau-b between the two rankings, whether the top flow is the
same, and the regret of the set's top flow on the written questions. The candidates (:data:`CONFIGS`) are the
default linear template and its LLM-free variants (``benchmarks/manuals.py``'s ``VARIANTS``: link hop, dense only,
BM25 only, a narrow and a wide evidence pack; ``default+small``, 400-character chunks, is left out by default: it
indexes each manual and each set again). Two sets are made of each manual (``--sets``): ``default`` (every default
maker: the manual's questions beside inverse-cloze and wh questions; ``right`` judges those with an answer) and
``manual_question`` (the manual's questions alone). ``--save`` writes
``benchmarks/results/manual-testset.txt``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "manuals"))

from common import main as common_main  # noqa: E402

CONFIGS = (
    "default",
    "default+multihop",
    "default+dense",
    "default+bm25",
    "default+narrow",
    "default+wide",
)
"""The candidate flows: the linear template as shipped and its LLM-free variants."""


def tau(a: dict[str, float], b: dict[str, float]) -> float:
    """Kendall tau-b between the flows' rankings by ``a`` and by ``b``."""
    from scipy.stats import kendalltau

    names = sorted(a)
    return float(kendalltau([a[n] for n in names], [b[n] for n in names]).statistic)


def written(manual: str, names: list[str], scratch: Path) -> dict[str, float]:
    """Each flow's share judged right on the manual's written questions."""
    from manuals import answer, config_of, index_manual, load_questions, right_share

    questions = load_questions(manual)
    out = {}
    for name in names:
        config = config_of(name, scratch)
        index_manual(manual, config, scratch, reindex=False)
        out[name] = right_share(answer(config, questions))
    return out


def synthetic(
    manual: str, names: list[str], scratch: Path, size: int, makers: str
) -> tuple[dict[str, float], str, Any]:
    """Each flow's ``right`` on a test set made from the manual alone (``makers``: ``default``, or one maker's name),
    the set's summary, and the recommendation."""
    from fetch import manual_path
    from manuals import config_of

    from modular_rag.config import load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.recommend import recommend
    from modular_rag.eval.testset import make_testset

    folder = scratch / f"testset-{manual}-{makers}-{size}"
    make_testset([manual_path(manual)], folder, size=size, makers=None if makers == "default" else [makers])
    dataset = load_beir(folder)
    candidates = []
    for name in names:
        config = {k: v for k, v in config_of(name, scratch).items() if not k.startswith("_")}
        candidates.append((name, load_config(config)))
    rec = recommend(dataset, candidates, quality="right", max_llm_calls=0, progress=False)
    scores = {c.name: float(c.quality or 0.0) for c in rec.candidates}
    kinds = Counter(str(q.extra.get("kind")) for q in dataset.queries if q.answers)
    summary = f"{len(dataset.queries)} dev questions, judged by their answer: " + ", ".join(
        f"{k} {v}" for k, v in kinds.most_common()
    )
    return scores, summary, rec


def run(args: argparse.Namespace) -> int:
    """Make each manual's set, score the flows on it and on the written questions, print the comparison."""
    from modular_rag.tables import format_table

    scratch = Path(args.scratch)
    names = [c for c in args.configs.split(",") if c]
    for manual in [m for m in args.manuals.split(",") if m]:
        real = written(manual, names, scratch)
        for makers in [m for m in args.sets.split(",") if m]:
            made, summary, rec = synthetic(manual, names, scratch, args.size, makers)
            rows = [[n, f"{made[n]:.3f}", f"{real[n]:.3f}"] for n in names]
            print(f"\n{manual}, set '{makers}': {summary}")
            print(format_table(["config", "right on the test set", "right on the written questions"], rows))
            top_set, top_real = max(names, key=lambda n: made[n]), max(names, key=lambda n: real[n])
            print(
                f"Kendall tau-b {tau(made, real):.2f}; top flow on the set {top_set}, on the written questions "
                f"{top_real}; regret of the set's pick on the written questions {real[top_real] - real[top_set]:.3f}; "
                f"recommend picks {rec.best.name if rec.best else 'none'}"
            )
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manuals", default="git,django")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--sets", default="default,manual_question", help="default and/or a maker's name")
    parser.add_argument("--size", type=int, default=200, help="questions in each test set (train and dev)")
    parser.add_argument("--scratch", default=str(ROOT / ".modular_rag" / "manuals"), help="indexes and sets go here")


if __name__ == "__main__":
    raise SystemExit(common_main("manual_testset.py", __doc__, run, _arguments, "manual-testset.txt"))
