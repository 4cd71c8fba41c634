"""The claim check's rules 3 to 8 (subject with value, no better-bound rival, negation, comparison direction,
number with its unit, roles), each against a window; :mod:`modular_rag.attribution.claims` explains them."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from modular_rag.attribution.claim_reading import _Claim, _has_name, _missing, _Window
from modular_rag.attribution.cues import QuestionCues
from modular_rag.attribution.relations import (
    Quantity,
    Reading,
    asked_kind,
    clauses,
    negated,
    quantities,
    sides,
    terms,
    unit_kind,
    value_kind,
    words,
)
from modular_rag.errors import MissingDependencyError
from modular_rag.providers import Providers
from modular_rag.text import ENGLISH_STOPWORDS

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
