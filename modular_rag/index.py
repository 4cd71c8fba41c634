"""The knowledge index: a dense store (Chroma, Milvus or any LangChain ``VectorStore``), the catalog and BM25
postings, written together and read by key.

Where each piece of state lives, once:

* **vectors**: the dense store;
* **chunk texts and metadata**: the catalog (:class:`~modular_rag.catalog.Catalog`, one SQLite file beside the
  store) for Chroma on disk or in memory and for LangChain stores; the collection itself for Milvus and a Chroma
  server, which several machines share (the catalog then keeps each chunk's id, document and position only);
* **BM25**: postings in segments on disk, memory-mapped (:class:`~modular_rag.segments.SegmentedBM25`), with the
  document frequencies and lengths in the catalog; for Milvus, BM25 queries run in Milvus, and the postings beside
  the catalog serve the link table's look-ups at index time and rescoring;
* **the link table**: rows of the catalog (what each chunk defines, which anchors it mentions), computed for the
  chunks an add brings (:class:`~modular_rag.links.StoredLinks`);
* **sentence vectors**: rows of the catalog, each chunk's content sentences embedded when it is added
  (:class:`~modular_rag.sentences.SentenceVectors`), so the evidence scorer embeds only the question.

A worker that opens an index reads none of it whole: a question's texts, IDFs, titles and links are read for its ids
and terms. Writes go catalog first, then the dense store, then the postings, so a run killed at any point is completed
by the next one (chunk ids come from content: re-adding is a no-op).
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from modular_rag.catalog import Catalog, StoredChunk
from modular_rag.errors import ProviderError
from modular_rag.index_writes import AddReport, IndexWrites
from modular_rag.milvus import MilvusStore
from modular_rag.segments import SegmentedBM25, lucene_idf
from modular_rag.sentences import SentenceVectors
from modular_rag.state import Chunk, Hit
from modular_rag.stores import ChromaStore, DenseStore, LangChainStore, matches_where
from modular_rag.text import Analyzer
from modular_rag.trace import record

if TYPE_CHECKING:
    from modular_rag.providers import Providers
    from modular_rag.retriever import IndexRetriever

__all__ = [
    "Encoder",
    "DenseStore",
    "ChromaStore",
    "LangChainStore",
    "KnowledgeIndex",
    "AddReport",
    "matches_where",
    "chunk_vectors",
]

log = logging.getLogger(__name__)


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    @property
    def dim(self) -> int | None: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_query(self, text: str) -> np.ndarray: ...


class KnowledgeIndex(IndexWrites):
    """Dense store + catalog + BM25 postings + link table, written together.

    Args:
        dense: The dense store.
        encoder: Embeds chunks and queries (not used for a LangChain store, which embeds itself).
        folder: Where the catalog and the postings live; ``None`` keeps them in memory (a temporary folder).
        analyzer: Turns text into BM25 terms.
        k1, b: BM25's parameters.
        encoder_identity: What the encoder's vectors are (:func:`~modular_rag.sentences.encoder_identity`); with
            it, each chunk's sentence vectors are stored when it is added (``None``: they are not).
    """

    def __init__(
        self,
        dense: ChromaStore | LangChainStore | MilvusStore,
        encoder: Encoder | None,
        *,
        folder: Path | None,
        analyzer: Analyzer,
        k1: float = 1.2,
        b: float = 0.75,
        encoder_identity: str | None = None,
    ) -> None:
        self.dense, self.encoder, self.analyzer, self.k1, self.b = dense, encoder, analyzer, k1, b
        self._temp = tempfile.TemporaryDirectory(prefix="modular-rag-index-") if folder is None else None
        self.folder = Path(self._temp.name) if self._temp is not None else Path(folder)  # type: ignore[arg-type]
        self.catalog = Catalog(self.folder / "catalog.sqlite" if folder is not None else None)
        # the postings also when the store ranks BM25 itself (Milvus): an add finds the older chunks that hold a new
        # anchor in them (one Milvus search per anchor made bulk builds crawl), and rescoring reads them by position
        self.postings: SegmentedBM25 = SegmentedBM25(self.folder / "bm25", k1=k1, b=b)
        self._lock = threading.RLock()
        self._links: Any = None
        self._analyzed = False
        self.sentences = SentenceVectors(self.catalog, encoder, encoder_identity, self._texts)
        self._backfilled = False

    def _reconcile(self) -> None:
        """Take into the catalog the chunks the store holds and the catalog lacks (read from the store once)."""
        if isinstance(self.dense, LangChainStore):
            return
        held = self.catalog.count()
        stored = self.dense.count()
        # fewer in the store: a write killed between the catalog's commit and the store's (the next index run writes
        # what is missing); reading the whole store would find nothing the catalog lacks
        if stored <= held or (held and not self.texts_in_store):
            return
        log.info(
            "%s holds %d chunks, the index's catalog %d: reading the missing ones from the store",
            self.dense.describe(),
            stored,
            held,
        )
        ids, texts, metas = self.dense.dump()
        known = self.catalog.positions(ids)
        missing = [
            Chunk(chunk_id=i, text=t, metadata=m) for i, t, m in zip(ids, texts, metas, strict=True) if i not in known
        ]
        for start in range(0, len(missing), 5000):  # their sentence vectors come at the next add (a writer's work)
            self._catalog_add(missing[start : start + 5000], sentences=False)
        self.sync_postings()

    def _analyzer_key(self) -> str:
        return f"{self.analyzer.stemmer_name}/{self.analyzer.stopwords_name}"

    def _prepare(self) -> None:
        """Once per process: bring the catalog in line with the store and the analyzer. A catalog that holds fewer
        chunks than a store others write to (a Chroma server), or none where the store holds some (an index written
        before the catalog existed), takes the missing chunks from the store; term statistics made by another analyzer
        (other stemming or stop words) are counted again and the postings rewritten from the stored texts (logged)."""
        if self._analyzed:
            return
        with self._lock:
            if self._analyzed:
                return
            self._reconcile()
            if self.catalog.pending_scan():
                log.info("scanning the index's chunks for the anchors they mention (a catalog of an earlier version)")
                for part in self.catalog.scan():
                    with self.catalog.transaction() as db:
                        self._stored_links().rescan(db, [c.pos for c in part], self._texts(part))
                with self.catalog.transaction() as db:
                    self.catalog.scanned(db)
            key, held = self._analyzer_key(), self.catalog.setting("analyzer")
            if held is not None and held != key and not self.texts_in_store:
                log.info(
                    "the index's BM25 terms were made by analyzer %s; analysing its chunks again with %s", held, key
                )
                first = True
                for part in self.catalog.scan():
                    terms = self.analyzer.many([c.text for c in part])
                    with self.catalog.transaction() as db:
                        self.catalog.recount_terms(
                            {c.pos: len(t) for c, t in zip(part, terms, strict=True)}, terms, db, first=first
                        )
                    first = False
                self.postings.clear()
                self.sync_postings()
            if held != key:
                with self.catalog.transaction() as db:
                    self.catalog.set_setting("analyzer", key, db)
            self._analyzed = True

    # --------------------------------------------------------------------------------------------------- structure

    def warm(self) -> float:
        """Make what was written ready for readers (a Milvus collection builds its search structures on the first
        search after a write: see :meth:`~modular_rag.milvus.MilvusStore.warm`), so the indexer pays that and not a
        worker's first question. Returns the seconds it took (0 for stores that need nothing)."""
        warm = getattr(self.dense, "warm", None)
        return float(warm()) if callable(warm) else 0.0

    @property
    def bm25_in_store(self) -> bool:
        """Whether the dense store ranks BM25 itself (Milvus, unless its ``bm25`` setting leaves it to the kit's
        postings: :attr:`~modular_rag.milvus.MilvusStore.ranks_bm25`)."""
        return isinstance(self.dense, MilvusStore) and self.dense.ranks_bm25

    @property
    def texts_in_store(self) -> bool:
        """Whether chunk texts live in the dense store (Milvus, a Chroma server: shared between machines) rather than
        in the catalog."""
        return isinstance(self.dense, MilvusStore) or (isinstance(self.dense, ChromaStore) and bool(self.dense.host))

    @property
    def enumerable(self) -> bool:
        """Whether the kit knows every chunk the store holds (its catalog agrees with the store), which BM25, hybrid
        retrieval, link hops and ``--sync`` need. A LangChain store opened on chunks another program wrote is not."""
        if isinstance(self.dense, LangChainStore):
            return self.catalog.count() > 0
        return True

    def require_listing(self, feature: str) -> None:
        """Refuse a feature that needs every chunk the store holds (BM25, hybrid retrieval, link hops) when the kit
        cannot know them: a LangChain store whose chunks were not indexed through the kit in this process. (On such a
        store ``--sync`` removes only chunks the kit indexed.)

        Raises:
            ConfigError: Naming the store and the alternatives.
        """
        if self.enumerable:
            return
        from modular_rag.errors import ConfigError

        raise ConfigError(
            "providers.vectorstore",
            f"{feature} needs every chunk the index holds, and "
            f"{self.dense.describe()} cannot list them (a LangChain VectorStore has no API for it; the "
            "kit knows only the chunks indexed through it, and none were in this process): index the "
            "documents through the kit (modular-rag index, index_paths or index_documents) so its "
            "catalog holds them, use a store the kit reads (vectorstore: chroma or milvus), or retrieve "
            "with dense only",
        )

    # ----------------------------------------------------------------------------------------------------- reading

    def count(self) -> int:
        """Chunks held (the catalog's count; for a store that others write to, the store's)."""
        self._prepare()
        if self.texts_in_store:
            return self.dense.count()
        return self.catalog.count()

    def chunks(self, ids: Sequence[str]) -> dict[str, Hit]:
        """The chunks of these ids (text and metadata; ids not held are left out), read by key."""
        if not ids:
            return {}
        self._prepare()
        if self.texts_in_store:
            return {h["chunk_id"]: h for h in self.dense.get(list(ids))}  # type: ignore[union-attr]
        return {c.id: _hit(c) for c in self.catalog.get(list(dict.fromkeys(ids))).values()}

    def hits(self, ids: Sequence[str], channel: str = "link") -> list[Hit]:
        """The chunks of these ids as hits, in the order given (ids not held are skipped)."""
        found = self.chunks(ids)
        return [Hit(**{**found[c], "channel": channel}) for c in dict.fromkeys(ids) if c in found]

    def fill(self, hits: Sequence[Hit]) -> list[Hit]:
        """Hits with the text and metadata of those that lack them, read by id (from the catalog, or the store where
        it keeps the texts). A ranking that fuses or cuts reads ids and scores first and fills only what it keeps."""
        missing = [h["chunk_id"] for h in hits if not h["text"]]
        if not missing:
            return list(hits)
        found = self.chunks(missing)
        return [
            Hit(**{**h, "text": found[h["chunk_id"]]["text"], "metadata": dict(found[h["chunk_id"]]["metadata"])})
            if not h["text"] and h["chunk_id"] in found
            else h
            for h in hits
        ]

    def idfs(self, terms: Sequence[str]) -> dict[str, float]:
        """Lucene's BM25 IDF of each analysed term over the indexed chunks (read from the catalog's statistics)."""
        self._prepare()
        n, _ = self.catalog.stats()
        return {t: lucene_idf(df, n) for t, df in self.catalog.document_frequencies(terms).items()}

    def unseen(self, terms: Sequence[str]) -> set[str]:
        """The analysed terms no indexed chunk holds, nor one spelled nearly like it (a letter or two apart, as
        ``Moncalm`` from ``Montcalm``, or a form of it: ``DSMs``), nor two held terms run together (``superbowl``)."""
        import difflib

        self._prepare()
        missing = [t for t, df in self.catalog.document_frequencies(list(terms)).items() if df == 0]
        out = set()
        for term in missing:
            if len(term) < 4:
                out.add(term)
                continue
            near = self.catalog.terms_from(term[:3])
            suffixed = any(term.startswith(n) and term[len(n) :] in _SUFFIXES for n in near)  # DSMs: dsm
            if suffixed or difflib.get_close_matches(term, near, n=1, cutoff=0.8):
                continue
            halves = [(term[:i], term[i:]) for i in range(3, len(term) - 2)]
            found = self.catalog.document_frequencies([h for pair in halves for h in pair]) if halves else {}
            if any(found.get(a) and found.get(b) for a, b in halves):
                continue
            out.add(term)
        return out

    def idf(self, term: str) -> float:
        """Lucene's BM25 IDF of one analysed term; a term no chunk has gets the highest."""
        return self.idfs([term])[term]

    def _avgdl(self) -> float:
        n, length = self.catalog.stats()
        return length / n if n and length else 1.0

    def score(self, query: str, hits: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The BM25 scores of chunks already in hand for ``query`` (rescoring, not a retrieval): from the postings
        by position (chunks the index does not hold score 0)."""
        terms = self.analyzer(query)
        out = np.zeros(len(hits), dtype=np.float32)
        if not terms or not len(hits):
            return out
        idf = self.idfs(terms)
        avgdl = self._avgdl()
        at = self.catalog.positions([h["chunk_id"] for h in hits])
        known = [(i, at[h["chunk_id"]]) for i, h in enumerate(hits) if h["chunk_id"] in at]
        if known:
            out[[i for i, _ in known]] = self.postings.score(terms, [p for _, p in known], idf, avgdl)
        return out

    def search_dense(
        self,
        query: str,
        k: int,
        where: Mapping[str, Any] | None = None,
        vector: np.ndarray | None = None,
        *,
        fill: bool = True,
    ) -> list[Hit]:
        """Dense retrieval (records one retrieval in the current node's ledger). With ``fill=False`` hits may come
        without their texts (see :meth:`fill`)."""
        record(retrievals=1)
        if isinstance(self.dense, LangChainStore):
            return self.dense.query_text(query, k, where)
        if vector is None:
            if self.encoder is None:
                raise ProviderError("dense retrieval needs an embeddings provider")
            vector = self.encoder.encode_query(query)
        hits = self.dense.query(vector, k, where)
        return self.fill(hits) if fill else hits

    def search_sparse(
        self, query: str, k: int, where: Mapping[str, Any] | None = None, *, fill: bool = True
    ) -> list[Hit]:
        """BM25 retrieval (records one retrieval in the current node's ledger): ranked in the store when it runs
        BM25 itself (Milvus), else over the postings, with IDFs and lengths from the catalog. With ``fill=False``
        the hits come without their texts and metadata (see :meth:`fill`)."""
        record(retrievals=1)
        if self.bm25_in_store:
            return self.dense.search_sparse(query, k, where)  # type: ignore[union-attr]
        self._prepare()
        terms = self.analyzer(query)
        if not terms or k <= 0:
            return []
        allowed = self._allowed(where) if where else None
        positions, scores = self.postings.top_k(terms, k, self.idfs(terms), self._avgdl(), allowed=allowed)
        ids = self.catalog.ids_at(positions.tolist())
        hits = [
            Hit(chunk_id=ids[p], text="", score=float(s), channel="bm25", metadata={})
            for p, s in zip(positions.tolist(), scores.tolist(), strict=True)
            if p in ids
        ]
        return self.fill(hits) if fill else hits

    def _allowed(self, where: Mapping[str, Any]) -> np.ndarray:
        """The positions whose metadata a filter admits (sorted), cached per filter and index generation."""
        return _allowed_positions(self.catalog, self.postings.generation, _freeze(where))

    def sentence_vectors(self, ids: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        """The stored vectors of these chunks' content sentences: chunk id -> {sentence: vector}
        (:meth:`~modular_rag.sentences.SentenceVectors.of`; chunks without them are left out)."""
        return self.sentences.of(ids)

    def metadata_fields(self) -> dict[str, set[type]]:
        """The metadata fields the indexed chunks have, with the value types seen (for filter validation)."""
        return self.catalog.metadata_fields()

    def as_retriever(
        self, search_type: str = "hybrid", *, k: int = 4, filter: Mapping[str, Any] | None = None, **params: Any
    ) -> IndexRetriever:
        """This index as a LangChain ``BaseRetriever`` (:class:`~modular_rag.retriever.IndexRetriever`).

        Args:
            search_type: A registered retrieval operator: ``hybrid``, ``dense`` or ``bm25``.
            k: Documents returned per query.
            filter: A Chroma-style ``where`` filter on chunk metadata.
            **params: The operator's other params (hybrid: ``pool``, ``fusion``, ``weights``, ``rrf_k``).

        Raises:
            ConfigError: If the search type is unknown or a param invalid.
        """
        from modular_rag.retriever import IndexRetriever

        return IndexRetriever(
            index=self, search_type=search_type, k=k, filter=dict(filter) if filter else None, params=params
        )

    @property
    def links(self) -> Any:
        """The link table over the indexed chunks (:class:`~modular_rag.links.StoredLinks`), read by key."""
        self._prepare()
        return self._stored_links()

    def _stored_links(self) -> Any:
        if self._links is None:
            from modular_rag.links import StoredLinks

            with self._lock:
                if self._links is None:
                    self._links = StoredLinks(self.catalog)
        return self._links


_SUFFIXES = frozenset({"s", "es", "ed", "ing", "er", "ers", "an", "ian", "al", "ly", "ic", "ism", "ist"})
"""Endings that make another form of a held term (``DSMs`` of ``DSM``), not another name (``graphql``)."""


def _hit(chunk: StoredChunk) -> Hit:
    return Hit(chunk_id=chunk.id, text=chunk.text, score=0.0, channel="link", metadata=dict(chunk.metadata))


def _freeze(where: Mapping[str, Any]) -> str:
    import json

    return json.dumps(where, sort_keys=True, default=str)


@lru_cache(maxsize=64)
def _allowed_positions(catalog: Catalog, generation: int, where: str) -> np.ndarray:
    """Positions whose metadata matches a filter (one pass over the catalog's metadata per filter and generation)."""
    import json

    condition = json.loads(where)
    found = [c.pos for part in catalog.scan() for c in part if matches_where(c.metadata, condition)]
    return np.asarray(found, dtype=np.int64)


def chunk_vectors(providers: Providers, hits: list[Hit]) -> np.ndarray:
    """Embeddings of the hits' chunks: stored vectors from the dense store when it has them, else encoded now."""
    getter = getattr(providers.index.dense, "get_vectors", None)
    stored = getter([h["chunk_id"] for h in hits]) if getter else {}
    missing = [i for i, h in enumerate(hits) if h["chunk_id"] not in stored]
    fresh = providers.encoder.encode([hits[i]["text"] for i in missing]) if missing else np.zeros((0, 0), np.float32)
    rows = []
    j = 0
    for h in hits:
        if h["chunk_id"] in stored:
            rows.append(stored[h["chunk_id"]])
        else:
            rows.append(fresh[j])
            j += 1
    return np.vstack(rows).astype(np.float32) if rows else np.zeros((0, 0), np.float32)
