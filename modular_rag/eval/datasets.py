"""BEIR-format datasets: ``corpus.jsonl``, ``queries.jsonl`` (optional ``answers``), ``qrels.tsv``.

A split other than the default reads ``<split>_queries.jsonl`` and ``<split>_qrels.tsv`` (SciFact's ``train``).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modular_rag.errors import DatasetError

__all__ = ["Query", "BeirDataset", "load_beir"]


@dataclass(frozen=True)
class Query:
    """An evaluation query: id, text, accepted answers (QA sets), and extra fields."""

    id: str
    text: str
    answers: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class BeirDataset:
    """A BEIR-format folder, read lazily except for queries and qrels."""

    root: Path
    split: str
    queries: list[Query]
    qrels: dict[str, dict[str, int]]

    @property
    def name(self) -> str:
        """The folder name."""
        return self.root.name

    @property
    def corpus_file(self) -> Path:
        """The corpus JSON-lines file."""
        return self.root / "corpus.jsonl"

    def corpus(self) -> Iterator[dict[str, Any]]:
        """Corpus rows ``{"id", "title", "text"}``.

        Raises:
            DatasetError: On a malformed row (with its line number).
        """
        with open(self.corpus_file, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{self.corpus_file}:{n}: not JSON ({exc.msg})") from None
                yield {"id": str(row.get("id", row.get("_id"))), "title": row.get("title", ""), "text": row["text"]}

    def limited(self, limit: int | None) -> BeirDataset:
        """The first ``limit`` queries (all when ``None``), with their qrels."""
        if limit is None or limit >= len(self.queries):
            return self
        queries = self.queries[:limit]
        keep = {q.id for q in queries}
        return BeirDataset(self.root, self.split, queries, {k: v for k, v in self.qrels.items() if k in keep})

    def fingerprint(self) -> str:
        """Size and mtime of the corpus file: changes when the corpus does (for index caching)."""
        st = os.stat(self.corpus_file)
        return f"{self.root.resolve()}:{st.st_size}:{int(st.st_mtime)}"


def _split_file(root: Path, split: str, stem: str, suffix: str) -> Path:
    return root / (f"{stem}{suffix}" if split in ("", "dev", "test") else f"{split}_{stem}{suffix}")


def load_beir(root: str | os.PathLike[str], *, split: str = "dev") -> BeirDataset:
    """Load a BEIR-format folder.

    Args:
        root: The folder.
        split: ``dev`` (``queries.jsonl``/``qrels.tsv``) or a prefix such as ``train``.

    Raises:
        DatasetError: If a file is missing or a row is malformed (the message names file and line).
    """
    folder = Path(root)
    queries_file = _split_file(folder, split, "queries", ".jsonl")
    qrels_file = _split_file(folder, split, "qrels", ".tsv")
    for needed in (folder / "corpus.jsonl", queries_file, qrels_file):
        if not needed.exists():
            raise DatasetError(f"{needed} is missing; a BEIR folder has corpus.jsonl, queries.jsonl and qrels.tsv")
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_file, encoding="utf-8", newline="") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if n == 1 and row and row[0] in ("query-id", "query_id", "qid"):
                continue
            if len(row) < 3:
                raise DatasetError(f"{qrels_file}:{n}: expected query-id, corpus-id, score")
            try:
                score = int(float(row[2]))
            except ValueError:
                raise DatasetError(f"{qrels_file}:{n}: score {row[2]!r} is not a number") from None
            qrels.setdefault(row[0], {})[row[1]] = score
    queries: list[Query] = []
    with open(queries_file, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                qid, text = str(row.get("id", row.get("_id"))), str(row["text"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise DatasetError(f"{queries_file}:{n}: expected {{\"id\", \"text\"}}") from None
            answers = tuple(str(a) for a in row.get("answers") or ())
            extra = {k: v for k, v in row.items() if k not in ("id", "_id", "text", "answers")}
            queries.append(Query(qid, text, answers, extra))
    queries = [q for q in queries if q.id in qrels] or queries
    return BeirDataset(folder, split, queries, qrels)
