"""Evidence selection and attribution, shared by the post-retrieval and generation operators.

Three questions a small model should not have to answer alone:

* **Which sentences of the evidence answer the question?** :class:`SentenceScorer` scores each sentence by its
  embedding cosine with the question, the IDF-weighted share of the question's terms it (or its chunk's title)
  contains, and whether it holds what the question asks for (a number for "how much", a year for "when", a name
  for "who", ...). The evidence-first context builder puts the best sentences first and short; the extractive
  answerer quotes the best one.
* **What is the answer inside that sentence?** :func:`best_span` keeps the part of the sentence the question does
  not already say ("Error E07 means speed sensor signal lost." -> "speed sensor signal lost"), narrowed to a number
  or a date when the question asks for one.

Whether a written answer is supported by what it cites is :mod:`operators.claims`' question.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from modular_rag.errors import MissingDependencyError
from modular_rag.providers import Providers
from modular_rag.sentences import chunk_sentences, evidence_sentences, sentence_terms
from modular_rag.state import Evidence
from modular_rag.text import NUMBER_WORDS, Analyzer, distinctive_tokens

__all__ = [
    "Expect",
    "QuestionCues",
    "question_cues",
    "evidence_sentences",
    "SentenceWeights",
    "SentenceScorer",
    "ScoredSentence",
    "best_span",
    "answer_clause",
]

_ANALYZER = Analyzer()
_CITE = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
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


@dataclass(frozen=True)
class ScoredSentence:
    """A sentence of an evidence entry (``position`` in its chunk) with its score for the question and the parts of
    that score."""

    sentence: str
    ref: int
    chunk_id: str
    position: int
    score: float
    cosine: float
    coverage: float
    cue: float


class SentenceWeights(BaseModel):
    """The weights of a sentence's score for a question (see :class:`SentenceScorer`); the defaults were chosen on
    held-out questions of SQuAD and NQ-open (``benchmarks/README.md``)."""

    model_config = ConfigDict(extra="forbid")

    dense: float = Field(1.0, ge=0.0, le=10.0, description="embedding cosine of question and sentence")
    lexical: float = Field(
        1.0,
        ge=0.0,
        le=10.0,
        description="IDF-weighted share of the question's terms in the sentence (its chunk's title counts half)",
    )
    cue: float = Field(
        0.5, ge=0.0, le=10.0, description="the sentence holds what the question asks for (a quantity, a date, a name)"
    )
    prior: float = Field(0.2, ge=0.0, le=10.0, description="1 / rank of the sentence's chunk in the candidates")
    names: float = Field(
        0.25,
        ge=0.0,
        le=10.0,
        description="share of the question's codes, numbers and names in the sentence or its chunk's title",
    )


_CACHE_LOCK = threading.Lock()
_SENTENCE_VECTORS: weakref.WeakKeyDictionary[Any, OrderedDict[str, np.ndarray]] = weakref.WeakKeyDictionary()


def _sentence_cache(encoder: Any) -> OrderedDict[str, np.ndarray]:
    with _CACHE_LOCK:
        cache = _SENTENCE_VECTORS.get(encoder)
        if cache is None:
            cache = _SENTENCE_VECTORS[encoder] = OrderedDict()
        return cache


@dataclass
class SentenceScorer:
    """Scores evidence sentences for a question: ``dense * cosine + lexical * coverage + cue * expected-type match +
    prior * (1 / chunk rank) + names * share of the question's codes, numbers and names in the sentence or its
    chunk's title`` (:class:`SentenceWeights`).

    Args:
        providers: The flow's providers (their encoder embeds sentences; the sparse index gives term IDFs).
        weights: The weights of the five parts.
    """

    providers: Providers
    weights: SentenceWeights = field(default_factory=SentenceWeights)
    lexical_only: bool = False
    """Set when the flow has no embedder: sentences are then scored by their words alone."""

    def idf(self, term: str) -> float:
        """The term's IDF in the index (a term the index has never seen counts as the rarest)."""
        return self.providers.index.idf(term)

    def term_weights(self, cues: QuestionCues) -> dict[str, float]:
        """The IDF of each of the question's terms (one read of the index's statistics)."""
        return self.providers.index.idfs(list(cues.terms)) if cues.terms else {}

    def coverage(self, cues: QuestionCues, terms: set[str], weights: dict[str, float] | None = None) -> float:
        """IDF-weighted share of the question's terms found in ``terms`` (``weights``: :meth:`term_weights` of
        ``cues``, when the caller has them)."""
        weights = self.term_weights(cues) if weights is None else weights
        total = sum(weights.values())
        return sum(w for t, w in weights.items() if t in terms) / total if total > 0 else 0.0

    def vectors(self, sentences: Sequence[str], chunk_ids: Sequence[str] | None = None) -> np.ndarray:
        """Sentence embeddings: the ones the index stored for the sentences' chunks (``chunk_ids``, one per
        sentence), else embedded now and cached by text for the encoder (shared by every scorer of the same
        encoder: the context builder and the generator score the same sentences)."""
        stored = self.providers.index.sentence_vectors(list(chunk_ids)) if chunk_ids is not None else {}
        found = (
            [stored.get(c, {}).get(s) for s, c in zip(sentences, chunk_ids or (), strict=True)]
            if stored
            else [None] * len(sentences)
        )
        cache = _sentence_cache(self.providers.encoder)
        with _CACHE_LOCK:
            missing = [
                s
                for s in dict.fromkeys(s for s, v in zip(sentences, found, strict=True) if v is None)
                if s not in cache
            ]
        fresh = self.providers.encoder.encode(missing) if missing else np.zeros((0, 0), np.float32)
        with _CACHE_LOCK:
            for s, v in zip(missing, fresh, strict=True):
                cache[s] = v
            rows = [v if v is not None else cache[s] for s, v in zip(sentences, found, strict=True)]
            while len(cache) > 20_000:
                cache.popitem(last=False)
        return np.vstack(rows) if rows else np.zeros((0, 0), np.float32)

    def score(self, question: str, evidence: Sequence[Evidence]) -> list[ScoredSentence]:
        """Every content sentence of the evidence, best first (ties: evidence order, then sentence order)."""
        cues = question_cues(question)
        w = self.weights
        idf = self.term_weights(cues)
        rows: list[tuple[str, Evidence, int, int]] = []
        for rank, ev in enumerate(evidence):
            rows += [(s, ev, rank, i) for i, s in enumerate(chunk_sentences(ev["text"], ev["metadata"]))]
        if not rows:
            return []
        try:
            q = self.providers.encoder.encode_query(question)
            cosines = self.vectors([s for s, _, _, _ in rows], [ev["chunk_id"] for _, ev, _, _ in rows]) @ q
        except MissingDependencyError:  # a flow without an embedder (BM25 and a remote model): words only
            self.lexical_only = True
            cosines = np.zeros(len(rows), dtype=np.float32)
        out = []
        for (sentence, ev, rank, position), cos in zip(rows, cosines.tolist(), strict=True):
            title = str(ev["metadata"].get("title") or "")
            terms = set(sentence_terms(sentence))
            # title terms count half: "It weighs 7.6 kg" under the title "TW-900 Carbon Road" is about the TW-900
            cov = 0.5 * self.coverage(cues, terms | set(sentence_terms(title)), idf) + 0.5 * self.coverage(
                cues, terms, idf
            )
            cue = _expected(cues.expects, sentence, cues) if cues.expects != "other" else 0.0
            where = f"{sentence} {title}".lower()
            named = (sum(t in where for t in cues.distinctive) / len(cues.distinctive)) if cues.distinctive else 0.0
            total = w.dense * cos + w.lexical * cov + w.cue * cue + w.prior / (1 + rank) + w.names * named
            out.append(ScoredSentence(sentence, ev["ref"], ev["chunk_id"], position, total, cos, cov, cue))
        order = sorted(range(len(out)), key=lambda i: -out[i].score)
        return [out[i] for i in order]

    def bridge(
        self,
        question: str,
        best: ScoredSentence,
        evidence: Sequence[Evidence],
        *,
        min_rest: float = 0.15,
        min_coverage: float = 0.25,
    ) -> ScoredSentence | None:
        """When the best sentence is a bridge (it names the title of another evidence entry the question does not
        name, and its passage leaves at least ``min_rest`` of the question's IDF weight uncovered, so the question
        asks about that entity), the sentence of that entry that best covers the rest of the question (IDF-weighted,
        plus half its expected-type cue; ties: the better-scored sentence), if it covers at least ``min_coverage`` of
        it or holds a quantity in the unit the question asks for; failing that, the same from the entries that
        mention that entity; else ``None``. Needs the index's link table."""
        index = self.providers.index
        whole = index.chunks([best.chunk_id, *(e["chunk_id"] for e in evidence)])  # whole chunks, not the packed text
        if best.chunk_id not in whole:
            return None
        links = index.links
        named = links.named_in(question)
        targets = {c for _, hit in links.mentions(best.sentence, exclude=best.chunk_id) for c in hit if c not in named}
        if not targets:
            return None
        cues = question_cues(question)
        said = set(_ANALYZER(whole[best.chunk_id]["text"]))  # what the bridge passage covers
        rest = QuestionCues(question, tuple(t for t in cues.terms if t not in said), cues.expects, cues.distinctive)
        if not rest.terms or self.coverage(cues, set(rest.terms)) < min_rest:
            return None
        own = [e for e in evidence if e["chunk_id"] in targets and e["chunk_id"] != best.chunk_id]

        def mentions(entry: Evidence) -> set[str]:  # in the whole chunk, not only the sentences the pack kept
            text = whole[entry["chunk_id"]]["text"] if entry["chunk_id"] in whole else entry["text"]
            return {c for _, hit in links.mentions(text, exclude=entry["chunk_id"]) for c in hit}

        def about() -> list[Evidence]:  # else the passages that mention the same entity ("... the TW-550 Gravel is
            # built in Kestrel Harbour"); read only when the bridge's own entries give nothing
            return [
                e
                for e in evidence
                if e["chunk_id"] not in {best.chunk_id, *(o["chunk_id"] for o in own)} and targets & mentions(e)
            ]

        rest_weights = self.term_weights(rest)
        for entries in (lambda: own, about):
            scored = [
                (self.coverage(rest, set(sentence_terms(s.sentence)), rest_weights), s)
                for s in self.score(question, entries())
            ]
            if not scored:
                continue
            # the rest of the question, or what it asks for (a quantity with the right unit, a date, a name)
            coverage, sentence = max(scored, key=lambda cs: (cs[0] + 0.5 * cs[1].cue, cs[1].score))
            exact = cues.expects == "number" and sentence.cue >= 1.0  # a quantity in the unit the question asks for
            if coverage >= min_coverage or exact:
                return sentence
        return None


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
    "duration": frozenset(
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
    ),
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


def _numbers(text: str) -> set[str]:
    """The numbers of a text, written as digits ("five" is "5")."""
    words = {NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text.lower()) if w in NUMBER_WORDS}
    return {m.group(0).replace(",", "") for m in _NUMBER.finditer(text)} | words
