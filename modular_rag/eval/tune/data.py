"""The questions ``tune`` may read, split once and recorded: fit (training stages), val (the search objective) and
report (read once, at the end, for the figures it reports).

A dataset with a training split (SciFact's ``train_*`` files) is split into fit/val; its dev split is the report
split. A dataset without one (HotpotQA, NQ-open, a client's questions) first holds out a report share of its
questions, then splits the rest into fit/val. Every draw is seeded; ``split.json`` records the seed, the shares
and each split's question ids, and a resumed run reuses the files instead of drawing again.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modular_rag.errors import DatasetError
from modular_rag.eval.datasets import BeirDataset, Query, load_beir, load_demo, load_documents, write_split

__all__ = ["TuneData", "prepare_data", "read_source", "subset"]


@dataclass(frozen=True)
class TuneData:
    """The splits of a tuning run and where they come from."""

    fit: BeirDataset
    val: BeirDataset
    report: BeirDataset | None
    folder: Path
    record: dict[str, Any]


def read_source(spec: str, questions: str | None = None) -> tuple[BeirDataset, BeirDataset | None]:
    """The questions to tune on and the split to report on (``None`` when the dataset must hold one out itself).

    ``spec`` is ``demo``, a BEIR folder (``corpus.jsonl``, ``queries.jsonl``/``qrels.tsv``, optional
    ``train_queries.jsonl``/``train_qrels.tsv``), or a folder of documents (``corpus/``) with ``questions.jsonl``.

    Raises:
        DatasetError: If the folder is none of these (the message says what each needs).
    """
    if spec == "demo":
        return load_demo(), None
    root = Path(spec)
    if questions is not None or (root / "questions.jsonl").is_file():
        return load_documents(root, questions), None
    if not root.is_dir():
        raise DatasetError(
            f"--dataset {spec}: not a folder (a BEIR folder, or documents in corpus/ with questions.jsonl)"
        )
    if (root / "train_queries.jsonl").is_file():
        report = load_beir(root, split="dev") if (root / "queries.jsonl").is_file() else None
        return load_beir(root, split="train"), report
    return load_beir(root, split="dev"), None


def subset(dataset: BeirDataset, queries: list[Query]) -> BeirDataset:
    """The dataset restricted to these queries (and their judgements)."""
    keep = {q.id for q in queries}
    qrels = {k: v for k, v in dataset.qrels.items() if k in keep}
    return BeirDataset(dataset.root, dataset.split, list(queries), qrels)


def _link_corpus(source: BeirDataset, folder: Path) -> None:
    for name in ("corpus.jsonl", "corpus"):
        link = folder / name
        if link.is_symlink() or link.is_file():
            link.unlink()
    target = source.corpus_paths[0].resolve()
    (folder / target.name if target.name in ("corpus.jsonl", "corpus") else folder / "corpus").symlink_to(target)


def prepare_data(
    spec: str,
    out: Path,
    *,
    seed: int = 0,
    val_fraction: float = 0.25,
    report_fraction: float = 0.3,
    questions: str | None = None,
) -> TuneData:
    """Split the dataset's tuning questions into fit/val (and hold out a report split when it has no dev/train
    pair), writing the splits to ``out/data`` once; a second call with the same arguments reads them back.

    Raises:
        DatasetError: If the dataset cannot be read, is too small to split, or ``out/data`` holds a split made
            with other arguments.
    """
    folder = out / "data"
    wanted = {"dataset": str(spec), "seed": seed, "val_fraction": val_fraction, "report_fraction": report_fraction}
    record_file = folder / "split.json"
    tune_on, report = read_source(spec, questions)
    if record_file.exists():
        record = json.loads(record_file.read_text(encoding="utf-8"))
        mismatch = {k: (record.get(k), v) for k, v in wanted.items() if record.get(k) != v}
        if mismatch:
            raise DatasetError(f"{folder} holds a split made with other settings ({mismatch}); use another --out")
    else:
        if not 0.0 < val_fraction < 1.0 or not 0.0 <= report_fraction < 1.0:
            raise DatasetError(f"split shares must be in (0, 1): val {val_fraction}, report {report_fraction}")
        pool = sorted(tune_on.queries, key=lambda q: q.id)
        rng = random.Random(seed)
        rng.shuffle(pool)
        held: list[Query] = []
        if report is None and report_fraction > 0:
            cut = max(1, round(len(pool) * report_fraction))
            held, pool = pool[:cut], pool[cut:]
        if len(pool) < 4:
            raise DatasetError(f"{spec} leaves {len(pool)} questions to tune on; need at least 4")
        n_val = max(2, round(len(pool) * val_fraction))
        val, fit = pool[:n_val], pool[n_val:]
        folder.mkdir(parents=True, exist_ok=True)
        _link_corpus(tune_on, folder)
        write_split(folder, "fit", fit, tune_on.qrels)
        write_split(folder, "val", val, tune_on.qrels)  # in the seeded order: rung prefixes are random subsets
        if held:
            write_split(folder, "report", held, tune_on.qrels)
        record = {
            **wanted,
            "tuned_on": tune_on.split,
            "report_split": "held out" if held else ("dev" if report else None),
            "fit": [q.id for q in fit],
            "val": [q.id for q in val],
            "report": [q.id for q in held],
        }
        record_file.write_text(json.dumps(record, indent=1), encoding="utf-8")
    fit_ds, val_ds = load_beir(folder, split="fit"), load_beir(folder, split="val")
    order = {qid: i for i, qid in enumerate(record["val"])}
    val_ds = subset(val_ds, sorted(val_ds.queries, key=lambda q: order.get(q.id, len(order))))
    if record["report"]:
        report = load_beir(folder, split="report")
    return TuneData(fit_ds, val_ds, report, folder, record)
