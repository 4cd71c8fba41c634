"""Sentence splitters side by side: the kit's regex against the libraries pysbd, syntok and sentencex, as the one
splitter every sentence reader of the kit uses (:func:`modular_rag.text.split_sentences`: the evidence scorer,
the extractive answer, compression, the attribution check, the sentences stored at indexing).

    .venv/bin/python benchmarks/splitters.py [--split tune|report] [--splitters regex,pysbd,syntok,sentencex]
        [--parts cases,speed,latency,answers] [--rounds 3] [--save]

The libraries are comparisons, not dependencies of the kit: ``pip install pysbd syntok sentencex``. Four parts:

* **Cases**: written sentences with abbreviations, initials, decimals and figure references, and what each splitter
  makes of them (the right split is written beside each case).
* **Speed**: CPU ms per chunk to split every chunk of the SQuAD and NQ-open corpora (what indexing pays per chunk,
  and a question per chunk it reads), and the sentences per chunk.
* **Latency**: the warm-process measurement of ``python -m benchmarks.perf latency --parts warm`` (the default
  template over the demo index, the 24 demo questions x ``--rounds``, the query cache cleared before every call, the
  sentence cache at the start of each round) with every splitter side by side in one process: each splitter has
  its own demo index, built while it splits (so the sentence vectors stored there are its sentences), and each
  question is asked once per splitter, the splitters' order rotating from question to question. Targets: p50
  <= 25 ms, max <= 60 ms.
* **Answers**: the default template (``default``) and the same after the ``link_hop`` hop (``default+multihop``),
  configs of ``benchmarks/answers.py``, on the SQuAD and NQ-open ``--split`` of its ``bench holdout`` (``tune``:
  100 and 150 questions, where the splitter is chosen; ``report``: the 251 and 200 that command scores). Each
  splitter is put in place of the paragraph splitter inside ``split_sentences`` for its rows; the index's stored
  sentence vectors are not read (``use_stored`` off), so every splitter's sentences are embedded the same way, at
  query time, with the in-process sentence cache emptied before each splitter. ``answers changed`` counts the
  answers whose text differs from the first splitter's.

``--save`` writes the output to ``benchmarks/results/splitters-<split>.txt`` (``splitters-<parts>.txt`` without
the answers part).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import run_and_keep  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CASES: list[tuple[str, list[str]]] = [
    ("Dr. Smith went home. He slept.", ["Dr. Smith went home.", "He slept."]),
    ("Use a solvent, e.g. acetone. Then rinse.", ["Use a solvent, e.g. acetone.", "Then rinse."]),
    ("U.S. policy changed in 1990. It was debated.", ["U.S. policy changed in 1990.", "It was debated."]),
    ("The U.S. Army was formed. 1775 was the year.", ["The U.S. Army was formed.", "1775 was the year."]),
    ("The dose is 3.5 mg daily. Take it with food.", ["The dose is 3.5 mg daily.", "Take it with food."]),
    ("See Fig. 2 for details. The curve rises.", ["See Fig. 2 for details.", "The curve rises."]),
    ("He was born in St. Louis. He moved.", ["He was born in St. Louis.", "He moved."]),
    ("J. R. R. Tolkien wrote it. It sold well.", ["J. R. R. Tolkien wrote it.", "It sold well."]),
    ("It costs $3.50. That is cheap!", ["It costs $3.50.", "That is cheap!"]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("Is it on? Yes. It is.", ["Is it on?", "Yes.", "It is."]),
    ("The E07 code means a lost signal. Check the magnet.", ["The E07 code means a lost signal.", "Check the magnet."]),
]
"""Written cases and their right split."""


def _regex() -> Callable[[str], list[str]]:
    from modular_rag.text import _SENTENCE_END

    return _SENTENCE_END.split


def _missing(exc: ImportError) -> SystemExit:
    return SystemExit(f"{exc.name} is not installed: pip install pysbd syntok sentencex (the compared libraries)")


def _pysbd() -> Callable[[str], list[str]]:
    try:
        import pysbd
    except ImportError as exc:
        raise _missing(exc) from exc

    segmenter = pysbd.Segmenter(language="en", clean=False)
    return segmenter.segment


def _syntok() -> Callable[[str], list[str]]:
    try:
        from syntok.segmenter import analyze
    except ImportError as exc:
        raise _missing(exc) from exc

    def split(block: str) -> list[str]:
        return [block[s[0].offset : s[-1].offset + len(s[-1].value)] for p in analyze(block) for s in p]

    return split


def _sentencex() -> Callable[[str], list[str]]:
    try:
        import sentencex
    except ImportError as exc:
        raise _missing(exc) from exc

    return lambda block: list(sentencex.segment("en", block))


SPLITTERS: dict[str, Callable[[], Callable[[str], list[str]]]] = {
    "regex": _regex,
    "pysbd": _pysbd,
    "syntok": _syntok,
    "sentencex": _sentencex,
}
"""Each candidate: a factory of its paragraph splitter (a paragraph with single spaces -> its sentences)."""


@contextmanager
def splitting_with(block_splitter: Callable[[str], list[str]]) -> Iterator[None]:
    """Make ``split_sentences`` (and so every sentence reader of the kit) split paragraphs with ``block_splitter``."""
    from modular_rag import text

    held = text._split_block
    text._split_block = block_splitter
    try:
        yield
    finally:
        text._split_block = held


def _cases(names: list[str], splitters: dict[str, Callable[[str], list[str]]]) -> None:
    from modular_rag.tables import format_table
    from modular_rag.text import split_sentences

    rows, right = [], dict.fromkeys(names, 0)
    for case, expected in CASES:
        row = [case]
        for name in names:
            with splitting_with(splitters[name]):
                got = split_sentences(case)
            right[name] += got == expected
            row.append("ok" if got == expected else " | ".join(got))
        rows.append(row)
    rows.append(["right", *[f"{right[n]}/{len(CASES)}" for n in names]])
    print(format_table(["case", *names], rows))


def _speed(names: list[str], splitters: dict[str, Callable[[str], list[str]]], datasets: dict[str, Any]) -> None:
    import json

    from modular_rag.tables import format_table
    from modular_rag.text import split_sentences

    rows = []
    for set_name, dataset in datasets.items():
        texts = [
            json.loads(line)["text"]
            for path in dataset.corpus_paths
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        for name in names:
            with splitting_with(splitters[name]):
                t0 = time.process_time()
                found = [split_sentences(t) for t in texts]
                ms = (time.process_time() - t0) * 1000 / len(texts)
            rows.append(
                [
                    set_name,
                    name,
                    len(texts),
                    round(sum(map(len, texts)) / len(texts)),
                    f"{ms:.3f}",
                    f"{sum(map(len, found)) / len(texts):.2f}",
                ]
            )
    print(format_table(["corpus", "splitter", "chunks", "chars/chunk", "CPU ms/chunk", "sentences/chunk"], rows))


def _latency(names: list[str], splitters: dict[str, Callable[[str], list[str]]], rounds: int) -> None:
    import shutil
    import statistics
    import tempfile

    from benchmarks.perf.latency import WARM_UP, _default_config, _pct, _questions
    from modular_rag import demo_corpus_path
    from modular_rag.attribution import scoring as attribution
    from modular_rag.builder import build_flow
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers
    from modular_rag.tables import format_table

    scratch = Path(tempfile.mkdtemp(prefix="splitters-"))
    try:
        flows, encoders = {}, {}
        for name in names:
            config = _default_config(scratch / name)
            env = Providers(config.providers)
            with splitting_with(splitters[name]):
                index_paths([demo_corpus_path()], env, progress=False)
                flows[name] = build_flow(config, providers=env)
                flows[name].invoke({"query": WARM_UP})
            encoders[name] = env.encoder
        questions = _questions()
        ms: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            attribution._SENTENCE_VECTORS.clear()
            for i, question in enumerate(questions):
                turn = (i + r) % len(names)
                for name in names[turn:] + names[:turn]:
                    encoders[name].clear_cache()
                    with splitting_with(splitters[name]):
                        t0, c0 = time.perf_counter(), time.process_time()
                        flows[name].invoke({"query": question})
                        ms[name].append((time.perf_counter() - t0) * 1000)
                        cpu[name].append((time.process_time() - c0) * 1000)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [
        [
            n,
            len(ms[n]),
            f"{_pct(ms[n], 50):.1f}",
            f"{_pct(ms[n], 95):.1f}",
            f"{max(ms[n]):.1f}",
            f"{_pct(cpu[n], 50):.1f}",
            f"{statistics.mean(cpu[n]):.1f}",
            "yes" if _pct(ms[n], 50) <= 25 and max(ms[n]) <= 60 else "NO",
        ]
        for n in names
    ]
    print(
        format_table(
            [
                "splitter",
                "questions",
                "p50 ms",
                "p95 ms",
                "max ms",
                "CPU ms p50",
                "CPU ms mean",
                "within p50 25 / max 60",
            ],
            rows,
        )
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min) at the end: {load} on {os.cpu_count()} cores")


def _answers(names: list[str], splitters: dict[str, Callable[[str], list[str]]], datasets: dict[str, Any]) -> None:
    from answers import _configs

    from modular_rag.attribution import scoring as attribution
    from modular_rag.config import OperatorSpec
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    configs = {k: v for k, v in _configs().items() if k in ("default", "default+multihop")}
    rows = []
    for set_name, dataset in datasets.items():
        env = dataset_providers(dataset, chunker=OperatorSpec(name=dataset.default_chunker), progress=False)
        env.index.sentences.use_stored = False
        for cname, data in configs.items():
            first: list[str] = []
            for name in names:
                attribution._SENTENCE_VECTORS.clear()
                with splitting_with(splitters[name]):
                    result = evaluate_flow(data, dataset, env, name=cname)
                s = result.summary()
                texts = [r.answer for r in result.records]
                changed = sum(a != b for a, b in zip(first, texts, strict=True)) if first else 0
                first = first or texts
                rows.append(
                    [
                        set_name,
                        cname,
                        name,
                        f"{s['queries']:.0f}",
                        f"{s['contains']:.3f}",
                        f"{s['contains_backed']:.3f}",
                        f"{s['em']:.3f}",
                        f"{s['f1']:.3f}",
                        f"{s['supported']:.3f}",
                        f"{s['refused']:.3f}",
                        changed,
                        sum(r.error is not None for r in result.records),
                        f"{s['ms']:.0f}",
                    ]
                )
                print("  " + " ".join(str(x) for x in rows[-1]), file=sys.stderr, flush=True)
    print(
        format_table(
            [
                "set",
                "config",
                "splitter",
                "questions",
                "contains",
                "contains+supported citation",
                "EM",
                "F1",
                "supported",
                "refused",
                "answers changed",
                "errors",
                "ms/q",
            ],
            rows,
        )
    )


def run(args: argparse.Namespace) -> int:
    from answers import SPLITS

    from modular_rag.eval.datasets import load_beir

    names = args.splitters.split(",")
    unknown = [n for n in names if n not in SPLITTERS]
    if unknown:
        raise SystemExit(f"--splitters: unknown {', '.join(unknown)}; splitters: {', '.join(SPLITTERS)}")
    splitters = {n: SPLITTERS[n]() for n in names}
    datasets = {}
    for set_name, (_, _, limit) in SPLITS.items():
        home = ROOT / ".modular_rag" / "datasets" / f"{set_name}-answers"
        if not (home / f"{args.split}_queries.jsonl").exists():
            raise SystemExit(f"no {args.split} split at {home}: run benchmarks/answers.py once to make it")
        dataset = load_beir(home, split=args.split)
        datasets[set_name] = dataset.limited(limit) if args.split == "report" else dataset
    parts = _parts(args.parts)
    if "cases" in parts:
        print("cases: what each splitter makes of written sentences ('ok': the right split)")
        _cases(names, splitters)
    if "speed" in parts:
        print("\nspeed: split every chunk of the corpus (split_sentences, CPU time of this process)")
        _speed(names, splitters, datasets)
    if "latency" in parts:
        print(
            f"\nwarm latency: the default template over the demo index, 24 demo questions x {args.rounds} rounds, "
            "each asked once per splitter (its own index), the order rotating"
        )
        _latency(names, splitters, args.rounds)
    if "answers" in parts:
        print(f"\nanswers on the {args.split} splits (sentence vectors embedded at query time for every splitter)")
        _answers(names, splitters, datasets)
    return 0


PARTS = ("cases", "speed", "latency", "answers")


def _parts(text: str) -> list[str]:
    parts = text.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise SystemExit(f"--parts: unknown {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--split", choices=("tune", "report"), default="tune", help="the questions scored (tune)")
    parser.add_argument("--splitters", default=",".join(SPLITTERS), help="splitters compared, the reference first")
    parser.add_argument("--parts", default=",".join(PARTS), help="what to measure (all)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the demo questions for the latency (3)")
    parser.add_argument("--save", action="store_true", help="write to results/splitters-<split>.txt")
    args = parser.parse_args()
    parts = _parts(args.parts)
    keep = ROOT / "benchmarks" / "results" / f"splitters-{args.split if 'answers' in parts else '-'.join(parts)}.txt"
    return run_and_keep("splitters.py", run, args, keep if args.save else None)


if __name__ == "__main__":
    raise SystemExit(main())
