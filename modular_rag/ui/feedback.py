"""What people say about answers, kept beside the index, and written out as a labelled test set.

Feedback lives in ``feedback.sqlite`` in the index's folder: one row per judgement with the question, the config
(name and content hash), the run, the index (folder, collection, version), the answer and its citations, the verdict
(``right`` or ``wrong``) and, when the person knows them, the right answer and the right passage (a chunk id).
:func:`export_feedback` writes the judged questions as a BEIR folder (``corpus.jsonl``: the index's chunks;
``queries.jsonl`` with ``answers``; ``qrels.tsv``) that ``eval``, ``recommend`` and ``tune`` read like any other
(``modular-rag testset --from-feedback FEEDBACK.sqlite --out DIR``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from modular_rag.errors import ConfigError, DatasetError

__all__ = ["FEEDBACK_FILE", "Feedback", "FeedbackStore", "ExportSummary", "export_feedback"]

FEEDBACK_FILE = "feedback.sqlite"
"""The store's file name, in the index's folder."""

Verdict = Literal["right", "wrong"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    question TEXT NOT NULL,
    config TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    index_path TEXT NOT NULL,
    collection TEXT NOT NULL,
    index_version TEXT NOT NULL,
    answer TEXT NOT NULL,
    cited TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('right', 'wrong')),
    right_answer TEXT NOT NULL DEFAULT '',
    right_passage TEXT NOT NULL DEFAULT ''
)
"""


@dataclass(frozen=True)
class Feedback:
    """One judgement of one run's answer."""

    question: str
    config: str
    config_hash: str
    run_id: str
    index_path: str
    collection: str
    index_version: str
    answer: str
    cited: tuple[str, ...]
    """The chunk ids the answer cited."""
    verdict: Verdict
    right_answer: str = ""
    right_passage: str = ""
    """A chunk id of the index."""
    id: int = 0
    created: float = 0.0


class FeedbackStore:
    """The feedback of one index folder (``<folder>/feedback.sqlite``, created on the first write)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30)
        db.execute(_SCHEMA)
        return db

    def add(self, item: Feedback) -> int:
        """Store a judgement; returns its id.

        Raises:
            ConfigError: If the verdict is neither ``right`` nor ``wrong``.
        """
        if item.verdict not in ("right", "wrong"):
            raise ConfigError("verdict", f"{item.verdict!r}: say right or wrong")
        with closing(self._connect()) as db, db:
            cursor = db.execute(
                "INSERT INTO feedback (created, question, config, config_hash, run_id, index_path, collection, "
                "index_version, answer, cited, verdict, right_answer, right_passage) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    item.created or time.time(),
                    item.question,
                    item.config,
                    item.config_hash,
                    item.run_id,
                    item.index_path,
                    item.collection,
                    item.index_version,
                    item.answer,
                    json.dumps(list(item.cited)),
                    item.verdict,
                    item.right_answer.strip(),
                    item.right_passage.strip(),
                ),
            )
            return int(cursor.lastrowid or 0)

    def items(self) -> list[Feedback]:
        """Every judgement, oldest first (none when the file does not exist yet)."""
        if not self.path.is_file():
            return []
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT question, config, config_hash, run_id, index_path, collection, index_version, answer, cited, "
                "verdict, right_answer, right_passage, id, created FROM feedback ORDER BY id"
            ).fetchall()
        fields = ("question", "config", "config_hash", "run_id", "index_path", "collection", "index_version", "answer")
        return [
            Feedback(
                **dict(zip(fields, map(str, r[:8]), strict=True)),
                cited=tuple(json.loads(r[8])),
                verdict=r[9],
                right_answer=r[10],
                right_passage=r[11],
                id=int(r[12]),
                created=float(r[13]),
            )
            for r in rows
        ]


@dataclass
class ExportSummary:
    """What an export wrote and what it left out."""

    out: Path
    questions: int
    passages: int
    skipped: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The summary as the command prints it."""
        out = [
            f"wrote {self.out}: {self.questions} questions (queries.jsonl, qrels.tsv), {self.passages} passages "
            "(corpus.jsonl)"
        ]
        out += [f"  left out: {why}" for why in self.skipped]
        out.append(f"next: modular-rag eval --dataset {self.out} --config FLOW.yaml")
        return out


def _labelled(items: Sequence[Feedback]) -> Iterator[tuple[Feedback, list[str], list[str], str]]:
    """Each question's latest judgement with its gold answers and passages, and the reason it cannot be labelled
    (empty when it can)."""
    from modular_rag.answers import strip_citations

    latest: dict[tuple[str, str, str], Feedback] = {}
    for item in items:
        latest[(" ".join(item.question.split()).lower(), item.index_path, item.collection)] = item
    for item in latest.values():
        if item.verdict == "right":
            answers = [item.right_answer or strip_citations(item.answer)]
            gold = [item.right_passage] if item.right_passage else list(item.cited)
        else:
            answers = [item.right_answer] if item.right_answer else []
            gold = [item.right_passage] if item.right_passage else []
        if not answers and not gold:
            yield item, [], [], f"{item.question!r}: judged wrong with neither the right answer nor the right passage"
        else:
            yield item, [a for a in answers if a], gold, ""


def export_feedback(
    source: str | os.PathLike[str], out: str | os.PathLike[str], *, overwrite: bool = False
) -> ExportSummary:
    """Write the feedback as a labelled BEIR folder: each question's latest judgement (a right answer's text and
    cited passages, or the right answer and passage a person gave for a wrong one), and every chunk of the judged
    indexes as the corpus (the chunk id as the passage id, so gold passages are what the index holds).

    Args:
        source: A ``feedback.sqlite`` file (or the index folder holding it).
        out: The folder to write (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``, ``feedback.json``).
        overwrite: Replace the files of a folder that already holds a dataset.

    Raises:
        DatasetError: If there is no feedback, none can be labelled, the index is gone, or ``out`` holds a dataset
            and ``overwrite`` is off.
    """
    from modular_rag.catalog import Catalog

    path = Path(source)
    if path.is_dir():
        path = path / FEEDBACK_FILE
    if not path.is_file():
        raise DatasetError(f"{path} does not exist; feedback is stored as {FEEDBACK_FILE} in the index's folder")
    folder = Path(out)
    if (folder / "queries.jsonl").exists() and not overwrite:
        raise DatasetError(f"{folder} already holds a dataset (queries.jsonl); choose another folder or overwrite it")
    labelled: list[tuple[Feedback, list[str], list[str]]] = []
    skipped: list[str] = []
    for item, answers, gold, why in _labelled(FeedbackStore(path).items()):
        if why:
            skipped.append(why)
        else:
            labelled.append((item, answers, gold))
    if not labelled:
        raise DatasetError(
            f"{path}: no feedback to export"
            + (f" ({len(skipped)} judged wrong without the right answer or passage)" if skipped else "")
        )
    corpus: dict[str, dict[str, Any]] = {}
    for index_path, collection in dict.fromkeys((i.index_path, i.collection) for i, _, _ in labelled):
        catalog_file = Path(index_path) / f"{collection}.kit" / "catalog.sqlite"
        if not catalog_file.is_file():
            raise DatasetError(f"{catalog_file} is missing: the index the feedback was given on is gone")
        for batch in Catalog(catalog_file).scan():
            for chunk in batch:
                title = str(chunk.metadata.get("title") or "")
                text = chunk.text[len(title) + 1 :] if title and chunk.text.startswith(title + "\n") else chunk.text
                corpus.setdefault(chunk.id, {"id": chunk.id, "title": title, "text": text})
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for passage in corpus.values():
            fh.write(json.dumps(passage, ensure_ascii=False) + "\n")
    with (
        open(folder / "queries.jsonl", "w", encoding="utf-8") as queries,
        open(folder / "qrels.tsv", "w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for item, answers, gold in labelled:
            qid = f"feedback-{item.id:05d}"
            missing = [g for g in gold if g not in corpus]
            if missing:
                skipped.append(f"{item.question!r}: passage {missing[0]} is no longer in the index")
                continue
            row: dict[str, Any] = {"_id": qid, "text": item.question, "verdict": item.verdict}
            if answers:
                row["answers"] = answers
            row.update(config=item.config, config_hash=item.config_hash, run_id=item.run_id)
            row.update(index_version=item.index_version)
            queries.write(json.dumps(row, ensure_ascii=False) + "\n")
            for doc in gold:
                qrels.write(f"{qid}\t{doc}\t1\n")
    written = len(labelled) - sum(1 for s in skipped if "no longer in the index" in s)
    (folder / "feedback.json").write_text(
        json.dumps({"source": str(path.resolve()), "questions": written, "skipped": skipped}, indent=2) + "\n",
        encoding="utf-8",
    )
    return ExportSummary(folder, written, len(corpus), skipped)
