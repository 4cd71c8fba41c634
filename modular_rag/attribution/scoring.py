"""Which sentences of the evidence answer the question: :class:`SentenceScorer` scores each sentence by its
embedding cosine with the question, the IDF-weighted share of the question's terms it (or its chunk's title)
contains, and whether it holds what the question asks for (a number for "how much", a year for "when", a name for
"who", ...). The evidence-first context builder puts the best sentences first and short; the extractive answerer
quotes the best one."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from modular_rag.attribution.cues import _ANALYZER, QuestionCues, asked_cue, question_cues
from modular_rag.attribution.spans import _expected
from modular_rag.errors import MissingDependencyError
from modular_rag.providers import Providers
from modular_rag.sentences import ReadSentence, fragment, identifier_terms, read_sentences, sentence_terms
from modular_rag.state import Evidence

__all__ = ["ScoredSentence", "SentenceScorer", "SentenceWeights", "lead_of", "packed_text"]


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
    heading: str = ""
    """The heading it sits under (``""`` when none)."""
    term: str = ""
    """The term its paragraph defines (``""`` when none)."""


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
    fragment: float = Field(
        0.5,
        ge=0.0,
        le=10.0,
        description="taken off a piece that is no sentence a person would quote: a few words, an index or syntax line "
        "with almost no function words, a line that only introduces what follows (modular_rag.sentences.fragment)",
    )
    asks: float = Field(
        0.5,
        ge=0.0,
        le=10.0,
        description="the sentence holds what a question about a tool asks for: a default and its value, a limit, "
        "an option's or setting's name, a step (modular_rag.attribution.cues.asked_cue)",
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
        rows: list[tuple[ReadSentence, Evidence, int, int]] = []
        for rank, ev in enumerate(evidence):
            meta = ev["metadata"]
            found = read_sentences(ev["text"], str(meta.get("title") or ""), str(meta.get("section") or ""))
            rows += [(s, ev, rank, i) for i, s in enumerate(found)]
        if not rows:
            return []
        try:
            q = self.providers.encoder.encode_query(question)
            cosines = self.vectors([s.text for s, _, _, _ in rows], [ev["chunk_id"] for _, ev, _, _ in rows]) @ q
        except MissingDependencyError:  # a flow without an embedder (BM25 and a remote model): words only
            self.lexical_only = True
            cosines = np.zeros(len(rows), dtype=np.float32)
        out = []
        for (read, ev, rank, position), cos in zip(rows, cosines.tolist(), strict=True):
            sentence = read.text
            title = str(ev["metadata"].get("title") or "")
            context = f"{read.heading} {read.term}".strip()
            terms = set(sentence_terms(sentence)) | identifier_terms(sentence)
            # the title, the heading and the paragraph's term count half: "It weighs 7.6 kg" under the title "TW-900
            # Carbon Road" is about the TW-900; "Default: 1209600" under "SESSION_COOKIE_AGE" is that setting's
            around = set(sentence_terms(title)) | set(sentence_terms(context)) | identifier_terms(context)
            cov = 0.5 * self.coverage(cues, terms | around, idf) + 0.5 * self.coverage(cues, terms, idf)
            cue = _expected(cues.expects, sentence, cues) if cues.expects != "other" else 0.0
            asked = asked_cue(cues.asks, sentence, context)
            where = f"{sentence} {title} {context}".lower()
            named = (sum(t in where for t in cues.distinctive) / len(cues.distinctive)) if cues.distinctive else 0.0
            total = w.dense * cos + w.lexical * cov + w.cue * cue + w.prior / (1 + rank) + w.names * named
            total += w.asks * asked - w.fragment * fragment(sentence)
            out.append(
                ScoredSentence(
                    sentence, ev["ref"], ev["chunk_id"], position, total, cos, cov, cue, read.heading, read.term
                )
            )
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


def packed_text(sentences: Sequence[ScoredSentence], title: str = "") -> str:
    """Sentences of one chunk (in their order) as an evidence entry's text, with what a reader needs around them: a
    ``## heading`` line where their context changes, naming the heading they sit under (not the chunk's title) and
    the term their paragraph defines when they do not name it (``## OPTIONS › --soft`` before ``This leaves all your
    changed files ...``). The sentences stay as written, so their stored vectors are found."""
    lines: list[str] = []
    last = ""
    for s in sentences:
        parts = [p for p in (s.heading if s.heading != title else "", s.term) if p]
        if s.term and s.sentence.startswith(s.term):
            parts = parts[:-1]
        context = " › ".join(parts)
        if context and context != last:
            lines.append(f"## {context}")
        last = context or last
        lines.append(s.sentence)
    return "\n\n".join(lines)


_SECTIONS = frozenset(
    [
        "name",
        "synopsis",
        "description",
        "options",
        "examples",
        "example",
        "notes",
        "note",
        "see",
        "also",
        "bugs",
        "author",
        "authors",
        "introduction",
        "overview",
        "usage",
        "configuration",
        "discussion",
        "environment",
        "files",
        "return",
        "value",
        "arguments",
        "parameters",
        "summary",
        "details",
        "default",
        "defaults",
    ]
)
"""Words of headings that name a part of a page, not a thing (a manual page's DESCRIPTION, OPTIONS, SEE ALSO)."""


def lead_of(sentence: ScoredSentence, title: str = "") -> str:
    """What a sentence is about when it does not say it itself, for an answer that quotes it: the term its
    paragraph defines (``--soft``), else its heading when that names a thing (at most four words, not a page part
    such as ``DESCRIPTION``, not the page's title): ``Coalesce``, ``SESSION_COOKIE_AGE``; ``""`` otherwise."""
    said = sentence.sentence.lower()
    if sentence.term and sentence.term.lower() not in said:
        return sentence.term
    heading = sentence.heading.split("›")[-1].strip()  # a packed entry's context: "OPTIONS › --soft"
    words = heading.lower().split()
    if (
        heading
        and heading.lower() not in said
        and heading != title
        and len(words) <= 4
        and not set(words) <= _SECTIONS
        and not any(w.isdigit() for w in words)
    ):
        return heading
    return ""
