"""The shapes a test set is made of: the passages question makers read and the questions they write.

A question maker (an operator of port ``question``) reads a :class:`PassageSet` and writes :class:`Question` s,
each with the passages a flow must retrieve to answer it (``gold``), its short answer when its kind has one, and
where that answer (or the sentence the question was made from) sits in the gold passages (``evidence``). A question
check (port ``check``) reads questions and says which to keep. Both plug into :mod:`modular_rag.eval.testset`
through the registry; this module only holds the shapes, so makers and the builder agree on them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import random

    from modular_rag.links import LinkTable

__all__ = ["Passage", "PassageSet", "Span", "Question", "Verdict", "QuestionMaker", "QuestionCheck", "sentence_spans"]

_WORD = re.compile(r"[^\W_]+(?:[-'./][^\W_]+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` as ``(start, end)`` character offsets (split where :func:`modular_rag.text.
    split_sentences` splits: terminal punctuation before a capital or a digit, and blank lines), stripped."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in [*_SENTENCE_END.finditer(text), None]:
        end = match.start() if match else len(text)
        piece = text[start:end]
        left = len(piece) - len(piece.lstrip())
        right = len(piece.rstrip())
        if right > left:
            spans.append((start + left, start + right))
        start = match.end() if match else len(text)
    return spans


@dataclass(frozen=True)
class Passage:
    """A unit of retrieval: a corpus row (``id``, ``title``, ``text``) and the document it came from."""

    id: str
    title: str
    text: str
    doc: str = ""
    """The source document's id (passages of one document do not link to each other); ``id`` when empty."""


class PassageSet:
    """The passages of a corpus, with their sentences and the link table over them (built on first use).

    Args:
        passages: The passages, in corpus order; ids must be unique.

    Raises:
        ValueError: If two passages share an id.
    """

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.passages = list(passages)
        self.position = {p.id: i for i, p in enumerate(self.passages)}
        if len(self.position) != len(self.passages):
            raise ValueError("passage ids must be unique")
        self._sentences: dict[int, list[tuple[int, int]]] = {}
        self.derived: dict[str, Any] = {}
        """What makers derive from the passages and share (a vocabulary's vectors, ...), by a key they choose."""

    def __len__(self) -> int:
        return len(self.passages)

    def __getitem__(self, i: int) -> Passage:
        return self.passages[i]

    def sentences(self, i: int) -> list[tuple[int, int]]:
        """The sentence offsets of passage ``i`` (cached)."""
        if i not in self._sentences:
            self._sentences[i] = sentence_spans(self.passages[i].text)
        return self._sentences[i]

    @cached_property
    def links(self) -> LinkTable:
        """The link table over the passages (titles, where other passages mention them), in passage order."""
        from modular_rag.links import LinkTable

        return LinkTable.build(
            [p.text for p in self.passages], [{"title": p.title, "doc_id": p.doc or p.id} for p in self.passages]
        )

    @cached_property
    def df(self) -> dict[str, int]:
        """How many passages each lower-cased word occurs in (for makers that leave out the rarest words)."""
        counts: Counter[str] = Counter()
        for p in self.passages:
            counts.update(set(_WORD.findall(p.text.lower())))
        return dict(counts)

    def order(self, rng: random.Random) -> list[int]:
        """Every passage position once, in a seeded random order (makers walk it until they have enough)."""
        positions = list(range(len(self.passages)))
        rng.shuffle(positions)
        return positions


@dataclass(frozen=True)
class Span:
    """Where a piece of text sits in a passage: ``passage.text[start:end]``."""

    doc: str
    start: int
    end: int


@dataclass
class Question:
    """A question a maker wrote, with what answering it takes.

    Attributes:
        text: The question.
        kind: Its kind (the maker's name, or the LLM maker's kind: ``single``, ``multi``, ``comparison``,
            ``unanswerable``); the test set balances kinds.
        gold: The passages a flow must retrieve (empty for an unanswerable question).
        answer: The short answer ("" when the kind has none, such as an inverse cloze).
        answer_type: ``number``, ``date``, ``name``, ``phrase``, ``sentence`` or ``none``.
        evidence: Where the answer (or the held-out sentence) is in the gold passages.
        meta: What the maker wants to keep (the source sentence, the bridge entity, ...).
    """

    text: str
    kind: str
    gold: tuple[str, ...]
    answer: str = ""
    answer_type: str = "none"
    evidence: tuple[Span, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A check's word on one question: kept, or dropped with the reason."""

    keep: bool
    reason: str = ""


QuestionMaker = Callable[["PassageSet", int, "random.Random"], list[Question]]
"""What a ``question`` operator's factory returns: ``make(passages, n, rng)`` -> at most ``n`` questions."""

QuestionCheck = Callable[[Sequence[Question], "PassageSet"], list[Verdict]]
"""What a ``check`` operator's factory returns: ``check(questions, passages)`` -> one verdict per question."""
