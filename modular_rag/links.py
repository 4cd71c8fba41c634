"""The link table: the titles (and aliases) of the indexed chunks, where chunk texts mention them, and the document
graph those mentions make (chunk -> the chunks whose title its text names).

A multi-hop question's second passage is usually about an entity the first one names (the bridge); the link table
lets retrieval follow that without a language model. It is derived from the sparse index's chunks (ids, texts and
metadata: ``title`` from a BEIR row, front matter or the first heading, and optional ``aliases``), so it always
agrees with the index; :class:`~modular_rag.index.KnowledgeIndex` saves it beside the BM25 file, keyed by the
index's digest, and rebuilds it whenever the chunks change.

Aliases of a title: the title itself, the title without a trailing parenthesis ("Kiss and Tell (1945 film)" ->
"Kiss and Tell"), either without a leading "The", and the chunk's ``aliases`` metadata. An alias shorter than
``min_chars``, made of stop words only, or mentioned in more than ``max_mentions`` chunks (too ambiguous to follow)
is dropped. A mention starts at a word with a capital letter or a digit; the longest alias wins; a chunk never
links to its own document.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any

__all__ = ["LinkTable", "aliases_of"]

_WORD = re.compile(r"\w+", re.UNICODE)
_CAPITAL = re.compile(r"[A-Z0-9]")
_STOP = frozenset(["a", "an", "the", "of", "and", "or", "in", "on", "at", "to", "for", "by", "with", "from", "is",
                   "was", "are", "as", "be", "it", "its", "this", "that"])
VERSION = 1


def _fold(word: str) -> str:
    """Lower case without accents (an ASCII word only needs lower-casing)."""
    return word.lower() if word.isascii() else _fold_accented(word)


@lru_cache(maxsize=65536)
def _fold_accented(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def _words(text: str) -> list[tuple[str, bool]]:
    """(folded word, starts with a capital letter or a digit) for each word of ``text``."""
    return [(_fold(w), w[0].isupper() or w[0].isdigit()) for w in _WORD.findall(text)]


def _scan(text: str) -> tuple[list[str], list[int]]:
    """The folded words of ``text`` and the positions of those that start with a capital letter or a digit (where a
    mention may start): :func:`_words` in fewer Python steps per word (an ASCII text is lower-cased whole, and the
    first letters are matched by one regular expression)."""
    raw = _WORD.findall(text)
    firsts = "".join(map(itemgetter(0), raw))
    if text.isascii():
        return _WORD.findall(text.lower()), [m.start() for m in _CAPITAL.finditer(firsts)]
    return [_fold(w) for w in raw], [i for i, c in enumerate(firsts) if c.isupper() or c.isdigit()]


def aliases_of(title: str, extra: Sequence[str] = ()) -> set[tuple[str, ...]]:
    """The aliases of a title, as folded word tuples (see the module docstring)."""
    out: set[tuple[str, ...]] = set()
    for name in (title, re.sub(r"\s*\([^)]*\)\s*$", "", title).strip(), *extra):
        words = tuple(w for w, _ in _words(name))
        if words:
            out.add(words)
            if len(words) > 1 and words[0] == "the":
                out.add(words[1:])
    return out


@dataclass
class LinkTable:
    """Aliases -> chunk positions (in the sparse index's order), and each chunk's outlinks.

    Build it with :meth:`build`; positions index the chunk lists it was built from.
    """

    table: dict[tuple[str, ...], frozenset[int]]
    outlinks: list[frozenset[int]]
    documents: list[str]
    digest: str = ""
    max_words: int = 1
    _dropped: list[str] = field(default_factory=list, repr=False)
    _prefixes: set[tuple[str, ...]] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        """Every prefix of every alias, so a mention scan extends a match only while some alias can still match."""
        self._prefixes = {alias[:n] for alias in self.table for n in range(1, len(alias) + 1)}

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        *,
        digest: str = "",
        min_chars: int = 4,
        max_mentions: int = 50,
    ) -> LinkTable:
        """Build the table and the graph from chunk texts and metadata (``title``, optional ``aliases``, and
        ``doc_id`` so chunks of one document do not link to each other)."""
        table: dict[tuple[str, ...], set[int]] = {}
        documents = [str(m.get("doc_id", i)) for i, m in enumerate(metadatas)]
        for i, meta in enumerate(metadatas):
            title = str(meta.get("title") or "").strip()
            extra = meta.get("aliases") or ()
            extra = [a.strip() for a in extra.split(",")] if isinstance(extra, str) else [str(a) for a in extra]
            if not title and not extra:
                continue
            for alias in aliases_of(title, extra):
                if len(" ".join(alias)) < min_chars or all(w in _STOP for w in alias):
                    continue
                table.setdefault(alias, set()).add(i)
        links = cls({k: frozenset(v) for k, v in table.items()}, [], documents, digest,
                    max((len(a) for a in table), default=1))  # fmt: skip
        mentioned = Counter(alias for text in texts for alias in {a for a, _ in links.mentions(text)})
        links._dropped = sorted(" ".join(a) for a, n in mentioned.items() if n > max_mentions)
        for alias in [a for a, n in mentioned.items() if n > max_mentions]:
            del links.table[alias]
        links._index()
        links.outlinks = [frozenset().union(*(hit for _, hit in links.mentions(text, exclude=i))) for i, text in
                          enumerate(texts)]  # fmt: skip
        return links

    def mentions(self, text: str, exclude: int | None = None) -> list[tuple[tuple[str, ...], frozenset[int]]]:
        """The titles ``text`` mentions, in order: ``(alias, chunk positions)``; chunks of ``exclude``'s document
        are left out."""
        folded, starts = _scan(text)
        own = self.documents[exclude] if exclude is not None and exclude < len(self.documents) else None
        table, prefixes = self.table, self._prefixes
        out: list[tuple[tuple[str, ...], frozenset[int]]] = []
        end = len(folded)
        done = 0  # words before this are inside a mention already found
        for i in starts:
            if i < done or (folded[i],) not in prefixes:
                continue
            n = 1  # the longest run of words from here that some alias starts with, then the longest alias in it
            while i + n < end and tuple(folded[i : i + n + 1]) in prefixes:
                n += 1
            while n and tuple(folded[i : i + n]) not in table:
                n -= 1
            if not n:
                continue
            found = tuple(folded[i : i + n])
            hit = table[found]
            if own is not None:
                hit = frozenset(p for p in hit if self.documents[p] != own)
            if hit:
                out.append((found, hit))
            done = i + n
        return out

    def named_in(self, text: str) -> set[int]:
        """The chunks whose title ``text`` (a question) names."""
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
