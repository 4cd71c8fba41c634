"""The attribution check: does what an answer sentence cites carry what it says? Model-free rules on every answer;
a judge model on top when one is configured (``judge: llm`` on the generator and the verification operators).

A bag of words is not enough: "E07 means the motor was running for more than 10 seconds [1]" uses only words of the
passage it cites ("Error E07 means speed sensor signal lost. The display has not received a pulse from the wheel
speed sensor for more than 10 seconds while the motor was running. ..."), but binds them wrongly. The rules check
relations, each against the cited *sentences*, not the passage as a bag. An answer sentence's **value** is its
content words the question does not have (all of them when the question asks yes or no); its **frame** the words it
shares with the question; its **names** the codes and names it holds (a run of capitalised words, "of" inside,
is one name: "Harvard College", "University of Melbourne"; a unit after a number is none: "504 Wh").

1. **Words** (on the whole entry): every number, code and name the answer sentence adds to the question is in the
   entry, and the sentence says something the question does not.
2. **One sentence carries the value**: at least ``lexical_threshold`` of the value's words are in one cited
   sentence (failing the words, an embedding cosine of at least ``semantic_threshold`` with it). The sentence is
   read with its antecedent (the sentence before it; the title for the first) when it opens with a pronoun or a
   possessive ("It", "They", "This", "Its") or with a definite description whose noun the antecedent names ("The
   ground ..." after "The Melbourne Cricket Ground ..."), two steps back at most, over asides in brackets. An
   answer sentence joining facts of several sentences passes when each of its clauses does.
3. **Subject with value**: that sentence, with its antecedent, names all the answer's names, those it repeats from
   the question included ("E07"); the antecedent lends names, not the relation (the answer's other frame words
   must not be found only there). A name missing there passes only as the document's topic: it is in the entry's
   title, and no other sentence names it with a frame word the carrying sentence lacks (that sentence says what
   the relation binds it to: "Error E07 means speed sensor signal lost").
4. **No better-bound rival**: when the carrying sentence lacks part of the frame (for a short answer, the
   question's words), no other cited sentence holds the whole frame with another value: another number of the same
   kind when the answer gives a number, a year or a quantity ("Harvard was formed in 1639": the sentence with 1639
   says "renamed", another "formed in 1636"), otherwise without the answer's value ("Buddhism is the fastest
   growing religion": another sentence says "Hinduism is the fastest growing religion"). Inside the carrying
   sentence, the answer's number is in the clause that best matches the answer when that clause holds a number of
   its kind ("a 28 mm road tyre ... 5.5 to 6.5 bar, while a 45 mm gravel tyre ... 2.5 to 3.5 bar"), and, when the
   clause cannot tell, no number of its kind is nearer the answer's other words ("the stem bolts take 5 Nm and the
   seatpost clamp 6 Nm": not "the stem bolts take 6 Nm").
5. **Negation**: the clause of the cited sentence that best matches a clause of the answer (the most of its words,
   then of its names, then of its value; brackets are clauses of their own) is negated ("not", "no", "never",
   "n't", "cannot", "except", ...) exactly when the answer's clause is ("not only", "not until" are no negations;
   "no more than" is a comparison: :func:`operators.relations.negated`).
6. **Comparison direction**: the answer's clause takes no side of a scale (more/less, before/after, older/younger,
   higher/lower, increase/decrease, larger/smaller, first/last, north/south, front/rear, win/lose, ...:
   :data:`operators.relations.SCALES`) where that clause takes only the other.
7. **Number with its unit**: a number the answer gives with a unit or a scale ("10 km", "25 km/h", "2.1 million")
   is in the cited sentence with that unit or bare, never only with another ("10 seconds", "2.1 billion").
8. **Roles**: two names the answer relates by a verb between them ("A defeated B") do not stand in the opposite
   roles around that verb in the cited sentence ("B defeated A"; a "by" after the verb, a passive, swaps them).

A short answer that shares no word with its question ("1636 [1]", "Denver Broncos [1]") is read with the question:
its frame is the question's words (rule 4), and a quantity must be of the kind the question plainly asks for (a
mass for "weigh", not a length); the antecedent rule of 3 does not apply to it. An answer that states no
relation of its own (no word of the question but names, no auxiliary, no negation: "Apollo 13", "Kublai Khan",
"hold a set speed") has no polarity of its own either: which clause of a passage the question's "not" goes with
is not something words can settle (questions paraphrase: "incapable of" for "could not"), so it is not refused
for standing in a negated clause (rule 5 applies when it says "not" itself); its comparisons are its own words'.
Numbers that could be the value instead (rule 4) are written in digits, are neither the answer's nor the
question's, and have the value's unit when it has one; a number inside a code ("AS-501") is no value.

What the rules cannot see (a paraphrase that changes the meaning without a polar word, a relation worded
differently, a short answer bound to the wrong subject in words the question does not use) is the judge's. For an
extractive answer (a quote) "supported" measures quote fidelity, not whether the quote answers the question.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from modular_rag.errors import MissingDependencyError
from modular_rag.providers import Providers
from modular_rag.state import Evidence
from modular_rag.text import ENGLISH_STOPWORDS, NUMBER_WORDS, Analyzer, distinctive_tokens, fold, split_sentences
from operators.attribution import QuestionCues, _numbers, question_cues
from operators.relations import (
    Quantity,
    Reading,
    asked_kind,
    clauses,
    digits,
    is_unit,
    negated,
    quantities,
    read,
    sides,
    terms,
    unit_kind,
    value_kind,
    words,
)

__all__ = ["ClaimVerdict", "check_claims"]

_ANALYZER = Analyzer()
_CITE = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
_TOKEN = re.compile(r"[^\W_]+(?:[-./][^\W_]+)*")


@dataclass(frozen=True)
class ClaimVerdict:
    """The check of one answer sentence: the refs it cites (or, uncited, was attributed to), whether they support
    it, why, which of them do (``supported_by``), and the cited sentences that carry it (``evidence``: ref and the
    sentence with its antecedent), which a judge model is shown."""

    sentence: str
    refs: tuple[int, ...]
    supported: bool
    reason: str
    attributed: bool = False
    supported_by: tuple[int, ...] = ()
    evidence: tuple[tuple[int, str], ...] = ()


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


# --- the rules ----------------------------------------------------------------------------------------------------


def _quote(text: str, width: int = 70) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def _topic(claim: _Claim, missing: list[str], head: Reading | None, windows: list[_Window], at: _Window) -> bool:
    """Rule 3's exception: the names the window lacks are the document's topic (in its title), and no other sentence
    names them with a frame word the carrying sentence lacks."""
    if head is None or not all(_has_name(tuple(m.split()), [head]) or m in head.numbers for m in missing):
        return False
    lacking = claim.relation - at.main.terms
    return not any(
        w.index != at.index and lacking & w.main.terms and any(_has_name(tuple(m.split()), w.parts) for m in missing)
        for w in windows
    )


def _values(claim: _Claim) -> list[Quantity]:
    """The claim's numbers that are its value, with their units: not the question's, not part of a code ("AS-501")."""
    return [
        q
        for q in quantities(claim.text.text)
        if q.number in claim.text.numbers
        and q.number not in claim.given
        and not any(q.number in t for t in claim.name_tokens)
    ]


def _rivals(claim: _Claim, value: Quantity | None, found: Sequence[Quantity], kinds: set[str]) -> list[Quantity]:
    """The numbers of a cited sentence that could be the value instead: of the value's kind (and unit, when it has
    one: "0.5 m" is no rival of "50 cm"), in digits, neither the claim's nor the question's."""
    return [
        q
        for q in found
        if q.number not in claim.text.numbers
        and q.number not in claim.given
        and not q.spelled
        and (
            value_kind(q) in kinds
            if value is None
            else value_kind(q) == value_kind(value) and (value.unit is None or q.unit == value.unit)
        )
    ]


def _rival(claim: _Claim, at: _Window, windows: list[_Window], threshold: float) -> str | None:
    """Rule 4: another sentence binding the whole frame to another value, or None."""
    if not claim.relation or claim.frame <= at.terms:
        return None
    kinds = {value_kind(q) for q in _values(claim)}
    for other in windows:
        if other.index == at.index or not claim.frame <= other.terms:
            continue
        if kinds:
            rivals = _rivals(claim, None, quantities(other.main.text), kinds)
            if rivals:
                return f"rival: another cited sentence binds it to {rivals[0]}: {_quote(other.main.text)}"
        elif claim.new and sum(t in other.main.terms for t in claim.new) / len(claim.new) < threshold:
            return f"rival: another cited sentence says it of something else: {_quote(other.main.text)}"
    return None


def _nearest(claim: _Claim, at: _Window) -> str | None:
    """Rule 4 inside the carrying sentence: the claim's number is in the clause that best matches the claim when
    that clause holds a number of its kind; when the clause does not tell them apart (both in it, or neither), no
    number of its kind is nearer the claim's other words than its own (each word that occurs once in the sentence;
    the median distance over two words at least)."""
    values = _values(claim)
    if not values:
        return None
    theirs = quantities(at.main.text)
    clause = _best_clause(claim.text, claim, clauses(at.main.text))
    held = clause.numbers if clause is not None else frozenset()
    undecided = []
    for value in values:
        rivals = _rivals(claim, value, theirs, set())
        inside = [q for q in rivals if q.number in held]
        if inside and value.number not in held:
            return f"binding: the cited clause has {inside[0]}, not {value}: {_quote(clause.text if clause else '')}"
        if rivals and (inside or value.number not in held):
            undecided.append(value)  # its clause does not tell it from a rival: by distance
    values = undecided
    found = words(at.main.text)
    rest = (claim.frame if claim.short else claim.text.terms - claim.new) - {q.number for q in values}
    places: dict[str, list[int]] = {}
    for i, word in enumerate(found):
        for term in terms(word) & rest:
            places.setdefault(term, []).append(i)
    once = [p[0] for p in places.values() if len(p) == 1]
    if len(once) < 2:
        return None

    def distance(q: Quantity) -> float:
        return statistics.median(abs(q.at - i) for i in once)

    for value in values:
        own = [q for q in theirs if q.number == value.number]
        rivals = _rivals(claim, value, theirs, set())
        if own and rivals:
            nearest = min(rivals, key=distance)
            if distance(nearest) < min(distance(q) for q in own):
                return (
                    f"binding: in the cited sentence {nearest}, not {value}, goes with the rest: {_quote(at.main.text)}"
                )
    return None


def _best_clause(part: Reading, claim: _Claim, clauses_: Sequence[Reading]) -> Reading | None:
    """The clause that best matches a part of the claim: the most of its words (a short answer's with its question's),
    then of its names, then of its value; the shortest of equals."""
    words_ = part.terms | (claim.frame if claim.short else frozenset())

    def score(c: Reading) -> tuple[int, int, int, int]:
        return (
            len(words_ & c.terms),
            len(claim.name_tokens & set(part.tokens) & set(c.tokens)),
            len(claim.new & part.terms & c.terms),
            -len(c.terms),
        )

    best = max(clauses_, key=score, default=None)
    return best if best is not None and score(best)[0] > 0 else None


def _units(claim: _Claim, window: _Window, cues: QuestionCues) -> str | None:
    """Rule 7 (and the kind of quantity a short answer must give), or None."""
    have = [q for p in window.parts for q in quantities(p.text)]
    for q in quantities(claim.text.text):
        if q.unit is None and q.scale is None:
            continue
        kind, asked = unit_kind(q.unit), asked_kind(cues.text)
        if claim.short and kind and asked and asked != kind:
            return f"unit: the question asks for a {asked}, the answer gives a {kind} ({q})"
        same = [h for h in have if h.number == q.number]
        if same and not any(
            (q.unit is None or h.unit is None or h.unit == q.unit)
            and (q.scale is None or h.scale is None or h.scale == q.scale)
            for h in same
        ):
            return f"unit: the answer has {q}, the cited sentence {same[0]}"
    return None


def _agent(tokens: Sequence[str], a: int, b: int, verb: int) -> int:
    """Which of two name positions ``a`` and ``b`` (a word at ``verb`` between them) is the agent: the first, unless
    a "by" follows the word before the second (a passive)."""
    first, second = min(a, b), max(a, b)
    return second if "by" in tokens[verb + 1 : second] else first


def _ends(run: tuple[str, ...], tokens: Sequence[str]) -> tuple[int, int] | None:
    """Where a name first stands in a token list: (first word, last word), or None."""
    n = len(run)
    return next(((i, i + n - 1) for i in range(len(tokens) - n + 1) if tuple(tokens[i : i + n]) == run), None)


_VERB = re.compile(
    r"[a-z]+(?:ed|es|s)|won|beat|led|took|gave|sold|bought|wrote|built|made|met|lost|left|hit|ran|"
    r"bore|fought|overthrew|succeeded|preceded|followed|married|founded|replaced"
)
"""Words read as the verb relating two names (a past or a third-person form)."""


def _roles(claim: _Claim, window: _Window) -> str | None:
    """Rule 8: two names around a relating verb in the opposite roles, or None."""
    tokens, main = list(claim.text.tokens), list(window.main.tokens)
    placed = sorted(
        (here, there, run) for run in claim.names if (here := _ends(run, tokens)) and (there := _ends(run, main))
    )
    for (a, pa, run_a), (b, pb, run_b) in zip(placed, placed[1:], strict=False):
        if pa[1] == pb[1]:
            continue
        for v in range(a[1] + 1, b[0]):
            verb = tokens[v]
            if not _VERB.fullmatch(verb) or verb in ENGLISH_STOPWORDS:
                continue
            at = [i for i in range(min(pa[1], pb[1]) + 1, max(pa[1], pb[1])) if terms(main[i]) == terms(verb)]
            if not at:
                continue
            ours = run_a if _agent(tokens, a[1], b[1], v) == a[1] else run_b
            theirs = run_a if _agent(main, pa[1], pb[1], at[0]) == pa[1] else run_b
            if ours != theirs:
                return (
                    f"roles: the answer has {' '.join(run_a)} {verb} {' '.join(run_b)}, the cited sentence the "
                    f"other way round: {_quote(window.main.text)}"
                )
    return None


def _relations(claim: _Claim, window: _Window, cues: QuestionCues) -> str | None:
    """Rules 5-8 between a claim and the window carrying it: why they disagree, or None."""
    for part in clauses(claim.text.text) or [claim.text]:
        clause = _best_clause(part, claim, window.clauses())
        if clause is None:
            continue
        ours, theirs = negated(part.text), negated(clause.text)
        if ours != theirs and (ours or claim.asserts):  # a bare value's polarity is its question's: unread
            said = ("says not", "does not say not") if ours else ("says it is so", "says not")
            return f"negation: the answer {said[0]}, the cited sentence {said[1]}: {_quote(clause.text)}"
        taken, against = sides(part.text), sides(clause.text)
        for dim, sign in sorted(taken):
            if (dim, -sign) in against and (dim, sign) not in against:
                return f"comparison: the answer takes the other side ({dim}) of {_quote(clause.text)}"
    return _units(claim, window, cues) or _roles(claim, window)


def _bound(
    claim: _Claim,
    cues: QuestionCues,
    head: Reading | None,
    windows: list[_Window],
    threshold: float,
    close: Callable[[str], set[int]],
) -> tuple[_Window | None, str]:
    """The window that carries the claim under rules 2-8, or None and why not; ``close`` gives the sentences an
    embedding puts near a text (asked only when no sentence holds enough of the claim's value)."""
    scored = sorted(
        ((sum(t in w.main.terms for t in claim.new) / len(claim.new), w) for w in windows), key=lambda s: -s[0]
    )
    candidates = [w for s, w in scored if s >= threshold]
    if not candidates:
        near = close(claim.text.text)
        candidates = [w for _, w in scored if w.index in near]
    if not candidates:
        return None, f"at most {scored[0][0] if scored else 0.0:.0%} of its new words in one cited sentence"
    why: tuple[int, str] = (-1, "")  # the reason of the candidate that went furthest (a named subject first)
    for window in candidates:
        missing = _missing(claim, window)
        borrowed = set() if claim.short else claim.relation & (window.terms - window.main.terms)
        if missing and not _topic(claim, missing, head, windows, window):
            problem = (
                0,
                f"binding: the cited sentence that says it does not name {missing[0]!r}: {_quote(window.text)}",
            )
        elif borrowed:
            problem = (
                0,
                f"binding: the cited sentence says {sorted(borrowed)[0]!r} only of what it refers back "
                f"to: {_quote(window.text)}",
            )
        else:
            problem = (
                1,
                _rival(claim, window, windows, threshold)
                or _nearest(claim, window)
                or _relations(claim, window, cues)
                or "",
            )
        if not problem[1]:
            return window, ""
        why = max(why, problem, key=lambda p: p[0])
    return None, why[1]


def _close(
    text: str, windows: list[_Window], providers: Providers | None, threshold: float | None, chunk_id: str = ""
) -> set[int]:
    """The sentences an embedding puts within ``threshold`` cosine of the claim (the paraphrase fallback); the
    sentences' vectors are the ones the index stored for the cited chunk when it has them."""
    if threshold is None or providers is None or not windows or not _has_encoder(providers):
        return set()
    encoder = providers.encoder
    stored = providers.index.sentence_vectors([chunk_id]).get(chunk_id, {}) if chunk_id else {}
    missing = [w.main.text for w in windows if w.main.text not in stored]
    vectors = {**stored, **(dict(zip(missing, encoder.encode(missing), strict=True)) if missing else {})}
    sims = np.vstack([vectors[w.main.text] for w in windows]) @ encoder.encode([text])[0]
    return {w.index for w, sim in zip(windows, sims.tolist(), strict=True) if sim >= threshold}


def _has_encoder(providers: Providers) -> bool:
    try:
        providers.encoder.encode_query("")
    except MissingDependencyError:
        return False
    return True


_Support = tuple[bool, str, float, list[_Window]]


def _support(
    text: str,
    cues: QuestionCues,
    entry: Evidence,
    threshold: float,
    providers: Providers | None,
    semantic_threshold: float | None,
) -> _Support:
    """Whether an entry supports a claim: ``(ok, reason, share of its new words in the entry, windows carrying it)``."""
    source = entry["text"]
    missing_numbers = _numbers(text) - _numbers(source) - _numbers(cues.text)
    if missing_numbers:
        return False, f"number {sorted(missing_numbers)[0]} not in the cited text", 0.0, []
    lowered = source.lower()
    names = {n for n in distinctive_tokens(text) - cues.distinctive - distinctive_tokens(source) if n not in lowered}
    if names:
        return False, f"{sorted(names)[0]!r} not in the cited text", 0.0, []
    asked = frozenset() if cues.expects == "yes_no" else terms(cues.text)  # a yes or no says all of itself
    new = [t for t in dict.fromkeys(NUMBER_WORDS.get(t, t) for t in _ANALYZER(text)) if t not in asked]
    if not new:
        return False, "says nothing the question does not", 0.0, []
    have = terms(source)
    share = sum(t in have for t in new) / len(new)
    head, windows = _windows(entry)

    @functools.cache
    def close(claim: str) -> set[int]:
        return _close(claim, windows, providers, semantic_threshold, entry["chunk_id"])

    if share < threshold and not close(text):
        return False, f"{share:.0%} of its new words in the cited text", share, []
    context = frozenset(fold(t) for t in distinctive_tokens(f"{source} {cues.text}"))
    window, why = _bound(_claim(text, cues, context), cues, head, windows, threshold, close)
    if window is not None:
        return True, f"{share:.0%} of its new words in the cited text, carried by one sentence", share, [window]
    found = []
    parts = [c for c in (_claim(p.text, cues, context) for p in clauses(text)) if c.new]
    for part in parts if len(parts) > 1 else []:  # facts of several sentences joined: each clause on its own
        carrier, _ = _bound(part, cues, head, windows, threshold, close)
        if carrier is None:
            break
        found.append(carrier)
    else:
        if found:
            return True, f"{share:.0%} of its new words in the cited text, clause by clause", share, found
    return False, why, share, []


def check_claims(
    text: str,
    question: str,
    evidence: Sequence[Evidence],
    *,
    lexical_threshold: float = 0.6,
    semantic_threshold: float | None = 0.8,
    providers: Providers | None = None,
) -> list[ClaimVerdict]:
    """Check each sentence of an answer against the evidence entries it cites (``[n]``) by the rules of this
    module; a sentence citing nothing is checked against every entry and, when one supports it, attributed to it.

    Args:
        text: The answer.
        question: The question it answers (its words are the answer's frame, not its value).
        evidence: The evidence entries, by ``ref``.
        lexical_threshold: The share of a sentence's new content words one cited sentence must hold.
        semantic_threshold: Or an embedding cosine this close to one cited sentence (``None``: words only).
        providers: The flow's providers (their encoder, for ``semantic_threshold``).

    Returns:
        One verdict per answer sentence that has content words.
    """
    cues = question_cues(question)
    by_ref = {e["ref"]: e for e in evidence}
    out: list[ClaimVerdict] = []
    for sentence in split_sentences(text):
        refs = tuple(dict.fromkeys(int(p) for m in _CITE.finditer(sentence) for p in re.split(r"[,;]", m.group(1))))
        claim = " ".join(re.sub(r"\s*" + _CITE.pattern, "", sentence).split())
        if not _ANALYZER(claim):
            continue
        cited = [by_ref[r] for r in refs if r in by_ref]
        attributed = not cited
        pool = cited or list(evidence)
        verdicts = [(ev, *_support(claim, cues, ev, lexical_threshold, providers, semantic_threshold)) for ev in pool]
        ok = [v for v in verdicts if v[1]]
        if ok:
            best = max(ok, key=lambda v: v[3])
            by = (best[0]["ref"],) if attributed else tuple(v[0]["ref"] for v in ok)
            carried = tuple((w.ref, w.text) for v in ok if v[0]["ref"] in by for w in v[4])
            out.append(
                ClaimVerdict(
                    claim, by if attributed else tuple(e["ref"] for e in cited), True, best[2], attributed, by, carried
                )
            )
        elif not pool:
            out.append(ClaimVerdict(claim, (), False, "no evidence to cite"))
        else:
            reason = verdicts[0][2] if cited else "cites nothing, and no passage supports it"
            out.append(ClaimVerdict(claim, tuple(e["ref"] for e in cited), False, reason))
    return out
