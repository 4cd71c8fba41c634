"""The written misreadings of the attribution check (``data/misreadings.jsonl``) and the passages they misread:
demo documents (read from the demo corpus) and a few SQuAD dev passages (copied into ``data/squad_passages.jsonl``,
SQuAD 1.1 via ExpMRC, CC BY-SA 4.0). Each case is a question, an answer citing ``[1]``, its kind (``binding``,
``negation``, ``comparison``, ``unit``, ``rival``, ``roles`` for misreadings; ``quote``, ``paraphrase``, ``short``
for correct answers) and whether it is correct."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from modular_rag import demo_corpus_path

__all__ = ["Case", "cases", "evidence_for"]

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Case:
    """One answer to check: against ``passage`` (``demo/<file stem>`` or ``squad/<corpus id>``)."""

    passage: str
    question: str
    answer: str
    kind: str
    correct: bool

    @property
    def label(self) -> str:
        return f"{self.kind}: {self.answer}"


def cases() -> list[Case]:
    """Every case of ``data/misreadings.jsonl``, misreadings first."""
    lines = (DATA / "misreadings.jsonl").read_text(encoding="utf-8").splitlines()
    return [Case(**json.loads(line)) for line in lines if line.strip()]


@cache
def _squad() -> dict[str, dict[str, str]]:
    lines = (DATA / "squad_passages.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


def _demo(stem: str) -> tuple[str, str]:
    text = (demo_corpus_path() / f"{stem}.md").read_text(encoding="utf-8")
    _, front, body = text.split("---", 2)
    return str(yaml.safe_load(front)["title"]), body.strip()


def evidence_for(passage: str) -> list[dict[str, Any]]:
    """The passage as the one evidence entry ``[1]``, its text headed by its title as the indexer chunks it."""
    source, name = passage.split("/", 1)
    if source == "demo":
        title, body = _demo(name)
    else:
        row = _squad()[name]
        title, body = row["title"], row["text"]
    return [
        {
            "ref": 1,
            "chunk_id": name,
            "text": f"{title}\n{body}",
            "score": 1.0,
            "metadata": {"title": title, "doc_id": name},
        }
    ]
