"""What the answer is inside a sentence: :func:`best_span` keeps the part of the sentence the question does not
already say ("Error E07 means speed sensor signal lost." -> "speed sensor signal lost"), narrowed to a number or a
date when the question asks for one; :func:`answer_clause` keeps the clause that holds it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from modular_rag.attribution.cues import (
    _ANALYZER,
    _DATE,
    _MONTHS,
    _NUMBER,
    _NUMBER_WORDS,
    _PLACE_WORDS,
    _WORD,
    _YEAR,
    Expect,
    QuestionCues,
    _numbers,
    question_cues,
)

__all__ = ["answer_clause", "best_span"]


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text)


def best_span(question: str, sentence: str) -> str:
    """The part of ``sentence`` that answers ``question``: the longest run of words the question does not contain
    (stop words inside a run are kept, at its ends dropped), preferring a run with a number or a date when the
    question asks for one (then cut to that number with its unit). The whole sentence when nothing is left."""
    cues = question_cues(question)
    given = set(cues.terms)
    words = _tokens(sentence.rstrip(".!?"))
    stop = _ANALYZER._stop
    runs: list[list[str]] = []
    current: list[str] = []
    for word in words:
        stems = _ANALYZER(word)
        in_question = bool(stems) and all(s in given for s in stems)
        if in_question or word in (",", ";", ":", "(", ")"):
            if current:
                runs.append(current)
            current = []
        else:
            current.append(word)
    if current:
        runs.append(current)

    def trimmed(run: list[str]) -> list[str]:
        while run and (run[0].lower() in stop or not re.search(r"\w", run[0])):
            run = run[1:]
        while run and (run[-1].lower() in stop or not re.search(r"\w", run[-1])):
            run = run[:-1]
        return run

    spans = [t for t in (trimmed(r) for r in runs) if t]
    if not spans:
        return sentence.strip()
    if cues.expects == "date":
        for span in spans:
            match = _DATE.search(_join(span))
            if match:
                return match.group(0)
    if cues.expects == "number":
        quantity = _quantity(words, cues)
        if quantity:
            return quantity
    if cues.expects in ("person", "place"):
        names = _names(words, given)
        if names:
            preferred = [
                n
                for start, n in names
                if cues.expects == "place" and start > 0 and words[start - 1].lower() in _PLACE_WORDS
            ]
            return (preferred or [n for _, n in names])[0]
    return _join(max(spans, key=len))


_DURATIONS = frozenset(
    {
        "hours",
        "hour",
        "h",
        "minutes",
        "minute",
        "min",
        "seconds",
        "second",
        "s",
        "days",
        "day",
        "weeks",
        "week",
        "months",
        "month",
        "years",
        "year",
        "decades",
        "centuries",
    }
)
_UNITS = frozenset(
    [
        "kg",
        "g",
        "mg",
        "lb",
        "lbs",
        "oz",
        "t",
        "tonnes",
        "tons",
        "km",
        "m",
        "cm",
        "mm",
        "nm",
        "mi",
        "miles",
        "mile",
        "metres",
        "meters",
        "metre",
        "meter",
        "feet",
        "foot",
        "ft",
        "inches",
        "inch",
        "yards",
        "%",
        "percent",
        "per",
        "cent",
        "degrees",
        "degree",
        "°c",
        "°f",
        "c",
        "f",
        *_DURATIONS,
        "times",
        "wh",
        "kwh",
        "mwh",
        "gwh",
        "w",
        "kw",
        "mw",
        "v",
        "mah",
        "mph",
        "kmh",
        "km/h",
        "knots",
        "litres",
        "liters",
        "ml",
        "l",
        "gallons",
        "people",
        "persons",
        "million",
        "billion",
        "thousand",
        "hundred",
        "dozen",
        "gears",
        "speeds",
        "euros",
        "dollars",
        "pounds",
        "cents",
        "usd",
        "eur",
        "gbp",
        "points",
        "goals",
        "votes",
        "seats",
        "members",
        "employees",
        "inhabitants",
        "residents",
        "acres",
        "hectares",
        "km²",
        "mi²",
    ]
)
"""Unit words and counted nouns a quantity's number is read with."""


_MULTIPLIERS = frozenset({"hundred", "thousand", "million", "billion", "trillion"})

_UNIT_CLASSES: dict[str, frozenset[str]] = {
    "mass": frozenset(
        {"kg", "g", "mg", "lb", "lbs", "oz", "t", "tonnes", "tons", "pounds", "grams", "kilograms", "kilos"}
    ),
    "length": frozenset(
        {
            "km",
            "m",
            "cm",
            "mm",
            "nm",
            "mi",
            "miles",
            "mile",
            "metres",
            "meters",
            "metre",
            "meter",
            "feet",
            "foot",
            "ft",
            "inches",
            "inch",
            "yards",
            "kilometres",
            "kilometers",
        }
    ),
    "duration": _DURATIONS,
    "speed": frozenset({"mph", "kmh", "km/h", "knots"}),
    "share": frozenset({"%", "percent", "per", "cent"}),
    "energy": frozenset({"wh", "kwh", "mwh", "gwh", "mah"}),
    "money": frozenset({"euros", "dollars", "pounds", "cents", "usd", "eur", "gbp", "$", "€"}),
}
"""Unit words by the kind of quantity a question asks for."""

_QUANTITY_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(weigh|weighs|weight|heavy|mass)\b", re.I), "mass"),
    (re.compile(r"\b(how (far|tall|high|wide|deep)|distance|length|height|width|range)\b", re.I), "length"),
    (re.compile(r"\b(how old|age|how many (years|days|months|weeks|hours|minutes))\b", re.I), "duration"),
    (re.compile(r"\b(how fast|speed)\b", re.I), "speed"),
    (re.compile(r"\b(percentage|percent|share|proportion)\b", re.I), "share"),
    (re.compile(r"\b(capacity|battery|energy)\b", re.I), "energy"),
    (re.compile(r"\b(cost|price|pay|worth|spend)\b", re.I), "money"),
)


def _quantities(words: Sequence[str], cues: QuestionCues) -> list[tuple[int, str]]:
    """The quantities in the words the question does not give, as ``(rank, text)``: rank 0 for a number (or a
    range ``2 to 5``) with a unit of the kind the question asks for, or with the noun it counts ("How many days" ->
    ``14 days``); 1 with another unit word or noun; 2 for a bare number; a year, or a day of a date ("1 March"), is
    not a quantity."""
    given = _numbers(cues.text)
    counted = re.search(r"\bhow (?:many|much)\s+(\w+)", cues.text, re.I)
    noun = counted.group(1).lower() if counted else ""
    kind = next((k for pattern, k in _QUANTITY_KINDS if pattern.search(cues.text)), None)
    wanted = _UNIT_CLASSES.get(kind or "", frozenset())
    terms = set(cues.terms)

    def is_number(w: str) -> bool:
        return w[:1].isdigit() or bool(_NUMBER_WORDS.fullmatch(w))

    found: list[tuple[int, str]] = []
    for i, word in enumerate(words):
        if not is_number(word) or word.replace(",", "") in given or _YEAR.fullmatch(word):
            continue
        if (i + 1 < len(words) and words[i + 1].lower() in _MONTHS) or (i > 0 and words[i - 1].lower() in _MONTHS):
            continue  # the day of a date
        if i > 0 and is_number(words[i - 1]) and word.lower() in _MULTIPLIERS:
            continue  # the "million" of "2.1 million": read with its number
        j = i
        if j + 2 < len(words) and words[j + 1].lower() in ("to", "and", "-", "or") and is_number(words[j + 2]):
            j += 2
        while j + 1 < len(words) and words[j + 1].lower() in _MULTIPLIERS:
            j += 1
        nxt = words[j + 1] if j + 1 < len(words) else ""
        lowered = nxt.lower()
        compound = not _NUMBER.fullmatch(word) and not _NUMBER_WORDS.fullmatch(word)  # 8-speed, 2x12, 30%
        if compound:
            unit = re.sub(r"^[\d.,x]+-?", "", word.lower())
            if unit in wanted or (noun and unit and _ANALYZER(unit) == _ANALYZER(noun)):
                rank = 0
            else:
                rank = 2 if wanted or not unit.isalpha() else 1
            found.append((rank, word))
            continue
        if lowered in wanted or (noun and _ANALYZER(lowered) == _ANALYZER(noun)):
            rank, end = 0, j + 2
        elif lowered in _UNITS or (
            nxt.isalpha() and lowered not in _ANALYZER._stop and not set(_ANALYZER(lowered)) & terms
        ):
            rank, end = (2 if wanted else 1), j + 2
        else:
            rank, end = 2, j + 1
        found.append((rank, _join(words[i:end])))
    return found


def _quantity(words: Sequence[str], cues: QuestionCues) -> str:
    """The quantity that answers a "how much / how many" question (the first of the best rank, see
    :func:`_quantities`), or ``""``."""
    found = _quantities(words, cues)
    return min(found, key=lambda f: f[0])[1] if found else ""


def _names(words: Sequence[str], given: set[str]) -> list[tuple[int, str]]:
    """Runs of capitalised words (not the sentence's first word, not words the question has): ``(start, name)``."""
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(words):
        if i > 0 and words[i][:1].isupper() and not all(s in given for s in _ANALYZER(words[i]) or ["-"]):
            j = i
            while j + 1 < len(words) and (
                words[j + 1][:1].isupper()
                or (words[j + 1].lower() in ("of", "de", "von") and j + 2 < len(words) and words[j + 2][:1].isupper())
            ):
                j += 1
            out.append((i, " ".join(words[i : j + 1])))
            i = j + 1
        else:
            i += 1
    return out


_CLAUSE_BREAK = re.compile(
    r"\s*(?:;|:|\s[-\u2013\u2014]\s|,\s*(?=(?:which|because|so|but|while|whereas|although|"
    r"and then|"
    r"or|and)\b))\s*",
    re.I,
)


def answer_clause(question: str, sentence: str) -> str:
    """The clause of ``sentence`` that holds its best span (:func:`best_span`): the sentence cut at semicolons,
    colons, dashes and commas before ``which``, ``because``, ``but`` ..., keeping the part with the span; the whole
    sentence when the span is not found in one part."""
    span = best_span(question, sentence)
    parts = [p for p in _CLAUSE_BREAK.split(sentence) if p and p.strip()]
    for part in parts:
        if span and span.lower() in part.lower():
            return part.strip().rstrip(".,;") + "."
    return sentence.strip()


def _join(words: Sequence[str]) -> str:
    text = " ".join(words)
    return re.sub(r"\s+([.,;:%)])", r"\1", re.sub(r"([(])\s+", r"\1", text))


def _expected(expects: Expect, sentence: str, cues: QuestionCues) -> float:
    """How well a sentence holds what the question asks for, in [0, 1]: for a quantity, 1 when it has a number with
    a unit the question implies (``kg`` for "weigh"), less for a number with another unit or none; for a date, a
    year or month; for a person or a place, a capitalised name."""
    lowered = sentence.lower()
    if expects == "number":
        found = _quantities(_tokens(sentence.rstrip(".!?")), cues)
        return {0: 1.0, 1: 0.8, 2: 0.4}.get(min((r for r, _ in found), default=9), 0.0)
    if expects == "date":
        return float(bool(_YEAR.search(sentence)) or any(m in lowered for m in _MONTHS))
    if expects in ("person", "place"):
        words = _WORD.findall(sentence)
        return float(any(w[:1].isupper() for w in words[1:]))
    return 0.0
