"""What a question asks for (a number, a date, a person, a place, yes or no) and the patterns that find it in a
sentence: the cues the sentence scorer, the answer spans and the claim check read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from modular_rag.text import NUMBER_WORDS, Analyzer, distinctive_tokens

__all__ = ["Expect", "QuestionCues", "question_cues"]

_ANALYZER = Analyzer()
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_YEAR = re.compile(r"\b(1\d{3}|20\d{2})\b")
_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_CODE = re.compile(r"\b(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*\b")
_WORD = re.compile(r"\d+(?:[.,]\d+)+%?|[\w'’-]+%?|[^\w\s]", re.UNICODE)
_DATE = re.compile(
    r"\b(?:(?:\d{1,2}\s+)?(?:January|February|March|April|May|June|July|August|September|October|"
    r"November|December)(?:\s+\d{1,2})?,?\s+)?(?:1\d{3}|20\d{2})s?\b"
    r"|\b(?:January|February|March|April|May|June|July|August|September|October|November|December)"
    r"(?:\s+\d{1,2})?\b"
)
_PLACE_WORDS = frozenset({"in", "at", "near", "from", "to"})

Expect = Literal["number", "date", "person", "place", "yes_no", "other"]

_EXPECT_RULES: tuple[tuple[re.Pattern[str], Expect], ...] = (
    (re.compile(r"^\s*(is|are|was|were|do|does|did|can|could|should|has|have|had|will|would)\b", re.I), "yes_no"),
    (
        re.compile(
            r"\b(how (much|many|long|far|old|big|tall|heavy|wide|high|fast|often)|what (\w+ )?(percentage|"
            r"percent|number|amount|size|weight|length|distance|speed|capacity|temperature|price)|weigh)\b",
            re.I,
        ),
        "number",
    ),
    (
        re.compile(
            r"(^\s*when\b|\b(when (was|were|did|does|do|is|will|had|has)|what year|which year|what date|"
            r"which date|what decade|what century)\b)",
            re.I,
        ),
        "date",
    ),
    (re.compile(r"\b(who|whom|whose)\b", re.I), "person"),
    (re.compile(r"\b(where|in which (town|city|country|state|region|place))\b", re.I), "place"),
)


@dataclass(frozen=True)
class QuestionCues:
    """What a question asks: its stemmed content terms, the kind of answer it expects, and the distinctive tokens
    (codes, numbers, names) an answer's evidence must share with it."""

    text: str
    terms: tuple[str, ...]
    expects: Expect
    distinctive: frozenset[str]


def question_cues(question: str) -> QuestionCues:
    """Analyse a question (see :class:`QuestionCues`)."""
    expects: Expect = next((kind for pattern, kind in _EXPECT_RULES if pattern.search(question)), "other")
    return QuestionCues(question, tuple(dict.fromkeys(_ANALYZER(question))), expects, distinctive_tokens(question))


_NUMBER_WORDS = re.compile(
    r"\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    r"thirty|forty|fifty|hundred|thousand|million|billion|dozen|half)\b",
    re.I,
)


def _numbers(text: str) -> set[str]:
    """The numbers of a text, written as digits ("five" is "5")."""
    words = {NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text.lower()) if w in NUMBER_WORDS}
    return {m.group(0).replace(",", "") for m in _NUMBER.finditer(text)} | words
