"""A test set's corpus: the client's documents read as passages (every format ``modular-rag index`` reads), and the
BEIR files the set is written as.

A JSON-lines row (a BEIR corpus row) is one passage, as given: its id is the row's. A document from any other file
up to ``max_chars`` characters is one passage (its id is the file's path without the extension); a longer one is
split into passages ``<doc>#<n>`` of at most ``max_chars`` (paragraphs first, then sentences), so a question's gold
is the passage that holds its answer rather than a whole manual. Pages of a PDF are passages ``<doc>#p<page>``. A
BEIR folder given as the source contributes only its ``corpus.jsonl`` (its questions are not documents). When the
source is one JSON-lines corpus, the set's ``corpus.jsonl`` links to it, so evaluations share its cached indexes.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from modular_rag.errors import DatasetError
from modular_rag.questions import Passage, PassageSet, Question

__all__ = ["read_passages", "write_corpus", "write_questions", "question_row"]


def _sources(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The paths to read: a BEIR folder is its ``corpus.jsonl`` only."""
    out = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise DatasetError(
                f"{path} does not exist; give folders or files of documents (.md .txt .jsonl .pdf "
                ".html .docx) or a BEIR folder"
            )
        out.append(path / "corpus.jsonl" if path.is_dir() and (path / "corpus.jsonl").is_file() else path)
    return out


def read_passages(
    paths: Sequence[str | os.PathLike[str]], *, max_chars: int = 2000
) -> tuple[PassageSet, Path | None, list[str]]:
    """Read documents as passages.

    Args:
        paths: Files and folders of documents, or BEIR folders.
        max_chars: Longer documents are split into passages of at most this many characters.

    Returns:
        The passages, the JSON-lines file the set's corpus may link to (``None`` when passages were split, renamed
        or come from several files), and the reader's notes (files skipped, with the reason).

    Raises:
        DatasetError: If a path does not exist, or no passage could be read.
    """
    from modular_rag.ingest import iter_files, load_file
    from modular_rag.providers import Providers

    if max_chars < 200:
        raise DatasetError(f"max_chars must be at least 200 (got {max_chars})")
    sources = _sources(paths)
    env = Providers()  # loaders use no model; the argument is their factory's contract
    passages: list[Passage] = []
    seen: set[str] = set()
    notes: list[str] = []
    files: list[Path] = []
    as_is = True
    for file, root, refused in iter_files(sources):
        if refused is not None:
            notes.append(f"skipped {file.relative_to(root).as_posix()}: {refused}")
            continue
        docs, report = load_file(file, root, env)
        if report.skipped:
            notes.append(f"skipped {report.path}: {report.skipped}")
            continue
        files.append(file)
        for doc in docs:
            title, text = str(doc["metadata"].get("title") or ""), doc["text"]
            base = doc["doc_id"] if "page" not in doc["metadata"] else f"{doc['doc_id']}#p{doc['metadata']['page']}"
            pieces = [text] if len(text) <= max_chars or file.suffix == ".jsonl" else _split(text, max_chars)
            for n, piece in enumerate(pieces):
                pid = base if len(pieces) == 1 else f"{base}#{n}"
                while pid in seen:
                    pid += "'"
                as_is = as_is and pid == doc["doc_id"]
                seen.add(pid)
                passages.append(Passage(pid, title, piece, doc=doc["doc_id"]))
    if not passages:
        raise DatasetError(
            f"no passages read from {', '.join(map(str, paths))}" + (f" ({'; '.join(notes)})" if notes else "")
        )
    link = files[0] if as_is and len(files) == 1 and files[0].suffix == ".jsonl" else None
    return PassageSet(passages), link, notes


def _split(text: str, max_chars: int) -> list[str]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(
        separators=["\n\n", "\n", ". ", "? ", "! ", "; ", " ", ""],
        chunk_size=max_chars,
        chunk_overlap=0,
        keep_separator="end",
    )
    return [p.strip() for p in splitter.split_text(text) if p.strip()]


def write_corpus(out: Path, passages: PassageSet, link: Path | None) -> None:
    """``out/corpus.jsonl``: a link to ``link`` when given, else one row ``{"id", "title", "text"}`` per passage."""
    target = out / "corpus.jsonl"
    if target.is_symlink() or target.exists():
        target.unlink()
    if link is not None:
        target.symlink_to(link.resolve())
        return
    with open(target, "w", encoding="utf-8") as fh:
        for p in passages.passages:
            fh.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")


def question_row(qid: str, q: Question, passages: PassageSet) -> dict[str, Any]:
    """A ``queries.jsonl`` row: ``_id``, ``text``, ``answers`` (when the kind has one; the answer first, then
    the other names it goes by, ``meta["aliases"]``), ``kind``, ``answer_type``,
    ``gold``, ``evidence`` (each span with its passage, offsets and text) and, for a sentence held out of the set's
    corpus, ``held_out`` (``doc``, ``at``: where it was cut, ``text``)."""
    row: dict[str, Any] = {"_id": qid, "text": q.text}
    if q.answer:
        row["answers"] = list(dict.fromkeys([q.answer, *q.meta.get("aliases", ())]))  # a name's other spellings
    evidence = [
        {"doc": s.doc, "start": s.start, "end": s.end, "text": passages[passages.position[s.doc]].text[s.start : s.end]}
        for s in q.evidence
    ]
    row.update(kind=q.kind, answer_type=q.answer_type, gold=list(q.gold), evidence=evidence)
    if isinstance(q.meta.get("held_out"), dict):
        row["held_out"] = q.meta["held_out"]
    return row


def write_questions(out: Path, split: str, rows: Sequence[dict[str, Any]]) -> None:
    """The split's ``queries.jsonl`` and ``qrels.tsv`` (``train_`` prefixed for a split other than dev), the names
    :func:`modular_rag.eval.datasets.load_beir` reads; every gold passage is relevant (score 1)."""
    prefix = "" if split == "dev" else f"{split}_"
    with open(out / f"{prefix}queries.jsonl", "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(out / f"{prefix}qrels.tsv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["query-id", "corpus-id", "score"])
        for row in rows:
            for doc in row["gold"]:
                writer.writerow([row["_id"], doc, 1])
