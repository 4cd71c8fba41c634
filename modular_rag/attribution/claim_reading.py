"""How the claim check reads an answer sentence and the sentences it cites: the windows (a cited sentence with its
antecedent) and the claim (its value, frame and names)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from modular_rag.attribution.cues import QuestionCues, _numbers
from modular_rag.attribution.relations import (
    Reading,
    clauses,
    digits,
    is_unit,
    negated,
    read,
    terms,
)
from modular_rag.state import Evidence
from modular_rag.text import ENGLISH_STOPWORDS, fold, split_sentences

_TOKEN = re.compile(r"[^\W_]+(?:[-./][^\W_]+)*")


# --- the cited sentences ------------------------------------------------------------------------------------------

_ANAPHORS = frozenset(
    {"it", "they", "he", "she", "this", "these", "that", "those", "such", "its", "their", "his", "her", "both"}
)
_DEFINITE = frozenset({"the", "each", "every"})
_NAME_JOINS = frozenset({"of", "de", "du", "von", "van", "la", "le", "del", "da"})


@dataclass(frozen=True)
class _Window:
    """A cited sentence with the antecedents it refers back to (``parts``: the sentence first)."""

    ref: int
    index: int
    parts: tuple[Reading, ...]

    @property
    def main(self) -> Reading:
        return self.parts[0]

    @functools.cached_property
    def terms(self) -> frozenset[str]:
        return frozenset().union(*(p.terms for p in self.parts))

    @functools.cached_property
    def tokens(self) -> frozenset[str]:
        return frozenset(t for p in self.parts for t in p.tokens)

    @functools.cached_property
    def numbers(self) -> frozenset[str]:
        return frozenset().union(*(p.numbers for p in self.parts))

    @property
    def text(self) -> str:
        return " ".join(p.text for p in reversed(self.parts))

    def clauses(self) -> list[Reading]:
        return [c for p in self.parts for c in clauses(p.text)]


def _refers_back(sentence: str, antecedent: Reading) -> bool:
    """Whether a sentence's subject is a pronoun, a possessive, or a definite description whose noun the antecedent
    names (at the start, or after a leading phrase closed by a comma: "Because ..., it stops")."""
    starts = [sentence]
    lead, comma, rest = sentence.partition(",")
    if comma and len(lead.split()) <= 12:
        starts.append(rest)
    for start in starts:
        found = re.findall(r"[a-z]+", fold(start))
        if found and found[0] in _ANAPHORS:
            return True
        if found and found[0] in _DEFINITE:
            noun = []
            for word in found[1:5]:
                if word in ENGLISH_STOPWORDS:
                    break
                noun.append(word)
            if noun and terms(" ".join(noun)) & antecedent.terms:
                return True
    return False


def _windows(entry: Evidence) -> tuple[Reading | None, list[_Window]]:
    """An entry's title and one window per sentence (headings dropped, a leading copy of the title too)."""
    title = str(entry["metadata"].get("title") or "").strip()
    body = "\n".join(ln for ln in entry["text"].splitlines() if not ln.lstrip().startswith("#")).strip()
    if title and body.startswith(title):
        body = body[len(title) :].lstrip(" :.-\n")
    sentences = [read(s) for s in split_sentences(body)]
    head = read(title) if title else None
    out = []
    for i, sentence in enumerate(sentences):
        parts, j = [sentence], i
        while len(parts) < 3:
            k = j - 1
            while k >= 0 and sentences[k].text[:1] in "([":  # an aside in brackets is nobody's antecedent
                k -= 1
            before = sentences[k] if k >= 0 else head
            if before is None or before in parts or not _refers_back(sentences[j].text, before):
                break
            parts.append(before)
            if k < 0:
                break
            j = k
        out.append(_Window(entry["ref"], i, tuple(parts)))
    return head, out


# --- the answer sentence ------------------------------------------------------------------------------------------

_AUXILIARY = re.compile(
    r"\b(?:is|are|was|were|be|been|being|has|have|had|do|does|did|can|could|will|would|shall|"
    r"should|may|might|must)\b",
    re.I,
)


@dataclass(frozen=True)
class _Claim:
    """What an answer sentence (or one of its clauses) says, read against its question."""

    text: Reading
    new: frozenset[str]  # the value: content terms the question does not have
    frame: frozenset[str]  # the words it relies on from the question (a short answer: the question's)
    names: tuple[tuple[str, ...], ...]  # runs of codes and names, folded
    short: bool  # a short answer sharing no word with the question, read with the question
    given: frozenset[str]  # the question's numbers
    asserts: bool  # it states a relation of its own, with a polarity (see _claim)

    @functools.cached_property
    def name_tokens(self) -> frozenset[str]:
        return frozenset(t for run in self.names for t in run)

    @functools.cached_property
    def relation(self) -> frozenset[str]:
        """Its frame words that are not names or numbers ("means", "weigh")."""
        named = terms(" ".join(self.name_tokens))
        return frozenset(t for t in self.frame - named if not t[:1].isdigit())


def _claim(text: str, cues: QuestionCues, context: frozenset[str]) -> _Claim:
    """Read an answer sentence against its question; ``context`` (the distinctive tokens of the cited text and the
    question) tells a name that starts the sentence from a capitalised first word ("Labor is strongest ...")."""
    reading = read(text)
    asked = terms(cues.text)
    runs: list[list[str]] = []
    previous = -1
    found = [m.group(0) for m in _TOKEN.finditer(text)]
    for i, word in enumerate(found):
        folded = fold(word)
        if re.fullmatch(r"[\d.,/-]+", word):
            continue
        code = any(c.isdigit() for c in word)
        unit = i > 0 and is_unit(word) and found[i - 1][:1].isdigit()  # "504 Wh"
        name = word[:1].isupper() and folded not in ENGLISH_STOPWORDS and (i > 0 or folded in context) and not unit
        if code or name:
            if runs and previous == i - 1:
                runs[-1].append(folded)
            elif runs and previous == i - 2 and found[i - 1] in _NAME_JOINS:  # "University of Melbourne"
                runs[-1] += [found[i - 1], folded]
            else:
                runs.append([folded])
            previous = i
    short = not (reading.terms & asked) and len(text.split()) <= 8
    frame = asked if short else reading.terms & asked
    value = reading.terms if cues.expects == "yes_no" else reading.terms - asked  # a yes or no: all of it
    names = terms(" ".join(t for run in runs for t in run))
    own = {t for t in reading.terms & asked - names if not t[:1].isdigit()}
    # a relation word of the question, an auxiliary or a negation: "Apollo 13", "Kublai Khan", "hold a set speed"
    # state none (their polarity is the question's)
    asserts = bool(own) or negated(text) or bool(_AUXILIARY.search(text))
    return _Claim(
        reading, value, frozenset(frame), tuple(tuple(r) for r in runs), short, frozenset(_numbers(cues.text)), asserts
    )


def _has_name(run: tuple[str, ...], parts: Sequence[Reading]) -> bool:
    """Whether a name is in one of the texts: a word (or a word it begins: "Victorians"), a run of words in order."""
    if len(run) == 1:
        return any(
            run[0] in p.tokens or (len(run[0]) >= 4 and any(t.startswith(run[0]) for t in p.tokens)) for p in parts
        )
    n = len(run)
    return any(p.tokens[i : i + n] == run for p in parts for i in range(len(p.tokens) - n + 1))


def _missing(claim: _Claim, window: _Window) -> list[str]:
    """The claim's names and the numbers it writes in digits ("one another" is no number) the window does not hold."""
    names = [" ".join(run) for run in claim.names if not _has_name(run, window.parts)]
    return names + sorted(digits(claim.text.text) - window.numbers)
