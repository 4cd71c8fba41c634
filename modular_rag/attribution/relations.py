"""What a clause says beyond its bag of words, read without a model: whether it is negated, which side of a scale
it takes (more/less, before/after, older/younger, ...), and its numbers with their units and scales.

The attribution check (:mod:`modular_rag.attribution.claims`) compares these between an answer and the sentence
it cites.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from modular_rag.attribution.cues import _NUMBER, _YEAR, _numbers
from modular_rag.text import NUMBER_WORDS, Analyzer, fold

__all__ = [
    "Reading",
    "read",
    "terms",
    "digits",
    "clauses",
    "words",
    "negated",
    "sides",
    "Quantity",
    "quantities",
    "asked_kind",
    "unit_kind",
    "is_unit",
    "value_kind",
    "SCALES",
]

_ANALYZER = Analyzer()
_TOKEN = re.compile(r"[^\W_]+(?:[-./][^\W_]+)*")  # the tokens of distinctive_tokens: "tw-900", "7.6", "km/h"


def terms(text: str) -> frozenset[str]:
    """Analysed terms (stemmed, stop words dropped), number words as digits."""
    return frozenset(NUMBER_WORDS.get(t, t) for t in _ANALYZER(text))


def digits(text: str) -> frozenset[str]:
    """The numbers a text writes in digits (no thousands commas; not "5th", "1990s", "e07"; not "one")."""
    return frozenset(m.group(0).replace(",", "") for m in _NUMBER.finditer(text))


@dataclass(frozen=True)
class Reading:
    """A sentence or clause as the attribution rules read it: its terms, its folded tokens (``tw-900``, ``7.6``)
    and its numbers as digits."""

    text: str
    terms: frozenset[str]
    tokens: tuple[str, ...]
    numbers: frozenset[str]


@functools.lru_cache(maxsize=8192)
def read(text: str) -> Reading:
    """Read a text (cached: the same evidence sentences are read for every answer)."""
    return Reading(text, terms(text), tuple(_TOKEN.findall(fold(text))), frozenset(_numbers(text)))


_CLAUSE = re.compile(
    r"\s*(?:;|:|[()\[\]]|\s[-\u2013\u2014]\s|,\s*(?=(?:which|who|whose|because|so|but|while|"
    r"whereas|although|though|despite|and|or|since|when|if|unless|it|he|she|they|we)\b)|\s(?=(?:"
    r"because|while|whereas|although|though|despite|unless|but)\b))\s*",
    re.I,
)


def clauses(text: str) -> list[Reading]:
    """A sentence cut into clauses: at semicolons, colons, dashes, brackets, commas before a conjunction or a pronoun,
    and before "because", "while", "despite", "but" ...; only the parts with content words."""
    return [read(p.strip()) for p in _CLAUSE.split(text) if p and p.strip() and terms(p)]


# --- negation and comparison --------------------------------------------------------------------------------------

_PHRASES = (
    (re.compile(r"\b(?:no|not) (?:more|greater|higher|later|longer) than\b"), " atmost "),
    (re.compile(r"\b(?:no|not) (?:less|fewer|lower|earlier|shorter) than\b"), " atleast "),
    (re.compile(r"\bat least\b"), " atleast "),
    (re.compile(r"\bat most\b"), " atmost "),
    (re.compile(r"\bnot (?:only|just|merely|until)\b|\bno doubt\b|\bnothing but\b"), " "),
    (re.compile(r"\bover (?=\d)"), " above "),
    (re.compile(r"\bunder (?=\d)"), " below "),
)
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot|nowhere|except|exceptions? of)\b"
    r"|n't\b"
)

SCALES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "amount": (
        ("more", "greater", "above", "exceed", "exceeds", "exceeded", "exceeding", "most", "maximum", "atleast"),
        ("less", "fewer", "below", "least", "minimum", "atmost"),
    ),
    "time": (
        ("before", "earlier", "earliest", "prior", "previously", "preceded", "precedes", "predates"),
        ("after", "later", "latest", "subsequently", "afterwards", "followed"),
    ),
    "order": (("first",), ("last", "final")),
    "age": (("older", "oldest", "elder", "eldest"), ("younger", "youngest", "newer", "newest")),
    "level": (
        (
            "higher",
            "highest",
            "raise",
            "raised",
            "raises",
            "rise",
            "rises",
            "rose",
            "risen",
            "increase",
            "increased",
            "increases",
            "increasing",
            "grew",
            "grow",
            "grows",
            "growing",
            "gain",
            "gained",
        ),
        (
            "lower",
            "lowest",
            "reduce",
            "reduced",
            "reduces",
            "reducing",
            "fall",
            "fell",
            "falls",
            "decrease",
            "decreased",
            "decreases",
            "decreasing",
            "decline",
            "declined",
            "declines",
            "drop",
            "dropped",
            "drops",
        ),
    ),
    "size": (("larger", "largest", "bigger", "biggest"), ("smaller", "smallest")),
    "width": (("wider", "widest", "broader"), ("narrower", "narrowest")),
    "length": (("longer", "longest"), ("shorter", "shortest")),
    "speed": (("faster", "fastest", "quicker", "quickest"), ("slower", "slowest")),
    "weight": (("heavier", "heaviest"), ("lighter", "lightest")),
    "heat": (("warmer", "warmest", "hotter", "hottest"), ("colder", "coldest", "cooler", "coolest")),
    "quality": (("better", "best", "superior"), ("worse", "worst", "inferior")),
    "strength": (("stronger", "strongest"), ("weaker", "weakest")),
    "hardness": (("harder", "hardest", "stiffer"), ("softer", "softest")),
    "north": (("north", "northern", "northward"), ("south", "southern", "southward")),
    "east": (("east", "eastern", "eastward"), ("west", "western", "westward")),
    "end": (("front",), ("rear",)),
    "height": (("top", "upper"), ("bottom",)),
    "inside": (("inside", "indoors", "internal", "interior"), ("outside", "outdoors", "external", "exterior")),
    "outcome": (("win", "wins", "won", "winning", "victory"), ("lose", "loses", "lost", "losing")),
    "inclusion": (("include", "includes", "included", "including"), ("exclude", "excludes", "excluded", "excluding")),
    "permission": (
        ("allow", "allows", "allowed", "permit", "permits", "permitted"),
        ("forbid", "forbids", "forbidden", "ban", "bans", "banned", "prohibit", "prohibits", "prohibited"),
    ),
    "acceptance": (("accept", "accepts", "accepted"), ("reject", "rejects", "rejected")),
    "state": (("open", "opened", "opens"), ("closed", "closes", "shut")),
}
"""Scales whose two sides an answer must not swap: dimension -> (words of one side, words of the other)."""
_SIDE = {
    w: (dim, sign) for dim, pair in SCALES.items() for sign, words in zip((1, -1), pair, strict=True) for w in words
}


def _normalised(text: str) -> str:
    out = fold(text).replace("’", "'")
    for pattern, repl in _PHRASES:
        out = pattern.sub(repl, out)
    return out


def negated(text: str) -> bool:
    """Whether a clause is negated ("not", "no", "never", "n't", "cannot", "except", ...; "not only", "not until"
    are not negations, "no more than" is a comparison)."""
    return bool(_NEGATION.search(_normalised(text)))


def sides(text: str) -> set[tuple[str, int]]:
    """The sides of :data:`SCALES` a clause takes, as ``(dimension, +1 | -1)``; capitalised words after the first
    are names, not sides ("New South Wales", "Western Xia")."""
    plain = re.sub(r"(?<=\S)(\s+)[A-Z]\w*", r"\1_", text)
    return {_SIDE[w] for w in re.findall(r"[a-z]+", _normalised(plain)) if w in _SIDE}


# --- numbers with units --------------------------------------------------------------------------------------------

_UNIT_NAMES: dict[str, tuple[str, ...]] = {
    "km": ("km", "kilometre", "kilometres", "kilometer", "kilometers"),
    "m": ("m", "metre", "metres", "meter", "meters"),
    "cm": ("cm", "centimetre", "centimetres", "centimeter", "centimeters"),
    "mm": ("mm", "millimetre", "millimetres", "millimeter", "millimeters"),
    "mi": ("mi", "mile", "miles"),
    "ft": ("ft", "foot", "feet"),
    "inch": ("inch", "inches"),
    "yd": ("yd", "yard", "yards"),
    "kg": ("kg", "kilogram", "kilograms", "kilo", "kilos"),
    "g": ("g", "gram", "grams"),
    "mg": ("mg",),
    "t": ("tonne", "tonnes", "ton", "tons"),
    "lb": ("lb", "lbs"),
    "s": ("s", "sec", "secs", "second", "seconds"),
    "min": ("min", "mins", "minute", "minutes"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "day": ("day", "days"),
    "week": ("week", "weeks"),
    "month": ("month", "months"),
    "year": ("year", "years"),
    "decade": ("decade", "decades"),
    "century": ("century", "centuries"),
    "km/h": ("km/h", "kmh", "kph"),
    "mph": ("mph",),
    "knot": ("knot", "knots"),
    "%": ("%", "percent", "pct"),
    "w": ("w", "watt", "watts"),
    "kw": ("kw",),
    "wh": ("wh",),
    "kwh": ("kwh",),
    "mah": ("mah",),
    "v": ("v", "volt", "volts"),
    "nm": ("nm",),
    "bar": ("bar",),
    "psi": ("psi",),
    "°c": ("°c", "celsius"),
    "°f": ("°f", "fahrenheit"),
    "degree": ("degree", "degrees"),
    "usd": ("$", "usd", "dollar", "dollars"),
    "eur": ("€", "eur", "euro", "euros"),
    "gbp": ("£", "gbp"),
    "l": ("l", "litre", "litres", "liter", "liters"),
    "ml": ("ml",),
    "ha": ("ha", "hectare", "hectares"),
    "acre": ("acre", "acres"),
    "people": ("people", "persons", "inhabitants", "residents"),
}
"""Unit words by the unit they name (``kilometres`` is ``km``)."""
_UNIT = {name: unit for unit, names in _UNIT_NAMES.items() for name in names}
_KIND_OF_UNIT = {
    unit: kind
    for kind, units in {
        "mass": ("kg", "g", "mg", "t", "lb"),
        "length": ("km", "m", "cm", "mm", "mi", "ft", "inch", "yd"),
        "duration": ("s", "min", "h", "day", "week", "month", "year", "decade", "century"),
        "speed": ("km/h", "mph", "knot"),
        "share": ("%",),
        "energy": ("wh", "kwh", "mah"),
        "money": ("usd", "eur", "gbp"),
    }.items()
    for unit in units
}
_MULTIPLIERS = frozenset({"hundred", "thousand", "million", "billion", "trillion"})
_WORDS = re.compile(r"[a-z]+\d[a-z\d]*|\d+(?:[.,]\d+)*|km/h|[$€£%]|°[cf]|[a-z]+")  # a code ("e07") is one word


@functools.lru_cache(maxsize=8192)
def words(text: str) -> tuple[str, ...]:
    """A text's folded words and numbers, units kept whole ("25", "km/h"); :attr:`Quantity.at` indexes them."""
    return tuple(_WORDS.findall(fold(text).replace("per cent", "percent")))


@dataclass(frozen=True)
class Quantity:
    """A number (digits, no thousands commas) with the scale ("million") and the unit written with it, at word
    ``at`` of :func:`words`; ``spelled`` when written as a word ("two")."""

    number: str
    scale: str | None
    unit: str | None
    at: int
    spelled: bool = False

    def __str__(self) -> str:
        return " ".join(p for p in (self.number, self.scale, self.unit) if p)


@functools.lru_cache(maxsize=8192)
def quantities(text: str) -> tuple[Quantity, ...]:
    """The numbers of a text with their scales and units: "10 km", "25 km/h", "ten seconds" (``10 s``), "$8.7
    billion", "136,000 square kilometres" (``sq km``), both ends of a range ("2 to 5 cm")."""
    found = words(text)
    out: list[Quantity] = []
    for i, word in enumerate(found):
        number = word.replace(",", "") if word[:1].isdigit() else NUMBER_WORDS.get(word)
        if number is None or (i > 0 and found[i - 1] in _MULTIPLIERS and not word[:1].isdigit()):
            continue
        j = i + 1
        scale = found[j] if j < len(found) and found[j] in _MULTIPLIERS else None
        j += scale is not None
        square = j < len(found) and found[j] in ("square", "sq")
        j += square
        unit = _UNIT.get(found[j]) if j < len(found) else None
        ahead = j + (j < len(found) and found[j] in ("to", "and", "or"))
        if unit is None and scale is None and ahead + 1 < len(found) and found[ahead][:1].isdigit():
            unit = _UNIT.get(found[ahead + 1])  # a range: "2 to 5 cm", "50–140 cm"
        if unit is None and i > 0 and found[i - 1] in ("$", "€", "£"):
            unit = _UNIT[found[i - 1]]
        out.append(Quantity(number, scale, f"sq {unit}" if square and unit else unit, i, not word[:1].isdigit()))
    return tuple(out)


_ASKED_KINDS = (
    (re.compile(r"\b(weigh|weighs|weighed|weight|how heavy)\b", re.I), "mass"),
    (re.compile(r"\bhow (far|tall|wide|deep)\b", re.I), "length"),
    (re.compile(r"\bhow fast\b", re.I), "speed"),
    (re.compile(r"\bwhat (percentage|percent|share|proportion)\b", re.I), "share"),
    (re.compile(r"\b(cost|price)\b", re.I), "money"),
)


def asked_kind(question: str) -> str | None:
    """The kind of quantity a question plainly asks for: a ``mass`` ("weigh", "how heavy"), a ``length`` ("how far",
    "how tall", "how wide", "how deep"), a ``speed`` ("how fast"), a ``share`` ("what percentage") or ``money``
    ("cost", "price"); ``None`` when it does not say (or says it ambiguously: "how long", "range")."""
    return next((kind for pattern, kind in _ASKED_KINDS if pattern.search(question)), None)


def is_unit(word: str) -> bool:
    """Whether a word names a unit ("kg", "Wh", "seconds")."""
    return fold(word) in _UNIT


def unit_kind(unit: str | None) -> str | None:
    """The kind of quantity a unit measures (``km`` -> ``length``), when the kit knows it."""
    return _KIND_OF_UNIT.get(unit or "")


def value_kind(quantity: Quantity) -> str:
    """What kind of value a number is, to compare rival values: ``year``, a kind of quantity, a unit, or ``count``."""
    if quantity.unit is None and quantity.scale is None and _YEAR.fullmatch(quantity.number):
        return "year"
    return unit_kind(quantity.unit) or quantity.unit or "count"
