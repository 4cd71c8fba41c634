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
   "no more than" is a comparison: :func:`modular_rag.attribution.relations.negated`).
6. **Comparison direction**: the answer's clause takes no side of a scale (more/less, before/after, older/younger,
   higher/lower, increase/decrease, larger/smaller, first/last, north/south, front/rear, win/lose, ...:
   :data:`modular_rag.attribution.relations.SCALES`) where that clause takes only the other.
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
from collections.abc import Sequence
from dataclasses import dataclass

from modular_rag.attribution.claim_reading import _claim, _Window, _windows
from modular_rag.attribution.claim_rules import _bound, _close
from modular_rag.attribution.cues import QuestionCues, _numbers, question_cues
from modular_rag.attribution.relations import (
    clauses,
    terms,
)
from modular_rag.providers import Providers
from modular_rag.state import Evidence
from modular_rag.text import NUMBER_WORDS, Analyzer, distinctive_tokens, fold, split_sentences

__all__ = ["ClaimVerdict", "check_claims"]

_ANALYZER = Analyzer()
_CITE = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")


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
