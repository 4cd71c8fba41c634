"""The link table: the anchors the indexed chunks define (:mod:`modular_rag.anchors`: titles, headings, the subjects
their first sentences define, names and codes), where chunk texts mention them, and the document graph those
mentions make (chunk -> the chunks that define an anchor its text mentions).

A multi-hop question's second passage is usually about an entity the first one names (the bridge); the link table
lets retrieval follow that without a language model. :class:`LinkTable` is the table built in memory over a list of
chunks (test sets made from documents use it); :class:`StoredLinks` is the same table as rows of the index's catalog,
written with each add and removal and read by key (:class:`~modular_rag.index.KnowledgeIndex`), so no process builds
or loads it whole.

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

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from modular_rag.anchors import Alias, aliases_of, chunk_anchors, folded, phrase_pattern, words_of
from modular_rag.concurrency import read_ahead

__all__ = ["LinkTable", "aliases_of", "chunk_anchors"]

_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "and",
        "or",
        "in",
        "on",
        "at",
        "to",
        "for",
        "by",
        "with",
        "from",
        "is",
        "was",
        "are",
        "as",
        "be",
        "it",
        "its",
        "this",
        "that",
    ]
)
_T = TypeVar("_T")
VERSION = 3
"""Version of the saved table (a table saved by another version is rebuilt): 2, anchors from the documents
themselves, definers by rank, case-insensitive mentions; 3, a titled chunk is about its title, no names inside
titles."""


def match_anchors(
    folded: Sequence[str],
    targets: Callable[[Alias], frozenset[_T]],
    prefixes: set[Alias],
    firsts: set[Alias],
    singles: set[str],
) -> list[tuple[Alias, frozenset[_T]]]:
    """The anchors a text's folded words mention, in order, with what each leads to: scanning from every place an
    anchor's first two words (or a one-word anchor) occur, the longest run of words some anchor starts with
    (``prefixes``), then the longest anchor in it whose ``targets`` are not empty. Words inside a mention found are
    not scanned again.

    Args:
        folded: The text's folded words (:func:`~modular_rag.anchors.words_of`).
        targets: An anchor's targets (empty: not an anchor here, or one that leads nowhere from this text).
        prefixes: Every prefix of every anchor that may match.
        firsts: The first two words of every anchor of two words or more.
        singles: The one-word anchors.
    """
    out: list[tuple[Alias, frozenset[_T]]] = []
    end = len(folded)
    done = 0  # words before this are inside a mention already found
    pairs = zip(folded, [*folded[1:], ""], strict=True)
    for i in [i for i, pair in enumerate(pairs) if pair in firsts or pair[0] in singles]:
        if i < done:
            continue
        n = 1  # the longest run of words from here that some anchor starts with, then the longest anchor in it
        while i + n < end and tuple(folded[i : i + n + 1]) in prefixes:
            n += 1
        hit: frozenset[_T] = frozenset()
        while n:
            found = tuple(folded[i : i + n])
            hit = targets(found)
            if hit:
                break
            n -= 1
        if n:
            out.append((found, hit))
            done = i + n
    return out


def prefix_sets(anchors: Iterable[Alias]) -> tuple[set[Alias], set[Alias], set[str]]:
    """What :func:`match_anchors` scans with: every prefix, the first two words, the one-word anchors."""
    anchors = list(anchors)
    prefixes = {alias[:n] for alias in anchors for n in range(1, len(alias) + 1)}
    return prefixes, {a[:2] for a in anchors if len(a) > 1}, {a[0] for a in anchors if len(a) == 1}


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
        self._prefixes, self._firsts, self._singles = prefix_sets(self.table)

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
        links.outlinks = [
            frozenset().union(*(hit for _, hit in links.mentions(text, exclude=i))) for i, text in enumerate(texts)
        ]
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
        return match_anchors(
            words_of(text),
            lambda alias: self._targets(self.table[alias], exclude) if alias in self.table else frozenset(),
            self._prefixes,
            self._firsts,
            self._singles,
        )

    def named_in(self, text: str) -> set[int]:
        """The chunks that define an anchor ``text`` (a question, in any letter case) names."""
        return set().union(*(hit for _, hit in self.mentions(text)))


class StoredLinks:
    """The link table as rows of the catalog (:class:`~modular_rag.catalog.Catalog`), read by key and kept current
    by each add and removal, so no process builds it whole.

    What each chunk defines (:func:`chunk_anchors`, kept as :func:`_kept` keeps them) and which anchors its text
    mentions are written when the chunk is added (the mentions scanned against the anchors the catalog holds, the
    new chunks' own included); an anchor first defined by an add is looked for in the chunks held before (through
    ``find``: the chunks whose BM25 postings hold all its words), and those are scanned again, so the table equals a
    build over every chunk. Removing a chunk removes its rows. The cuts for anchors too generic to follow (defined by
    or mentioned in more than ``max(min_documents, max_share * count)`` documents or chunks) are applied when the
    table is read, against the counts then.

    Chunks are named by id at this interface (positions stay inside the catalog).
    """

    def __init__(self, catalog: Any, *, min_chars: int = 4, max_share: float = 0.01, min_documents: int = 5) -> None:
        self.catalog = catalog
        self.min_chars, self.max_share, self.min_documents = min_chars, max_share, min_documents

    # ----------------------------------------------------------------------------------------------------- writing

    def added(
        self,
        db: Any,
        positions: Sequence[int],
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        find: Callable[[Sequence[Alias]], Sequence[Sequence[int]]] | None = None,
        texts_of: Callable[[Sequence[Any]], list[str]] | None = None,
    ) -> None:
        """Write the rows of chunks just added (inside the add's transaction ``db``).

        Args:
            db: The open transaction.
            positions, texts, metadatas: The added chunks.
            find: For each of a list of anchors, the positions of chunks held before whose text may contain it (a
                superset is fine), asked once per add; without it, anchors new to the catalog are not looked for in
                older chunks.
            texts_of: The texts of held chunks (catalog rows), read from the store when the catalog keeps none
                (Milvus); default: the rows' own texts.
        """
        catalog = self.catalog
        rows: list[tuple[str, int, int]] = []
        for pos, text, meta in zip(positions, texts, metadatas, strict=True):
            for alias, rank in chunk_anchors(text, meta).items():
                if _kept(alias, self.min_chars):
                    rows.append((" ".join(alias), int(pos), int(rank)))
        new_anchors = set(a for a, _, _ in rows) - catalog.known_anchors([a for a, _, _ in rows], db=db)
        catalog.set_anchors(rows, db)
        self._scan(db, list(positions), list(texts))
        if find is None or not new_anchors:
            return
        added = set(int(p) for p in positions)
        again: dict[int, list[str]] = {}
        anchors = sorted(new_anchors)
        for anchor, found in zip(anchors, find([tuple(a.split()) for a in anchors]), strict=True):
            for p in found:
                if int(p) not in added:
                    again.setdefault(int(p), []).append(anchor)
        if again:  # find gives chunks holding the words anywhere: rescan only those holding an anchor as a phrase
            held = catalog.at(sorted(again), db=db, metadata=False)
            patterns = {a: phrase_pattern(a) for a in anchors}
            older: list[tuple[int, str]] = []
            for part, read in read_ahead(held, texts_of or (lambda cs: [c.text for c in cs])):
                for c, text in zip(part, read, strict=True):
                    low = folded(text)  # once per chunk, not per anchor
                    if any(patterns[a].search(low) for a in again[c.pos]):
                        older.append((c.pos, text))
            catalog.delete_mentions([pos for pos, _ in older], db)
            self._scan(db, [pos for pos, _ in older], [text for _, text in older])

    def rescan(self, db: Any, positions: Sequence[int], texts: Sequence[str]) -> None:
        """Record again what these chunks contain (their old mention rows replaced)."""
        self.catalog.delete_mentions(list(positions), db)
        self._scan(db, positions, texts)

    def _scan(self, db: Any, positions: Sequence[int], texts: Sequence[str]) -> None:
        """Record every anchor each chunk's text contains, with its word offset and whether a longer anchor there
        covers it: which of them a mention resolves to (the longest that leads out of the document, among anchors not
        too generic) is decided when the table is read, against the definers and counts then."""
        if not positions:
            return
        rows: list[tuple[int, int, str, bool]] = []
        for pos, found in zip(positions, self._found([words_of(text) for text in texts], db), strict=True):
            ends = sorted((i, i + len(a.split())) for i, a in found)
            for i, a in found:
                end = i + len(a.split())
                covered = any(j <= i and e >= end and (j, e) != (i, end) for j, e in ends if j <= i)
                rows.append((int(pos), i, a, not covered))
        self.catalog.set_mentions(rows, db)

    def _occurrences(self, folded: Sequence[str], db: Any = None) -> list[tuple[int, str]]:
        """Every ``(word offset, anchor)`` where an anchor the catalog holds occurs in the folded words."""
        return self._found([folded], db)[0]

    def _found(self, texts: Sequence[Sequence[str]], db: Any) -> list[list[tuple[int, str]]]:
        """Every ``(word offset, anchor)`` of each folded text, by offset, with two catalog reads for the batch: the
        one-word anchors among its words, and the longer ones that start with one of its word pairs. Each text is
        then walked along the prefixes of those anchors, so the cost follows the words, not the longest anchor (a
        corpus with 30-word titles made every text's 30-word spans candidates: gigabytes for a batch)."""
        words = {w for text in texts for w in text}
        pairs = {f"{a} {b}" for text in texts for a, b in zip(text, text[1:], strict=False)}
        known = self.catalog.known_anchors(sorted(words), db=db) | self.catalog.anchors_from(sorted(pairs), db=db)
        prefixes = {" ".join(parts[:n]) for a in known for parts in [a.split()] for n in range(1, len(parts) + 1)}
        out: list[list[tuple[int, str]]] = []
        for text in texts:
            found: list[tuple[int, str]] = []
            for i in range(len(text)):
                span = text[i]
                for n in range(i + 1, len(text) + 1):
                    if n > i + 1:
                        span = f"{span} {text[n - 1]}"
                    if span not in prefixes:
                        break
                    if span in known:
                        found.append((i, span))
            out.append(sorted(found))
        return out

    # ----------------------------------------------------------------------------------------------------- reading

    def _limits(self) -> tuple[float, float]:
        stats = self.catalog.stat_values()
        return (
            max(self.min_documents, self.max_share * stats.get("documents", 0.0)),
            max(self.min_documents, self.max_share * stats.get("chunks", 0.0)),
        )

    def _targets(self, anchors: Sequence[str], db: Any, *, cut: bool) -> dict[str, list[tuple[int, str]]]:
        """Each anchor's definers at its best rank, ``(position, document)``; with ``cut``, anchors too generic to
        follow lead nowhere."""
        rows = self.catalog.definers(anchors, db=db)
        out: dict[str, list[tuple[int, str]]] = {}
        for anchor, found in rows.items():
            top = max(r for _, r, _ in found)
            out[anchor] = [(p, d) for p, r, d in found if r == top]
        if cut and out:
            by_docs, by_chunks = self._limits()
            mentioned = self.catalog.mention_counts(list(out), db=db)
            for anchor in list(out):
                definers = out[anchor]
                generic = len(definers) > by_docs and len({d for _, d in definers}) > by_docs
                if generic or mentioned.get(anchor, 0) > by_chunks:
                    del out[anchor]
        return out

    def _mentions(
        self,
        folded: Sequence[str],
        db: Any = None,
        *,
        exclude: tuple[int, str] | None = None,
        occurrences: Sequence[tuple[int, str]] | None = None,
    ) -> list[tuple[Alias, frozenset[int]]]:
        """The anchors the folded words mention, with the positions they lead to (:func:`match_anchors` over the
        anchors found in them, or over the ``occurrences`` already recorded), too generic ones cut."""
        found = occurrences if occurrences is not None else self._occurrences(folded, db)
        if not found:
            return []
        targets = self._targets(sorted({a for _, a in found}), db, cut=True)
        own_pos, own_doc = exclude if exclude is not None else (-1, None)
        return _replay(found, _leads(targets, own_pos, own_doc))

    def _ids(self, positions: Iterable[int]) -> dict[int, str]:
        return {c.pos: c.id for c in self.catalog.at(sorted(set(positions)))}

    def mentions(self, text: str, exclude: str | None = None) -> list[tuple[Alias, frozenset[str]]]:
        """The anchors ``text`` mentions, in order, with the ids of the chunks that define them; with ``exclude`` (a
        chunk id), its document's chunks and the anchors it defines itself are left out."""
        spec = None
        if exclude is not None:
            at = self.catalog.positions([exclude]).get(exclude)
            if at is not None:
                spec = (at, self.catalog.documents_of([at]).get(at, ""))
        found = self._mentions(words_of(text), exclude=spec)
        ids = self._ids(p for _, hit in found for p in hit)
        return [(alias, frozenset(ids[p] for p in hit if p in ids)) for alias, hit in found]

    def documents(self, ids: Sequence[str]) -> dict[str, str]:
        """The document of each chunk id held."""
        at = self.catalog.positions(list(ids))
        docs = self.catalog.documents_of(list(at.values()))
        return {cid: docs[pos] for cid, pos in at.items() if pos in docs}

    def named_in(self, text: str) -> set[str]:
        """The ids of the chunks that define an anchor ``text`` (a question, in any letter case) names."""
        return set().union(*(hit for _, hit in self.mentions(text)))

    def _resolved(self, ids: Sequence[str]) -> dict[str, list[tuple[Alias, frozenset[int]]]]:
        """For each chunk id held, its recorded mentions (read in one batch for all the ids) resolved to the positions
        they lead to, as a scan of its text would resolve them now."""
        at = self.catalog.positions(list(ids))
        if not at:
            return {}
        said = self.catalog.mentioned_by(list(at.values()))
        docs = self.catalog.documents_of(list(at.values()))
        targets = self._targets(sorted({a for found in said.values() for _, a in found}), None, cut=True)
        return {cid: _replay(said.get(pos, []), _leads(targets, pos, docs.get(pos))) for cid, pos in at.items()}

    def link_outs(self, ids: Sequence[str]) -> dict[str, list[tuple[Alias, frozenset[str]]]]:
        """For each chunk id held, the anchors its text mentions that lead somewhere, in order, with the ids of the
        chunks each leads to: what ``mentions(text, exclude=id)`` finds, read from the mentions recorded at indexing
        instead of scanning the text again."""
        found = self._resolved(ids)
        names = self._ids(p for links in found.values() for _, hit in links for p in hit)
        return {
            cid: [(alias, frozenset(names[p] for p in hit if p in names)) for alias, hit in links if hit]
            for cid, links in found.items()
        }

    def outlinks(self, ids: Sequence[str]) -> dict[str, list[str]]:
        """For each chunk id held, the ids of the chunks its text links to (sorted by position): its recorded
        anchors resolved as a scan of its text would resolve them now."""
        links = {cid: {p for _, hit in found for p in hit} for cid, found in self._resolved(ids).items()}
        names = self._ids(p for found in links.values() for p in found)
        return {cid: [names[p] for p in sorted(found) if p in names] for cid, found in links.items()}


def _leads(
    targets: Mapping[str, Sequence[tuple[int, str]]], own: int, doc: str | None
) -> Callable[[Alias], frozenset[int]]:
    """Where a mention of an anchor in chunk ``own`` (of document ``doc``) leads: the anchor's definers outside that
    document; nowhere when the chunk is one of them (documents that share a heading are peers, not a bridge)."""

    def lead(alias: Alias) -> frozenset[int]:
        found = targets.get(" ".join(alias), ())
        if any(p == own for p, _ in found):
            return frozenset()
        return frozenset(p for p, d in found if d != doc)

    return lead


def _replay(
    occurrences: Sequence[tuple[int, str]], lead: Callable[[Alias], frozenset[int]]
) -> list[tuple[Alias, frozenset[int]]]:
    """:func:`match_anchors` over recorded occurrences ``(word offset, anchor)``: from each offset in order (skipping
    offsets inside a mention already found), the longest anchor there that leads somewhere."""
    by_start: dict[int, list[Alias]] = {}
    for start, anchor in occurrences:
        by_start.setdefault(start, []).append(tuple(anchor.split()))
    out: list[tuple[Alias, frozenset[int]]] = []
    done = 0
    for start in sorted(by_start):
        if start < done:
            continue
        for alias in sorted(by_start[start], key=len, reverse=True):
            hit = lead(alias)
            if hit:
                out.append((alias, hit))
                done = start + len(alias)
                break
    return out
