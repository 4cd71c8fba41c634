"""What a question asks for (a number, a date, a person, a place, yes or no) and the patterns that find it in a
sentence: the cues the sentence scorer, the answer spans and the claim check read."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from modular_rag.text import ENGLISH_STOPWORDS, NUMBER_WORDS, Analyzer, distinctive_tokens

__all__ = ["Ask", "Expect", "QuestionCues", "asked_cue", "named_words", "question_cues"]

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


Ask = Literal["default", "limit", "name", "how"]
"""What a question about a tool or a manual asks for: a default value, a limit, the name of an option, setting or
command, or how to do something (the doc-style cues; :data:`Expect` is the factoid kind)."""

_NAMED = (
    r"option|flag|switch|setting|command|subcommand|variable|argument|parameter|key|field|method|function|class|"
    r"hook|shortcut|menu|tool|module|backend|engine|exception|signal|attribute|lookup|tag|filter|middleware|"
    r"directive|property|header|mode|format|helper|placeholder|operator|keyword|value"
)
_ASK_RULES: tuple[tuple[re.Pattern[str], Ask], ...] = (
    (
        re.compile(
            r"\bdefaults?\b|\bout of the box\b|\bif (i|you) (don'?t|do not|never) (set|specify|pass|give)", re.I
        ),
        "default",
    ),
    (
        re.compile(
            r"\b(maximum|minimum|max|min|limit|largest|smallest|longest|shortest|at most|at least|up to)\b",
            re.I,
        ),
        "limit",
    ),
    (
        re.compile(
            rf"\b(which|what|what's|whats)\s+(\w+\s+){{0,3}}({_NAMED})s?\b|\b({_NAMED})s?\s+(do i|should i|to|for|that|"
            r"which|makes|lets|turns|tells)\b|\b(what is|what's) (it|the \w+) called\b"
            rf"|\b({_NAMED})s?\W*$",  # a search-box query: "texworks typeset shortcut"
            re.I,
        ),
        "name",
    ),
    (
        re.compile(r"\bhow (do|can|should|would|could) (i|you|we|one)\b|\bhow to\b|\bis there a way\b", re.I),
        "how",
    ),
)


@dataclass(frozen=True)
class QuestionCues:
    """What a question asks: its stemmed content terms, the kind of answer it expects, the distinctive tokens
    (codes, numbers, names) an answer's evidence must share with it, and the doc-style asks (:data:`Ask`)."""

    text: str
    terms: tuple[str, ...]
    expects: Expect
    distinctive: frozenset[str]
    asks: frozenset[Ask] = frozenset()


def question_cues(question: str) -> QuestionCues:
    """Analyse a question (see :class:`QuestionCues`)."""
    expects: Expect = next((kind for pattern, kind in _EXPECT_RULES if pattern.search(question)), "other")
    asks = frozenset(kind for pattern, kind in _ASK_RULES if pattern.search(question))
    terms = tuple(dict.fromkeys(_ANALYZER(question)))
    return QuestionCues(question, terms, expects, distinctive_tokens(question), asks)


_IDENTIFIER = re.compile(
    r"(?<![\w-])--?[A-Za-z][\w-]*"  # --soft, -p
    r"|\b[a-z][\w-]*\.[a-z][\w.-]*\b"  # core.compression, django.db.models
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"  # SESSION_COOKIE_AGE
    r"|\b[a-z]+_[a-z0-9_]+\b"  # max_length
    r"|\b\w+\(\)"  # save()
    r"|\b[a-z]+-[a-z]+(?:-[a-z]+)*\b(?=\(\d\))"  # git-restore(1)
    r"|\b(?:Ctrl|Alt|Shift|Cmd|Command|Option)\s*[+\- ]\s*\S"  # Ctrl T, Ctrl+Shift+S
    r"|[\"'“‘][^\"'”’]{1,40}[\"'”’]"  # a quoted value
    r"|\S+\s?→\s?\S+"  # a menu path: Edit → Preferences
)
_VALUE = re.compile(
    r"\d|[\"'“‘][^\"'”’]{0,40}[\"'”’]|\b(true|false|none|null|empty|on|off|yes|no|unset|disabled|enabled)\b", re.I
)
_DEFAULT = re.compile(r"\bdefault(s|ed)?\b|\bunless\b|\bif (not|no|omitted|unset)\b", re.I)
_BOUND = re.compile(
    r"\b(maximum|minimum|max|min|limit(ed)?|at most|at least|up to|no more than|cannot exceed|longest)\b", re.I
)
_DOING = re.compile(
    r"^\s*(use|run|pass|set|add|give|call|click|choose|select|press|type|enter|open|create|write|put|install|"
    r"configure|enable|disable|specify|invoke|start|to \w+)\b"
    r"|\byou (can|may|should|must|need to)\b|\b(use|using|with) the\b",
    re.I,
)


def asked_cue(asks: frozenset[Ask], sentence: str, context: str = "") -> float:
    """How well a sentence holds what a doc-style question asks for (:data:`Ask`), in [0, 1]: a default wants the
    word and a value (``Default: 1209600``), a limit a bound and a number, a name an option, setting or command
    written as one (``--soft``, ``core.compression``, ``SESSION_COOKIE_AGE``), a how-to a step (an imperative, "you
    can", or a command). ``context`` is what stands around it (its heading and its paragraph's term)."""
    if not asks:
        return 0.0
    found = []
    named = bool(_IDENTIFIER.search(sentence))
    if "default" in asks:
        said = bool(_DEFAULT.search(sentence)) or bool(_DEFAULT.search(context))
        found.append(1.0 if said and _VALUE.search(sentence) else 0.5 if said else 0.0)
    if "limit" in asks:
        found.append(
            1.0 if _BOUND.search(sentence) and _NUMBER.search(sentence) else 0.5 if _NUMBER.search(sentence) else 0.0
        )
    if "name" in asks:
        found.append(1.0 if named else 0.0)
    if "how" in asks:
        found.append(1.0 if _DOING.search(sentence) or named else 0.0)
    return max(found)


_NUMBER_WORDS = re.compile(
    r"\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    r"thirty|forty|fifty|hundred|thousand|million|billion|dozen|half)\b",
    re.I,
)


def _numbers(text: str) -> set[str]:
    """The numbers of a text, written as digits ("five" is "5")."""
    words = {NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text.lower()) if w in NUMBER_WORDS}
    return {m.group(0).replace(",", "") for m in _NUMBER.finditer(text)} | words


_NAME_WORD = re.compile(r"[^\W\d_][\w.+#-]*[\w+#]|[^\W\d_]")
_CONTRACTIONS = frozenset(
    [
        "cant",
        "dont",
        "doesnt",
        "didnt",
        "isnt",
        "arent",
        "wasnt",
        "werent",
        "wont",
        "wouldnt",
        "shouldnt",
        "couldnt",
        "hasnt",
        "havent",
        "hadnt",
        "whats",
        "whos",
        "wheres",
        "whens",
        "hows",
        "thats",
        "theres",
        "shes",
        "hes",
        "its",
        "im",
        "ive",
        "youre",
        "theyre",
    ]
)


def named_words(question: str, pieces: Callable[[str], int] | None = None) -> list[str]:
    """The words of a question that name something (a product, a tool, a standard) rather than say something: in a
    question written with capitals, a word with a capital past its first letter or not at the question's start
    (``Overleaf``, ``JWT``, ``PageNumberPagination``); in one written all in lower case, a word the encoder's
    vocabulary does not hold whole (``pieces(word) >= 2``: ``graphql``, ``sentry``), when ``pieces`` is given. Stop
    words are never names."""
    words = _NAME_WORD.findall(question)
    cased = any(ch.isupper() for ch in question)
    out = []
    for i, word in enumerate(words):
        if word.lower() in ENGLISH_STOPWORDS or word.lower() in _CONTRACTIONS or len(word) < 3:
            continue
        if cased:
            capital_inside = any(ch.isupper() for ch in word[1:])
            if capital_inside or (word[0].isupper() and i > 0 and words[i - 1] not in (".", "?", "!")):
                out.append(word)
        elif pieces is not None and pieces(word) >= 2:
            out.append(word)
    return out
