"""Test-set module: question makers that need no model, and the checks every question passes.

Makers (port ``question``) read passages and write questions with their gold passages and answer spans:

- ``inverse_cloze``: a sentence of a passage, reworded, as the query; the passage (kept whole in the index) is gold.
- ``fact_question``: a sentence holding a typed span (a number, a date, a name), turned into a wh-question or a
  cloze around it; the span is the answer.
- ``bridge``: two hops across a link between documents: a fact of passage B asked through what passage A says of
  B's title, without naming B (HotpotQA's bridge questions); A and B are gold, the answer is B's span.

Every maker rewords its source sentence the same way (:func:`surface`): the answer is cut out, words of what must
not be named are removed, the sentence is cut to ``max_words`` around the answer and a share ``drop`` of its
content words is left out (seeded), because the passage stays whole in the index: a question copied from it would
be a verbatim substring, which lexical search finds by construction and real users never ask.

Checks (port ``check``): ``answer_in_passage`` (the answer is in a gold passage, by span containment or the
attribution check), ``not_verbatim`` (no long run of the question is copied from its passage or the corpus),
``dedup`` (no near-duplicate of an earlier question). The LLM maker and the closed-book check are in
:mod:`operators.questions_llm`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from pydantic import Field

from modular_rag.providers import Providers
from modular_rag.questions import PassageSet, Question, QuestionCheck, QuestionMaker, Span, Verdict
from modular_rag.registry import OperatorParams, Port, operator
from modular_rag.text import ENGLISH_STOPWORDS, normalize_answer

__all__ = ["typed_spans", "surface", "find_answer", "linked_share", "AnswerType"]

AnswerType = str
_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_DATE = re.compile(
    rf"\b(?:\d{{1,2}}\s+)?(?:{_MONTHS})\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?)?,?\s+\d{{4}}\b"
    r"|\b(?:1[5-9]\d\d|20[0-4]\d)s?\b"
)
_NUMBER = re.compile(
    r"(?<![^\s(\"'])\d+(?:[.,]\d+)*(?:\s?%|\s(?:percent|per cent|km|kg|mg|ml|cm|mm|m|h)\b|"
    r"\s(?:million|billion|thousand|hundred)(?:\s[a-z]{3,}s\b)?|\s(?!was\b|has\b|is\b)[a-z]{2,}s\b)?"
    r"(?![^\s.,;:)\"'])"
)
_NAME = re.compile(r"(?<![^\s(\"'])[A-Z][\w'-]*(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][\w'-]*){0,3}(?![^\s.,;:)\"'])")
_TOKEN = re.compile(r"[^\W_]+(?:[-'./][^\W_]+)*")
_PART = re.compile(r"\w+")  # how the link table splits a name into words ("TW-550" -> "tw", "550")
_BLANK = "___"
WH = {"number": "How many", "date": "When", "name": "Who"}
"""The wh-word a question about each answer type starts with."""


def typed_spans(sentence: str, types: Sequence[str], exclude: str = "") -> list[tuple[str, int, int]]:
    """The typed spans of a sentence, as ``(type, start, end)``: dates (a month with a year, or a year), numbers
    (with a unit word when one follows) and names (runs of capitalised words not starting the sentence); a name
    equal to ``exclude`` (the passage's title) or made of stop words is left out, and spans do not overlap."""
    found: list[tuple[str, int, int]] = []
    taken: list[tuple[int, int]] = []

    def free(s: int, e: int) -> bool:
        return all(e <= a or s >= b for a, b in taken)

    for kind, pattern in (("date", _DATE), ("number", _NUMBER), ("name", _NAME)):
        for m in pattern.finditer(sentence):
            s, e = m.span()
            if not free(s, e):
                continue
            taken.append((s, e))  # a span a type claims is not another type's, even when not wanted
            if kind not in types:
                continue
            if kind == "name":
                words = m.group(0).split()
                if s == 0 or m.group(0) == exclude or all(w.lower() in ENGLISH_STOPWORDS for w in words):
                    continue
                if len(m.group(0)) < 3:
                    continue
            found.append((kind, s, e))
    return sorted(found, key=lambda t: t[1])


def surface(
    text: str,
    rng: random.Random,
    *,
    answer: tuple[int, int] | None = None,
    blank: bool = False,
    forbid: frozenset[str] = frozenset(),
    drop: float = 0.3,
    max_words: int = 16,
    min_content: int = 3,
    rarity: Mapping[str, int] | None = None,
    swap: float = 0.0,
    synonym: Callable[[str], str | None] | None = None,
) -> str:
    """A sentence reworded as a query: the ``answer`` span cut out (or replaced by ``___`` with ``blank``), words
    whose lower case is in ``forbid`` removed, cut to ``max_words`` words around the answer (or from a seeded start),
    and each content word left out with probability ``drop`` while more than ``min_content`` remain; with ``rarity``
    (passages per word), the share ``drop`` of the content words left out is the rarest ones instead. Each content
    word kept is then replaced by ``synonym(word)`` with probability ``swap`` (when it has one)."""
    words: list[str] = []
    at = -1
    for m in _TOKEN.finditer(text):
        if answer is not None and m.start() < answer[1] and m.end() > answer[0]:
            if at < 0:
                at = len(words)
                if blank:
                    words.append(_BLANK)
            continue
        if answer is not None and at < 0 and m.start() >= answer[1]:
            at = len(words)
            if blank:
                words.append(_BLANK)
        if not forbid or not forbid & set(_PART.findall(m.group(0).lower())):
            words.append(m.group(0))
    if len(words) > max_words:
        if at >= 0:
            lo = max(0, min(at - max_words // 2, len(words) - max_words))
        else:
            lo = rng.randrange(0, len(words) - max_words + 1)
        words = words[lo : lo + max_words]
    content = [i for i, w in enumerate(words) if w != _BLANK and w.lower() not in ENGLISH_STOPWORDS]
    dropped: set[int] = set()
    if rarity is not None:
        ties = {i: rng.random() for i in content}
        rarest = sorted(content, key=lambda i: (rarity.get(words[i].lower(), 0), ties[i]))
        dropped = set(rarest[: max(0, min(round(drop * len(content)), len(content) - min_content))])
    for i in content if rarity is None else ():
        if len(content) - len(dropped) <= min_content:
            break
        if rng.random() < drop:
            dropped.add(i)
    if synonym is not None and swap > 0:
        for i in content:
            if i not in dropped and rng.random() < swap:
                words[i] = synonym(words[i]) or words[i]
    return " ".join(w for i, w in enumerate(words) if i not in dropped)


def find_answer(answer: str, passages: PassageSet, gold: Sequence[str]) -> tuple[Span, ...]:
    """Where ``answer`` occurs in the gold passages (case-insensitive, first occurrence per passage)."""
    if not answer.strip():
        return ()
    spans = []
    for pid in gold:
        text = passages[passages.position[pid]].text
        at = text.lower().find(answer.lower().strip())
        if at >= 0:
            spans.append(Span(pid, at, at + len(answer.strip())))
    return tuple(spans)


def _alias_words(title: str) -> frozenset[str]:
    """The lower-cased content words of a title (without a trailing parenthesis), which a bridge question must
    not say."""
    base = re.sub(r"\s*\([^)]*\)\s*$", "", title)
    return frozenset(w for w in _PART.findall(base.lower()) if w not in ENGLISH_STOPWORDS)


class SurfaceParams(OperatorParams):
    drop: float = Field(
        0.5,
        ge=0.0,
        lt=1.0,
        description="share of the sentence's content words left out (seeded); "
        "0.5 ranked flows closest to SciFact's training claims (benchmarks/testset.py --fit)",
    )
    max_words: int = Field(16, ge=4, le=100, description="the question keeps at most this many words of the sentence")
    min_words: int = Field(6, ge=3, description="sentences with fewer words are not used")
    focus: str = Field(
        "random",
        pattern="^(random|rare)$",
        description="which content words are left out: random ones, or the rarest in the corpus",
    )
    lead: int = Field(0, ge=0, description="use only the passage's first this many sentences (0: any sentence)")
    title_words: int = Field(
        0, ge=0, le=20, description="words of the passage's title the question also says (after the same leaving out)"
    )
    swap: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of the kept content words replaced by their nearest "
        "neighbour in the corpus vocabulary by the embedder (another word, another stem): the "
        "vocabulary mismatch of a question written in other words",
    )
    vocabulary: int = Field(10000, ge=100, description="swap: the most frequent corpus words a neighbour is taken from")


def _rarity(passages: PassageSet, params: SurfaceParams) -> Mapping[str, int] | None:
    return passages.df if params.focus == "rare" else None


def _synonyms(passages: PassageSet, params: SurfaceParams, providers: Providers) -> Callable[[str], str | None] | None:
    """``word -> its nearest neighbour`` among the corpus's ``vocabulary`` most frequent content words (by the
    embedder's cosine; not the word's own stem, not a word containing it), built once per passage set."""
    if params.swap <= 0:
        return None
    key = f"synonyms:{params.vocabulary}"
    if key not in passages.derived:
        from modular_rag.text import Analyzer

        stem = Analyzer()
        ranked = sorted(passages.df.items(), key=lambda kv: -kv[1])
        words = [w for w, n in ranked if n >= 2 and w.isalpha() and len(w) > 3 and w not in ENGLISH_STOPWORDS]
        words = words[: params.vocabulary]
        vectors = providers.encoder.encode(words) if words else None
        stems = [tuple(stem(w)) for w in words]

        @lru_cache(maxsize=100_000)
        def nearest(word: str) -> str | None:
            low = word.lower()
            if vectors is None or not low.isalpha() or len(low) <= 3:
                return None
            own = tuple(stem(low))
            sims = vectors @ providers.encoder.encode([low])[0]
            for j in sims.argsort()[::-1][:10]:
                if stems[j] != own and low not in words[j] and words[j] not in low:
                    return words[j]
            return None

        passages.derived[key] = nearest
    return passages.derived[key]


def _sentences(passages: PassageSet, i: int, params: SurfaceParams) -> list[tuple[int, int]]:
    spans = passages.sentences(i)
    return spans[: params.lead] if params.lead else spans


def _titled(text: str, title: str, params: SurfaceParams, rng: random.Random, rarity: Any) -> str:
    """``text`` with up to ``title_words`` words of ``title`` before it (none when ``title_words`` is 0)."""
    if not params.title_words or not title:
        return text
    named = surface(title, rng, drop=params.drop, max_words=params.title_words, min_content=1, rarity=rarity)
    return f"{named}: {text}" if named else text


class ClozeParams(SurfaceParams):
    remove: float = Field(
        0.9,
        ge=0.0,
        le=1.0,
        description="share of the questions whose sentence is removed from its "
        "passage in the set's corpus (held out, as in Lee et al. 2019's inverse cloze task, which "
        "removes it in 90% of cases): the passage must then be found by its other sentences, not "
        "by a copy of the query; only passages of two sentences or more are held out from. 0.9 "
        "with drop 0.5 ranked flows closest to real questions on fit data "
        "(benchmarks/results/testset-fit.txt)",
    )


@operator("testset", "question_making", "inverse_cloze", port=Port.QUESTION)
def inverse_cloze(params: ClozeParams, providers: Providers) -> QuestionMaker:
    """Inverse cloze: a sentence of a passage, reworded (words left out, cut to ``max_words``), is the query; the
    passage is gold, and the sentence is the evidence (no short answer). With ``remove``, that share of the
    sentences is held out: :func:`~modular_rag.eval.testset.make_testset` writes the set's corpus without them
    (``meta["held_out"]``)."""

    def make(passages: PassageSet, n: int, rng: random.Random) -> list[Question]:
        out: list[Question] = []
        for i in passages.order(rng):
            if len(out) >= n:
                break
            p = passages[i]
            spans = [s for s in _sentences(passages, i, params) if len(p.text[s[0] : s[1]].split()) >= params.min_words]
            if not spans:
                continue
            s, e = rng.choice(spans)
            held = params.remove > 0 and rng.random() < params.remove
            if held and len(passages.sentences(i)) < 2:
                continue  # holding out its only sentence would leave the passage empty
            text = surface(
                p.text[s:e],
                rng,
                drop=params.drop,
                max_words=params.max_words,
                rarity=_rarity(passages, params),
                swap=params.swap,
                synonym=_synonyms(passages, params, providers),
            )
            text = _titled(text, p.title, params, rng, _rarity(passages, params))
            meta: dict[str, Any] = {"sentence": p.text[s:e], **({"held_out": True} if held else {})}
            out.append(Question(text, "inverse_cloze", (p.id,), "", "sentence", (Span(p.id, s, e),), meta))
        return out

    return make


class FactParams(SurfaceParams):
    form: str = Field("wh", pattern="^(wh|cloze)$", description="wh: 'When ...?'; cloze: the answer as ___")
    types: list[str] = Field(["number", "date", "name"], min_length=1, description="answer types asked for")


def _fact(
    p_text: str, sentences: Sequence[tuple[int, int]], params: FactParams, rng: random.Random, exclude: str = ""
) -> tuple[int, int, str, int, int] | None:
    """A sentence of a passage with a typed span: ``(sentence start, end, type, span start, end)`` in passage
    offsets, or ``None``."""
    options: list[tuple[int, int, str, int, int]] = []
    for s, e in sentences:
        sentence = p_text[s:e]
        if len(sentence.split()) < params.min_words:
            continue
        options.extend((s, e, kind, s + a, s + b) for kind, a, b in typed_spans(sentence, params.types, exclude))
    return rng.choice(options) if options else None


def _ask(body: str, kind: str, form: str) -> str:
    return f"{body.rstrip('.')}." if form == "cloze" else f"{WH[kind]} {body}?"


@operator("testset", "question_making", "fact_question", port=Port.QUESTION)
def fact_question(params: FactParams, providers: Providers) -> QuestionMaker:
    """Typed-span questions: a sentence with a number, a date or a name becomes a wh-question ("When ...?") or a
    cloze (``___``) around it, reworded like an inverse cloze; the span is the answer, its passage gold."""

    def make(passages: PassageSet, n: int, rng: random.Random) -> list[Question]:
        out: list[Question] = []
        for i in passages.order(rng):
            if len(out) >= n:
                break
            p = passages[i]
            fact = _fact(p.text, _sentences(passages, i, params), params, rng, exclude=p.title)
            if fact is None:
                continue
            s, e, kind, a, b = fact
            body = surface(
                p.text[s:e],
                rng,
                answer=(a - s, b - s),
                blank=params.form == "cloze",
                drop=params.drop,
                max_words=params.max_words,
                rarity=_rarity(passages, params),
                swap=params.swap,
                synonym=_synonyms(passages, params, providers),
            )
            body = _titled(body, p.title, params, rng, _rarity(passages, params))
            out.append(
                Question(
                    _ask(body, kind, params.form),
                    params.form,
                    (p.id,),
                    p.text[a:b],
                    kind,
                    (Span(p.id, a, b),),
                    {"sentence": p.text[s:e]},
                )
            )
        return out

    return make


class BridgeParams(FactParams):
    max_words: int = Field(
        6,
        ge=3,
        le=100,
        description="words of passage B's fact sentence kept (few: the question "
        "points at B through A, not by B's own words)",
    )
    context_words: int = Field(8, ge=2, le=40, description="words of the bridge sentence (passage A) kept")
    name_first: bool = Field(True, description="name passage A's title in the question (as HotpotQA does)")
    anchor: str = Field(
        "title",
        pattern="^(title|any)$",
        description="title: cross only links whose anchor is passage B's whole title (an entity "
        "named as it is titled: Wikipedia-like corpora have many, abstracts titled by a "
        "sentence almost none); any: every anchor of the link table (acronyms, names "
        "inside a passage, the subject a first sentence defines)",
    )


def _targets(passages: PassageSet, i: int, anchor: str) -> list[tuple[tuple[str, ...], int]]:
    """The bridges out of passage ``i``: ``(anchor, passage B)`` for each anchor its text mentions that names one
    document (with ``anchor`` ``title``: only anchors that are B's whole title)."""
    from modular_rag.anchors import words_of

    out = []
    for alias, hit in passages.links.mentions(passages[i].text, exclude=i):
        if len({passages[j].doc or passages[j].id for j in hit}) != 1:
            continue  # the anchor names several documents: the bridge is ambiguous
        j = min(hit)
        if anchor == "title" and tuple(alias) != tuple(words_of(re.sub(r"\s*\([^)]*\)\s*$", "", passages[j].title))):
            continue
        out.append((tuple(alias), j))
    return out


def linked_share(passages: PassageSet, anchor: str = "title", sample: int = 1000) -> float:
    """The share of passages with a bridge out of them (:func:`_targets`), on a seeded sample of ``sample``: how
    much of the corpus two-hop questions can be made from. HotpotQA's paragraphs 0.52, SciFact's abstracts 0.02,
    SQuAD's 319 paragraphs 0 (with ``anchor`` ``title``)."""
    if not len(passages):
        return 0.0
    positions = passages.order(random.Random("linked_share"))[:sample]
    return sum(bool(_targets(passages, i, anchor)) for i in positions) / len(positions)


class _BridgeMaker:
    """The bridge maker: a :data:`QuestionMaker` that also says its share of a set read from the corpus."""

    def __init__(self, params: BridgeParams, providers: Providers) -> None:
        self.params, self.providers = params, providers
        self.wh = params.model_copy(update={"form": "wh"}) if params.form != "wh" else params

    def corpus_share(self, passages: PassageSet) -> float:
        """The share of the set bridge questions take when their share is ``corpus``: :func:`linked_share`."""
        return linked_share(passages, self.params.anchor)

    def __call__(self, passages: PassageSet, n: int, rng: random.Random) -> list[Question]:
        params, providers = self.params, self.providers
        out: list[Question] = []
        used: set[tuple[int, int]] = set()
        for i in passages.order(rng):
            if len(out) >= n:
                break
            a = passages[i]
            targets = _targets(passages, i, params.anchor)
            rng.shuffle(targets)
            for alias, j in targets:
                if (i, j) in used:
                    continue
                b = passages[j]
                forbid = _alias_words(b.title) | frozenset(alias)
                fact = _fact(b.text, passages.sentences(j), self.wh, rng, exclude=b.title)
                named = f" {' '.join(alias)} "
                bridge_sentence = next(
                    (
                        a.text[s:e]
                        for s, e in passages.sentences(i)
                        if named in f" {' '.join(_PART.findall(a.text[s:e].lower()))} "
                    ),
                    None,
                )
                if fact is None or bridge_sentence is None:
                    continue
                s, e, kind, x, y = fact
                if set(_PART.findall(b.text[x:y].lower())) & forbid:
                    continue  # the answer is the bridge entity itself: a one-hop question
                rarity = _rarity(passages, params)
                synonym = _synonyms(passages, params, providers)
                asked = surface(
                    b.text[s:e],
                    rng,
                    answer=(x - s, y - s),
                    forbid=forbid,
                    drop=params.drop,
                    max_words=params.max_words,
                    min_content=2,
                    rarity=rarity,
                    swap=params.swap,
                    synonym=synonym,
                )
                context = surface(
                    bridge_sentence,
                    rng,
                    forbid=forbid,
                    drop=params.drop,
                    max_words=params.context_words,
                    min_content=2,
                    rarity=rarity,
                    swap=params.swap,
                    synonym=synonym,
                )
                where = (
                    f" in {a.title}" if params.name_first and a.title and a.title.lower() not in context.lower() else ""
                )
                text = f"{WH[kind]} {asked}, the one{where} {context}?"
                if forbid & set(_PART.findall(text.lower())):
                    continue
                used.add((i, j))
                out.append(
                    Question(
                        text,
                        "bridge",
                        (a.id, b.id),
                        b.text[x:y],
                        kind,
                        (Span(b.id, x, y),),
                        {"bridge": b.title, "sentence": b.text[s:e], "via": bridge_sentence},
                    )
                )
                break
        return out


@operator("testset", "question_making", "bridge", port=Port.QUESTION)
def bridge(params: BridgeParams, providers: Providers) -> QuestionMaker:
    """Two-hop bridge questions across the link table: passage A mentions passage B's title (a single document;
    with ``anchor`` ``any``, any anchor of B); a fact of B (a typed span) is asked through A's sentence about B,
    with B's title removed, so the question can be answered only by finding A and then B. Both are gold; the answer
    is B's span. With share ``corpus`` in the test-set config, bridge questions take the share of the set that
    :func:`linked_share` reads from the corpus."""
    return _BridgeMaker(params, providers)


# ---------------------------------------------------------------------------------------------------------- checks


class AnswerParams(OperatorParams):
    method: str = Field(
        "span",
        pattern="^(span|attribution)$",
        description="span: the normalised answer occurs in a gold passage; attribution: the kit's "
        "attribution check supports the answer against a gold passage",
    )


def _in_passage(q: Question, passages: PassageSet, method: str) -> bool:
    texts = [
        f"{passages[passages.position[g]].title}\n{passages[passages.position[g]].text}"
        for g in q.gold
        if g in passages.position
    ]
    if not texts:
        return False
    if method == "attribution":
        from modular_rag.attribution import check_claims

        evidence: list[Any] = [
            {"ref": n, "text": t, "chunk_id": str(n), "metadata": {}} for n, t in enumerate(texts, 1)
        ]
        verdicts = check_claims(q.answer, q.text, evidence, semantic_threshold=None)
        return bool(verdicts) and all(v.supported for v in verdicts)
    answer = normalize_answer(q.answer)
    return bool(answer) and any(f" {answer} " in f" {normalize_answer(t)} " for t in texts)


@operator("testset", "question_checking", "answer_in_passage", port=Port.CHECK)
def answer_in_passage(params: AnswerParams, providers: Providers) -> QuestionCheck:
    """Attribution: drop a question whose answer is not in a gold passage (an LLM's invented answer), or whose
    evidence spans do not point inside their passages; questions without a short answer keep only the span test."""

    def check(questions: Sequence[Question], passages: PassageSet) -> list[Verdict]:
        out = []
        for q in questions:
            spans_ok = all(
                s.doc in q.gold
                and s.doc in passages.position
                and 0 <= s.start < s.end <= len(passages[passages.position[s.doc]].text)
                for s in q.evidence
            )
            if not spans_ok:
                out.append(Verdict(False, "evidence span outside its passage"))
            elif q.answer and not _in_passage(q, passages, params.method):
                out.append(Verdict(False, "answer not in the cited passage"))
            elif not q.answer and q.gold and not q.evidence:
                out.append(Verdict(False, "no answer and no evidence span"))
            else:
                out.append(Verdict(True))
        return out

    return check


class VerbatimParams(OperatorParams):
    max_run: int = Field(8, ge=3, description="a run of this many words copied from a passage is verbatim")
    allow: list[str] = Field([], description="question kinds that may copy their passage")


def _words(text: str) -> list[str]:
    return normalize_answer(text).split()


@operator("testset", "question_checking", "not_verbatim", port=Port.CHECK)
def not_verbatim(params: VerbatimParams, providers: Providers) -> QuestionCheck:
    """Drop a question that copies its passage (a run of ``max_run`` words of a gold passage) or that is a verbatim
    substring of any corpus passage, unless its kind is in ``allow``. A question whose sentence is held out of the
    set's corpus (``meta["held_out"]``) may copy it; a copy elsewhere in the corpus still drops it."""

    def check(questions: Sequence[Question], passages: PassageSet) -> list[Verdict]:
        corpus = "\n".join(" ".join(_words(p.text)) for p in passages.passages)
        out = []
        for q in questions:
            words = [w for w in _words(q.text) if w != "___"]
            phrase = " ".join(words)
            if q.kind in params.allow:
                out.append(Verdict(True))
                continue
            gold = [" ".join(_words(passages[passages.position[g]].text)) for g in q.gold if g in passages.position]
            runs = {" ".join(words[k : k + params.max_run]) for k in range(len(words) - params.max_run + 1)}
            held = bool(q.meta.get("held_out"))  # its sentence leaves the corpus: only a copy elsewhere counts
            if phrase and phrase in corpus and (not held or corpus.count(phrase) > sum(t.count(phrase) for t in gold)):
                out.append(Verdict(False, "verbatim substring of the corpus"))
            elif not held and any(f" {r} " in f" {t} " for r in runs for t in gold):
                out.append(Verdict(False, f"copies {params.max_run} words of its passage"))
            else:
                out.append(Verdict(True))
        return out

    return check


class DedupParams(OperatorParams):
    threshold: float = Field(0.8, gt=0.0, le=1.0, description="content-word Jaccard at or above this is a duplicate")


@operator("testset", "question_checking", "dedup", port=Port.CHECK)
def dedup(params: DedupParams, providers: Providers) -> QuestionCheck:
    """De-duplication: drop a question whose content words overlap an earlier kept question's by ``threshold``
    (Jaccard), or that asks for the same answer from the same passages."""

    def check(questions: Sequence[Question], passages: PassageSet) -> list[Verdict]:
        kept: list[frozenset[str]] = []
        seen: set[tuple[tuple[str, ...], str]] = set()
        out = []
        for q in questions:
            words = frozenset(w for w in _words(q.text) if w not in ENGLISH_STOPWORDS)
            key = (tuple(sorted(q.gold)), normalize_answer(q.answer))
            if q.answer and key in seen:
                out.append(Verdict(False, "same answer from the same passages"))
            elif any(len(words & k) / max(len(words | k), 1) >= params.threshold for k in kept):
                out.append(Verdict(False, "near-duplicate of another question"))
            else:
                kept.append(words)
                seen.add(key)
                out.append(Verdict(True))
        return out

    return check
