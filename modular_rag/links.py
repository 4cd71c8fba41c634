"""The link table: the anchors the indexed chunks define (:mod:`modular_rag.anchors`: titles, headings, the subjects
their first sentences define, names and codes), where chunk texts mention them, and the document graph those
mentions make (chunk -> the chunks that define an anchor its text mentions).

A multi-hop question's second passage is usually about an entity the first one names (the bridge); the link table
lets retrieval follow that without a language model. It is derived from the sparse index's chunks (ids, texts and
metadata), so it always agrees with the index; :class:`~modular_rag.index.KnowledgeIndex` saves it beside the BM25
file, keyed by the index's digest, and rebuilds it whenever the chunks change.

An anchor's definers are the chunks that define it at its highest rank (:func:`~modular_rag.anchors.chunk_anchors`).
Every other chunk whose text contains the anchor's words (in any letter case, accents folded, the longest anchor
winning) *mentions* it and links to its definers; a chunk never links to its own document, nor through an anchor it
defines itself (two documents that share a heading are peers, not a bridge). A question names the chunks that
define an anchor it mentions (:meth:`LinkTable.named_in`), lowercase or not.

**Too generic to follow**: an anchor shorter than ``min_chars`` (codes excepted), made of stop words or numbers only,
defined by more than ``max(min_documents, max_share * documents)`` documents ("Overview", "Introduction" headings),
or mentioned in more than ``max(min_documents, max_share * chunks)`` chunks ("Tidewater Cycles" in a corpus of its
own manuals, "United States" in Wikipedia) is dropped.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modular_rag.anchors import Alias, aliases_of, chunk_anchors, words_of

__all__ = ["LinkTable", "aliases_of", "chunk_anchors"]

_STOP = frozenset(["a", "an", "the", "of", "and", "or", "in", "on", "at", "to", "for", "by", "with", "from", "is",
                   "was", "are", "as", "be", "it", "its", "this", "that"])  # fmt: skip
VERSION = 3
"""Version of the saved table (a table saved by another version is rebuilt): 2, anchors from the documents
themselves, definers by rank, case-insensitive mentions; 3, a titled chunk is about its title, no names inside
titles."""


def _kept(alias: Alias, min_chars: int) -> bool:
    """An alias specific enough to be followed: long enough (a code may be short), not only stop words or numbers."""
    if all(w in _STOP or w.isdigit() for w in alias):
        return False
    return len(" ".join(alias)) >= min_chars or (len(alias) == 1 and any(c.isdigit() for c in alias[0]))


@dataclass
class LinkTable:
    """Anchors -> the chunk positions that define them (in the sparse index's order), and each chunk's outlinks.

    Build it with :meth:`build`; positions index the chunk lists it was built from.
    """

    table: dict[Alias, frozenset[int]]
    outlinks: list[frozenset[int]]
    documents: list[str]
    digest: str = ""
    max_words: int = 1
    _dropped: list[str] = field(default_factory=list, repr=False)
    _prefixes: set[Alias] = field(default_factory=set, repr=False)
    _firsts: set[Alias] = field(default_factory=set, repr=False)
    _singles: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        """Every prefix of every anchor, so a mention scan extends a match only while some anchor can still match."""
        self._prefixes = {alias[:n] for alias in self.table for n in range(1, len(alias) + 1)}
        self._firsts = {alias[:2] for alias in self.table if len(alias) > 1}  # where a mention may start: its first
        self._singles = {alias[0] for alias in self.table if len(alias) == 1}  # two words, or a one-word anchor

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        *,
        digest: str = "",
        min_chars: int = 4,
        max_share: float = 0.01,
        min_documents: int = 5,
        max_mentions: int | None = None,
        sample: int = 20_000,
        anchors: Sequence[Mapping[Alias, int]] | None = None,
    ) -> LinkTable:
        """Build the table and the graph from chunk texts and metadata (see :func:`chunk_anchors`; ``doc_id`` keeps
        the chunks of one document from linking to each other).

        Args:
            texts: The chunk texts.
            metadatas: Their metadata, in the same order.
            digest: The index digest the table belongs to.
            min_chars: Anchors shorter than this are dropped (codes such as "E07" excepted).
            max_share: An anchor defined by more than this share of the documents, or mentioned in more than this
                share of the chunks, is too generic to follow.
            min_documents: The least number of documents (chunks) that cut allows, for small corpora.
            max_mentions: A fixed number instead of the share (``None``: the share).
            sample: Mentions are counted in every k-th chunk when there are more chunks than this (the share is
                estimated from about ``sample`` chunks).
            anchors: Each chunk's :func:`chunk_anchors`, when computed already (at index time).

        Returns:
            The link table.
        """
        documents = [str(m.get("doc_id", i)) for i, m in enumerate(metadatas)]

        def limit(count: int) -> float:
            return max_mentions if max_mentions is not None else max(min_documents, max_share * count)

        ranked: dict[Alias, dict[int, int]] = {}
        for i, meta in enumerate(metadatas):
            for alias, rank in (anchors[i] if anchors is not None else chunk_anchors(texts[i], meta)).items():
                if _kept(alias, min_chars):
                    ranked.setdefault(alias, {})[i] = rank
        table: dict[Alias, frozenset[int]] = {}
        dropped: list[str] = []
        generic_definers = limit(len(set(documents)))
        for alias, ranks in ranked.items():
            top = max(ranks.values())
            definers = frozenset(i for i, r in ranks.items() if r == top)
            if len(definers) > generic_definers and len({documents[i] for i in definers}) > generic_definers:
                dropped.append(" ".join(alias))
            else:
                table[alias] = definers
        links = cls(table, [], documents, digest, max((len(a) for a in table), default=1))
        step = max(1, -(-len(texts) // sample))
        mentioned = Counter(a for i in range(0, len(texts), step) for a in {a for a, _ in links.mentions(texts[i], i)})
        generic = [a for a, n in mentioned.items() if n * step > limit(len(texts))]
        for alias in generic:
            del links.table[alias]
        links._index()
        links._dropped = sorted(dropped + [" ".join(a) for a in generic])
        links.outlinks = [frozenset().union(*(hit for _, hit in links.mentions(text, exclude=i))) for i, text in
                          enumerate(texts)]  # fmt: skip
        return links

    def _targets(self, hit: frozenset[int], exclude: int | None) -> frozenset[int]:
        """The definers ``hit`` a mention in chunk ``exclude`` links to: none when ``exclude`` defines the anchor
        itself, else those outside its document."""
        if exclude is None or exclude >= len(self.documents):
            return hit
        if exclude in hit:
            return frozenset()
        own = self.documents[exclude]
        return frozenset(p for p in hit if self.documents[p] != own)

    def mentions(self, text: str, exclude: int | None = None) -> list[tuple[Alias, frozenset[int]]]:
        """The anchors ``text`` mentions, in order: ``(anchor, the chunk positions that define it)``; the longest
        anchor wins where they overlap. With ``exclude`` (a chunk position), its document's chunks and the anchors it
        defines itself are left out (a shorter anchor inside one of those may still match)."""
        folded = words_of(text)
        table, prefixes, firsts, singles = self.table, self._prefixes, self._firsts, self._singles
        out: list[tuple[Alias, frozenset[int]]] = []
        end = len(folded)
        done = 0  # words before this are inside a mention already found
        pairs = zip(folded, [*folded[1:], ""], strict=True)
        for i in [i for i, pair in enumerate(pairs) if pair in firsts or pair[0] in singles]:
            if i < done:
                continue
            n = 1  # the longest run of words from here that some anchor starts with, then the longest anchor in it
            while i + n < end and tuple(folded[i : i + n + 1]) in prefixes:
                n += 1
            hit: frozenset[int] = frozenset()
            while n:
                found = tuple(folded[i : i + n])
                if found in table:
                    hit = self._targets(table[found], exclude)
                    if hit:
                        break
                n -= 1
            if n:
                out.append((found, hit))
                done = i + n
        return out

    def named_in(self, text: str) -> set[int]:
        """The chunks that define an anchor ``text`` (a question, in any letter case) names."""
        return set().union(*(hit for _, hit in self.mentions(text)))

    def save(self, file: Path) -> None:
        """Write the table to ``file`` (JSON, atomically)."""
        data = {"version": VERSION, "digest": self.digest, "max_words": self.max_words, "documents": self.documents,
                "table": [[list(k), sorted(v)] for k, v in self.table.items()],
                "outlinks": [sorted(o) for o in self.outlinks], "dropped": self._dropped}  # fmt: skip
        tmp = file.with_suffix(file.suffix + ".tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, file)

    @classmethod
    def load(cls, file: Path) -> LinkTable | None:
        """The table saved in ``file``, or ``None`` when there is none or it was saved by another version."""
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if data.get("version") != VERSION:
            return None
        return cls({tuple(k): frozenset(v) for k, v in data["table"]}, [frozenset(o) for o in data["outlinks"]],
                   list(data["documents"]), data["digest"], int(data["max_words"]),
                   list(data.get("dropped", [])))  # fmt: skip
