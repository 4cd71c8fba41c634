"""Sentence vectors made once: the sentences the evidence scorer reads of each chunk are embedded when the chunk is
indexed and kept in the catalog beside it (:class:`~modular_rag.catalog.Catalog`, read by chunk id), so answering a
question embeds the question and nothing else.

* :func:`evidence_sentences` is the one splitter: what is stored at index time is what the scorer splits at query
  time (:class:`~modular_rag.attribution.SentenceScorer`, the extractive compressors, the claim checker's paraphrase
  fallback), and a sentence is looked up by its text within its chunk, so a chunk whose text an earlier step changed
  still finds the sentences it kept; the rest are embedded at query time, as before.
* The vectors belong to one encoder: the catalog records its identity (setting ``sentence_encoder``; see
  :func:`encoder_identity`). A reader whose encoder is another does not use them (it embeds the sentences itself and
  says so once in the log); a writer whose encoder is another replaces them all at its next ``index`` run.
* An index written before sentence vectors existed gets them at its next ``index`` run (:meth:`SentenceVectors.
  backfill`), not on a question: a question should not pay for embedding a corpus's sentences, and the workers that
  answer stay readers of a catalog they may share. Until then its questions embed the sentences they read (cached
  in-process), which gives the same answers.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from modular_rag.catalog import Catalog, StoredChunk
from modular_rag.text import ENGLISH_STOPWORDS, Analyzer, split_sentences

__all__ = [
    "fragment",
    "identifier_terms",
    "ReadSentence",
    "read_sentences",
    "evidence_sentences",
    "chunk_sentences",
    "sentence_terms",
    "encoder_identity",
    "SentenceVectors",
]

log = logging.getLogger(__name__)

_ANALYZER = Analyzer()
SETTING = "sentence_encoder"
"""The catalog setting naming the encoder the stored sentence vectors were made with."""


@lru_cache(maxsize=50_000)
def sentence_terms(text: str) -> tuple[str, ...]:
    """The default analyzer's terms of a sentence or a title, cached by text (the scorers read the same sentences
    for many questions)."""
    return tuple(_ANALYZER(text))


_IDENTIFIER_PARTS = re.compile(
    r"[A-Za-z][A-Za-z0-9]*(?:[._\-][A-Za-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+|(?:[A-Z][a-z0-9]+){2,}"
)


@lru_cache(maxsize=50_000)
def identifier_terms(text: str) -> frozenset[str]:
    """The terms of the words inside a text's identifiers (``SESSION_COOKIE_AGE``, ``core.compression``,
    ``list_per_page``, ``PageNumberPagination``), which the analyzer keeps whole: ``session``, ``cooki``, ``age``."""
    parts: list[str] = []
    for found in _IDENTIFIER_PARTS.findall(text):
        parts += re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", found)
    return frozenset(_ANALYZER(" ".join(parts))) if parts else frozenset()


@lru_cache(maxsize=50_000)
def fragment(sentence: str) -> float:
    """How much a piece of text is not a sentence a person would quote, in [0, 1]: 1 for three words or fewer, for
    a line of eight words or more with almost no function words and no final full stop (an index, a syntax line, a
    list of codes; a terse sentence such as "Error E07 means speed sensor signal lost." ends with one), and for a
    short line that only introduces what follows (``Changed in Django 3.2:``); 0 for prose."""
    words = re.findall(r"[A-Za-z]+", sentence)
    if len(sentence.split()) <= 3:
        return 1.0
    if sentence.rstrip().endswith(":") and len(words) <= 8:
        return 1.0
    if len(words) >= 8 and not sentence.rstrip().endswith((".", "!", "?")):  # a sentence may be terse, a list not
        share = sum(w.lower() in ENGLISH_STOPWORDS for w in words) / len(words)
        if share < 0.12:
            return 1.0
        if share < 0.2:
            return 0.5
    return 0.0


class ReadSentence(NamedTuple):
    """A content sentence of a chunk with what a reader sees around it: the heading it sits under and the term its
    paragraph defines (``--soft`` of ``--soft: Does not touch the index file. ...``), each ``""`` when none."""

    text: str
    heading: str
    term: str


_HEADING = re.compile(r"^\s*#{1,6}\s+(.*?)\s*$")
_TERM = re.compile(r"^([^:\n]{1,80}?):\s+\S")


def read_sentences(text: str, title: str = "", section: str = "") -> list[ReadSentence]:
    """The sentences of a chunk that carry content, with their heading and term (:class:`ReadSentence`; the
    chunk's ``section``, the heading in force where it begins, stands for a heading before its first one). Markdown
    headings, fenced code blocks (opened with a word after the fence, ```` ```code ````, and closed bare, so a chunk
    cut inside one knows it) and a leading copy of the chunk's title are not sentences, and neither is a piece of
    fewer than two content terms."""
    rows = text.splitlines()
    fences = [i for i, ln in enumerate(rows) if ln.strip().startswith("```")]
    # an odd count: the chunk was cut inside a code block; a first fence with a word after it (```code, ```python)
    # opens one, so the cut is at the end, a bare one closes it, so the chunk began inside
    code = len(fences) % 2 == 1 and rows[fences[0]].strip() == "```"
    blocks: list[tuple[list[str], str]] = [([], section)]
    heading = section
    for ln in rows:
        if ln.strip().startswith("```"):
            code = not code
            blocks.append(([], heading))  # a code block ends the paragraph before it
        elif code:
            continue
        elif match := _HEADING.match(ln):
            heading = match.group(1)
            blocks.append(([], heading))
        elif not ln.strip():
            blocks.append(([], heading))
        else:
            blocks[-1][0].append(ln)
    out: list[ReadSentence] = []
    first = True
    for lines, under in blocks:
        body = "\n".join(lines).strip()
        if not body:
            continue
        if first and title and body.startswith(title):
            body = body[len(title) :].lstrip(" :.-\n")
        first = False
        lead = _TERM.match(body)
        term = lead.group(1).strip() if lead and len(lead.group(1).split()) <= 5 else ""
        if term and all(w.isalpha() and w[:1].isupper() for w in term.split()):
            term = ""  # a label ("Changed:", "Note:", "Default:"), not a term the paragraph defines
        out.extend(
            ReadSentence(sentence, under, term)
            for sentence in split_sentences(body)
            if len(sentence_terms(sentence)) >= 2
        )
    return out


def evidence_sentences(text: str, title: str = "") -> list[str]:
    """The content sentences of a chunk (:func:`read_sentences`), without their context."""
    return [s.text for s in read_sentences(text, title)]


def chunk_sentences(text: str, metadata: Mapping[str, Any]) -> list[str]:
    """:func:`evidence_sentences` of a chunk, with its metadata's title (what the scorer reads of an evidence entry)."""
    return [s.text for s in read_sentences(text, str(metadata.get("title") or ""), str(metadata.get("section") or ""))]


def encoder_identity(config: Any) -> str | None:
    """What makes an embeddings config's vectors what they are (model and precision; not its batch size or backend,
    which give the same vectors), or ``None`` when that cannot be known (a LangChain ``Embeddings`` object): no
    sentence vectors are stored for it."""
    from modular_rag.config import MiniLMConfig, OpenAIEmbeddingsConfig, SentenceTransformersConfig

    if isinstance(config, MiniLMConfig):
        return f"minilm/{config.precision}"
    if isinstance(config, SentenceTransformersConfig):
        return f"sentence_transformers/{config.path}"
    if isinstance(config, OpenAIEmbeddingsConfig):
        return f"openai/{config.base_url or ''}/{config.model}/{config.dimensions or ''}"
    return None


class SentenceVectors:
    """The stored sentence vectors of an index's chunks: made for chunks being added, backfilled for chunks that
    lack them, read by chunk id.

    Args:
        catalog: The index's catalog (the ``sentences`` table and the ``sentence_encoder`` setting).
        encoder: The index's encoder (``None``: nothing is stored).
        identity: The encoder's identity (:func:`encoder_identity`; ``None``: nothing is stored).
        texts: The texts of stored chunks (from the catalog, or from the store when it keeps them).

    Attributes:
        use_stored: Whether :meth:`of` reads the stored vectors (benchmarks turn it off to time the path that
            embeds the sentences of each question).
        store: Whether chunks being added get their sentence vectors (benchmarks turn it off to time indexing
            without them).
        seconds: Time spent embedding sentences (indexing stages report it).
    """

    def __init__(
        self, catalog: Catalog, encoder: Any, identity: str | None, texts: Callable[[Sequence[StoredChunk]], list[str]]
    ) -> None:
        self.catalog, self.encoder, self.identity, self._texts = catalog, encoder, identity, texts
        self.use_stored = True
        self.store = True
        self.seconds = 0.0
        self._warned = False
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether sentence vectors are made for this index (an encoder of known identity, :attr:`store` on)."""
        return self.encoder is not None and self.identity is not None and self.store

    def embed(self, texts: Sequence[str], metas: Sequence[Mapping[str, Any]]) -> list[tuple[list[str], np.ndarray]]:
        """Each chunk's sentences and their vectors (one encoder call over all of them)."""
        per_chunk = [chunk_sentences(t, m) for t, m in zip(texts, metas, strict=True)]
        flat = [s for found in per_chunk for s in found]
        t0 = time.perf_counter()
        vectors = self.encoder.encode(flat) if flat else np.zeros((0, 0), np.float32)
        self.seconds += time.perf_counter() - t0
        out, at = [], 0
        for found in per_chunk:
            out.append((found, np.asarray(vectors[at : at + len(found)], dtype=np.float32)))
            at += len(found)
        return out

    def write(self, db: Any, positions: Sequence[int], embedded: Sequence[tuple[list[str], np.ndarray]]) -> None:
        """Store embedded sentences (:meth:`embed`) at the chunks' positions, in the open transaction ``db``."""
        self.catalog.set_sentences([(p, s, v) for p, (s, v) in zip(positions, embedded, strict=True)], db)
        if self.catalog.setting(SETTING) != self.identity:
            self.catalog.set_setting(SETTING, str(self.identity), db)

    def backfill(self, batch: int = 512) -> int:
        """Embed the sentences of every chunk that has none stored (an index written before they existed, chunks
        taken in from the store), after dropping them all if another encoder made them. Returns how many chunks
        were embedded."""
        if not self.enabled:
            return 0
        held = self.catalog.setting(SETTING)
        if held is not None and held != self.identity:
            log.info("the index's sentence vectors were made by %s; embedding them again with %s", held, self.identity)
            with self.catalog.transaction() as db:
                self.catalog.clear_sentences(db)
                self.catalog.set_setting(SETTING, str(self.identity), db)
        done = 0
        while part := self.catalog.without_sentences(batch):
            embedded = self.embed(self._texts(part), [c.metadata for c in part])
            with self.catalog.transaction() as db:
                self.write(db, [c.pos for c in part], embedded)
            done += len(part)
        if done:
            log.info("embedded the sentences of %d chunks that had none stored", done)
        return done

    def of(self, ids: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        """The stored vectors of these chunks' sentences: chunk id -> {sentence: vector}. Empty when nothing is
        stored, :attr:`use_stored` is off, or the vectors are another encoder's (said once in the log)."""
        if not ids or not self.use_stored or self.identity is None:
            return {}
        held = self.catalog.setting(SETTING)
        if held != self.identity:
            if held is not None and not self._warned:
                self._warned = True
                log.warning(
                    "the index's sentence vectors were made by %s, this flow embeds with %s: its questions "
                    "embed the sentences they read (run `modular-rag index` with this embedder to store "
                    "them again)",
                    held,
                    self.identity,
                )
            return {}
        return {
            cid: dict(zip(texts, vectors, strict=True))
            for cid, (texts, vectors) in self.catalog.sentences_of(list(dict.fromkeys(ids))).items()
        }
