"""BEIR-format datasets: ``corpus.jsonl``, ``queries.jsonl`` (optional ``answers``), ``qrels.tsv``.

A split other than the default reads ``<split>_queries.jsonl`` and ``<split>_qrels.tsv`` (SciFact's ``train``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modular_rag.errors import DatasetError

__all__ = [
    "Query",
    "BeirDataset",
    "load_beir",
    "load_demo",
    "load_documents",
    "holdout_split",
    "mixed_dataset",
    "write_split",
]


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

    @property
    def corpus_paths(self) -> list[Path]:
        """What to index: the corpus file, or the demo's folder of Markdown documents."""
        folder = self.root / "corpus"
        return [folder] if not self.corpus_file.exists() and folder.is_dir() else [self.corpus_file]

    @property
    def default_chunker(self) -> str:
        """``document`` for BEIR rows (one chunk per row), ``recursive`` for a folder of documents."""
        return "document" if self.corpus_paths == [self.corpus_file] else "recursive"

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

    def limited(self, limit: int | None, *, spread: bool = False) -> BeirDataset:
        """``limit`` queries (all when ``None``) with their qrels: the first ones, or with ``spread`` evenly spaced
        ones (deterministic; covers every part of a file ordered by kind)."""
        if limit is None or limit >= len(self.queries):
            return self
        if spread:
            step = len(self.queries) / limit
            queries = [self.queries[int(i * step)] for i in range(limit)]
        else:
            queries = self.queries[:limit]
        keep = {q.id for q in queries}
        return BeirDataset(self.root, self.split, queries, {k: v for k, v in self.qrels.items() if k in keep})

    def fingerprint(self) -> str:
        """A content hash of the corpus files: changes when the corpus does (for index caching).

        Contents, not modification times, so a corpus that is copied or re-mounted keeps its cached indexes, and a
        folder whose ``corpus.jsonl`` links to another folder's (a :func:`holdout_split`) shares them.
        """
        digest = hashlib.sha1()
        files = [p for path in self.corpus_paths for p in ([path] if path.is_file() else sorted(path.rglob("*")))]
        for file in files:
            if file.is_file():
                digest.update(file.name.encode() + b"\0")
                with open(file, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(block)
        return digest.hexdigest()


def load_demo() -> BeirDataset:
    """The bundled demo corpus and its 24 questions (answers and relevant documents), as a dataset."""
    from modular_rag import demo_corpus_path

    return load_documents(demo_corpus_path().parent)


def load_documents(root: str | os.PathLike[str], questions: str | os.PathLike[str] | None = None) -> BeirDataset:
    """A client's material as a dataset: a folder of documents (``root/corpus/``, any format ``modular-rag index``
    reads; a document's id is its file name without the extension) and a JSON-lines file of questions
    (default ``root/questions.jsonl``), one per line: ``{"id", "text", "relevant": [document ids], "answers":
    [accepted answers, optional]}``.

    Raises:
        DatasetError: If the folder or file is missing, or a line is not such a row (the message names the line).
    """
    folder = Path(root)
    file = Path(questions) if questions is not None else folder / "questions.jsonl"
    if not (folder / "corpus").is_dir():
        raise DatasetError(
            f"{folder / 'corpus'} is not a folder; put the documents there (any of .md, .txt, .pdf, "
            ".html, .docx, .jsonl)"
        )
    if not file.is_file():
        raise DatasetError(
            f"{file} is missing; it lists the questions, one JSON object per line: "
            '{"id", "text", "relevant": [document ids], "answers": [...]}'
        )
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    with open(file, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                qid, text, relevant = str(row["id"]), str(row["text"]), [str(d) for d in row["relevant"]]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise DatasetError(f'{file}:{n}: expected {{"id", "text", "relevant": [document ids]}}') from None
            extra = {k: v for k, v in row.items() if k not in ("id", "text", "answers", "relevant")}
            queries.append(Query(qid, text, tuple(str(a) for a in row.get("answers") or ()), extra))
            qrels[qid] = {doc: 1 for doc in relevant}
    return BeirDataset(folder, "dev", queries, qrels)


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
    has_corpus = (folder / "corpus.jsonl").exists() or (folder / "corpus").is_dir()
    for needed in (*(() if has_corpus else (folder / "corpus.jsonl",)), queries_file, qrels_file):
        if not needed.exists():
            raise DatasetError(
                f"{needed} is missing; a BEIR folder has corpus.jsonl, and for the {split or 'dev'} split "
                f"{queries_file.name} and {qrels_file.name}"
            )
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
                raise DatasetError(f'{queries_file}:{n}: expected {{"id", "text"}}') from None
            answers = tuple(str(a) for a in row.get("answers") or ())
            extra = {k: v for k, v in row.items() if k not in ("id", "_id", "text", "answers")}
            queries.append(Query(qid, text, answers, extra))
    queries = [q for q in queries if q.id in qrels] or queries
    return BeirDataset(folder, split, queries, qrels)


def write_split(out: Path, split: str, queries: list[Query], qrels: dict[str, dict[str, int]]) -> None:
    """Write ``queries`` and their qrels as split ``split`` of the BEIR folder ``out`` (``queries``/``qrels`` files
    named as :func:`load_beir` reads them)."""
    with open(_split_file(out, split, "queries", ".jsonl"), "w", encoding="utf-8") as fh:
        for q in queries:
            row: dict[str, Any] = {"_id": q.id, "text": q.text, **q.extra}
            if q.answers:
                row["answers"] = list(q.answers)
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(_split_file(out, split, "qrels", ".tsv"), "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["query-id", "corpus-id", "score"])
        for q in queries:
            for doc, score in qrels.get(q.id, {}).items():
                writer.writerow([q.id, doc, score])


def holdout_split(
    dataset: BeirDataset,
    out: str | os.PathLike[str],
    *,
    fraction: float,
    seed: int = 0,
    names: tuple[str, str] = ("fit", "val"),
) -> tuple[BeirDataset, BeirDataset]:
    """Split a dataset's queries in two BEIR splits of a new folder, to choose settings on held-out queries.

    The new folder's ``corpus.jsonl`` is a link to the dataset's (so both share cached indexes); the queries are
    split by a seeded draw: ``fraction`` of them (at least one) go to the second split.

    Args:
        dataset: The split to divide (for example SciFact's ``train``).
        out: The new folder (created; its split files are rewritten).
        fraction: Share of the queries held out, strictly between 0 and 1.
        seed: Seeds the draw.
        names: The two split names (``fit`` -> ``fit_queries.jsonl``, ``val`` -> ``val_queries.jsonl``).

    Returns:
        The two splits, loaded from the new folder.

    Raises:
        DatasetError: If ``fraction`` is not strictly between 0 and 1, a name is a default split name, or the
            dataset has fewer than two queries.
    """
    if not 0.0 < fraction < 1.0:
        raise DatasetError(f"holdout fraction must be strictly between 0 and 1 (got {fraction})")
    if any(n in ("", "dev", "test") for n in names) or names[0] == names[1]:
        raise DatasetError(f"holdout split names must be two distinct prefixes other than dev/test (got {names})")
    if len(dataset.queries) < 2:
        raise DatasetError(f"{dataset.root} ({dataset.split}) has {len(dataset.queries)} queries; need at least 2")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "corpus.jsonl"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(dataset.corpus_file.resolve())
    held = max(1, min(len(dataset.queries) - 1, round(len(dataset.queries) * fraction)))
    chosen = set(random.Random(seed).sample(sorted(q.id for q in dataset.queries), held))
    write_split(folder, names[0], [q for q in dataset.queries if q.id not in chosen], dataset.qrels)
    write_split(folder, names[1], [q for q in dataset.queries if q.id in chosen], dataset.qrels)
    return load_beir(folder, split=names[0]), load_beir(folder, split=names[1])


def mixed_dataset(
    parts: Sequence[BeirDataset], out: str | os.PathLike[str], *, train_fraction: float = 0.5, seed: int = 0
) -> tuple[BeirDataset, BeirDataset]:
    """One BEIR folder mixing several datasets' corpora and questions (a workload of easy and hard questions):
    ``corpus.jsonl`` is every part's corpus (ids must not collide), each question keeps a ``source`` field naming its
    part, and each part's questions are split by a seeded hash into ``train_*`` (``train_fraction``) and the dev
    files (``queries.jsonl`` / ``qrels.tsv``), so a router trained on train is reported on dev; each split's
    questions are written interleaved in a seeded order, as traffic would mix them.

    Raises:
        DatasetError: If two parts share a corpus id or a query id, or the fraction is not in (0, 1).
    """
    if not 0.0 < train_fraction < 1.0:
        raise DatasetError(f"train fraction must be strictly between 0 and 1 (got {train_fraction})")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    seen: dict[str, str] = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for part in parts:
            for row in part.corpus():
                if row["id"] in seen:
                    raise DatasetError(f"corpus id {row['id']!r} is in both {seen[row['id']]} and {part.name}")
                seen[row["id"]] = part.name
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    train: list[Query] = []
    dev: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    asked: set[str] = set()
    for part in parts:
        order = sorted(part.queries, key=lambda q: hashlib.sha256(f"{part.name}:{q.id}:{seed}".encode()).hexdigest())
        cut = round(len(order) * train_fraction)
        for i, q in enumerate(order):
            if q.id in asked:
                raise DatasetError(f"query id {q.id!r} is in more than one part")
            asked.add(q.id)
            tagged = Query(q.id, q.text, q.answers, {**q.extra, "source": part.name})
            (train if i < cut else dev).append(tagged)
            qrels[q.id] = dict(part.qrels.get(q.id, {}))

    # the parts' questions interleaved in a seeded order, as a workload would send them (a router holding a budget
    # over the questions it serves sees them so)
    def shuffled(queries: list[Query]) -> list[Query]:
        return sorted(queries, key=lambda q: hashlib.sha256(f"order:{q.id}:{seed}".encode()).hexdigest())

    write_split(folder, "train", shuffled(train), qrels)
    write_split(folder, "dev", shuffled(dev), qrels)
    return load_beir(folder, split="train"), load_beir(folder, split="dev")
