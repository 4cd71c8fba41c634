"""BM25 scorers for the sparse index.

Two backends score the same analysed terms:

* ``sparse`` (default): term-major postings (a CSC matrix) with BM25 weights precomputed at build time; a query
  sums the postings of its terms and takes the top k with ``argpartition``. Cost grows with the postings of the
  query's terms, not with the corpus, so it stays in milliseconds at a million chunks.
* ``rank_bm25``: the ``rank-bm25`` package's ``BM25Okapi``, which scores every document in Python per query term;
  kept selectable for comparison.

With ``idf="okapi"`` the sparse scorer uses rank-bm25's IDF (with its epsilon floor for very common terms), so the
two backends return the same scores; the default ``idf="lucene"`` uses Lucene's always-positive IDF.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

__all__ = ["SparseScorer", "PostingsBM25", "RankBM25", "build_scorer", "load_scorer"]

IdfKind = Literal["lucene", "okapi"]


class SparseScorer(Protocol):
    """Scores analysed queries against the corpus it was built on; returns document positions and scores."""

    backend: str

    def top_k(
        self, terms: Sequence[str], k: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def save(self, folder: Path) -> None: ...


def _top_k(doc_ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if len(scores) > k:
        part = np.argpartition(-scores, k - 1)[:k]
        doc_ids, scores = doc_ids[part], scores[part]
    order = np.lexsort((doc_ids, -scores))  # score desc, then position asc: deterministic ties
    return doc_ids[order], scores[order]


class PostingsBM25:
    """BM25 over precomputed postings (term-major sparse matrix of per-(term, document) BM25 weights).

    Args:
        indptr, indices, data: CSC arrays: the postings of term ``t`` are ``indices[indptr[t]:indptr[t+1]]`` with
            weights ``data[...]``.
        vocab: term -> column.
        n_docs: number of documents.
        k1, b, idf: the BM25 settings the weights were computed with (kept for the manifest).
    """

    backend = "sparse"

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        vocab: dict[str, int],
        n_docs: int,
        *,
        k1: float,
        b: float,
        idf: IdfKind,
    ) -> None:
        self.indptr, self.indices, self.data = indptr, indices, data
        self.vocab, self.n_docs = vocab, n_docs
        self.k1, self.b, self.idf = k1, b, idf

    @classmethod
    def build(
        cls, corpus_terms: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75, idf: IdfKind = "lucene"
    ) -> PostingsBM25:
        """Build from analysed documents (one term list per document)."""
        vocab: dict[str, int] = {}
        doc_parts: list[np.ndarray] = []
        term_parts: list[np.ndarray] = []
        tf_parts: list[np.ndarray] = []
        doc_len = np.zeros(len(corpus_terms), dtype=np.float32)
        for d, terms in enumerate(corpus_terms):
            doc_len[d] = len(terms)
            if not terms:
                continue
            ids = np.fromiter((vocab.setdefault(t, len(vocab)) for t in terms), dtype=np.int64, count=len(terms))
            uniq, counts = np.unique(ids, return_counts=True)
            term_parts.append(uniq)
            tf_parts.append(counts.astype(np.float32))
            doc_parts.append(np.full(len(uniq), d, dtype=np.int32))
        n_docs, n_terms = len(corpus_terms), len(vocab)
        if term_parts:
            term = np.concatenate(term_parts)
            doc = np.concatenate(doc_parts)
            tf = np.concatenate(tf_parts)
        else:
            term = np.zeros(0, np.int64)
            doc = np.zeros(0, np.int32)
            tf = np.zeros(0, np.float32)
        df = np.bincount(term, minlength=n_terms).astype(np.float64)
        idf_values = _idf(df, n_docs, idf)
        avgdl = float(doc_len.mean()) if n_docs and doc_len.sum() else 1.0
        norm = k1 * (1.0 - b + b * doc_len[doc] / avgdl)
        weights = (idf_values[term] * tf * (k1 + 1.0) / (tf + norm)).astype(np.float32)
        order = np.lexsort((doc, term))
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(term, minlength=n_terms), out=indptr[1:])
        return cls(indptr, doc[order], weights[order], vocab, n_docs, k1=k1, b=b, idf=idf)

    def top_k(
        self, terms: Sequence[str], k: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions and scores of the ``k`` best documents for the analysed query ``terms``.

        Repeated query terms count as many times as they occur (as in rank-bm25). ``mask`` (bool per document)
        restricts the result to documents where it is true.
        """
        counts: dict[int, int] = {}
        for t in terms:
            col = self.vocab.get(t)
            if col is not None:
                counts[col] = counts.get(col, 0) + 1
        if not counts or k <= 0:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        spans = [(self.indptr[c], self.indptr[c + 1], n) for c, n in counts.items()]
        if len(spans) == 1:
            s, e, n = spans[0]
            docs, scores = self.indices[s:e], self.data[s:e] * n
        else:
            docs_all = np.concatenate([self.indices[s:e] for s, e, _ in spans])
            weights_all = np.concatenate([self.data[s:e] * n for s, e, n in spans])
            if len(docs_all) * 8 < self.n_docs:
                docs, inverse = np.unique(docs_all, return_inverse=True)
                scores = np.bincount(inverse, weights=weights_all).astype(np.float32)
            else:
                dense = np.bincount(docs_all, weights=weights_all, minlength=self.n_docs)
                docs = np.flatnonzero(dense).astype(np.int32)
                scores = dense[docs].astype(np.float32)
        if mask is not None:
            keep = mask[docs]
            docs, scores = docs[keep], scores[keep]
        return _top_k(np.asarray(docs), np.asarray(scores), k)

    def save(self, folder: Path) -> None:
        """Write the postings and vocabulary into ``folder``."""
        np.savez(folder / "postings.npz", indptr=self.indptr, indices=self.indices, data=self.data)
        meta = {"backend": self.backend, "n_docs": self.n_docs, "k1": self.k1, "b": self.b, "idf": self.idf}
        (folder / "scorer.json").write_text(json.dumps(meta))
        (folder / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False))

    @classmethod
    def load(cls, folder: Path) -> PostingsBM25:
        """Read what :meth:`save` wrote."""
        meta = json.loads((folder / "scorer.json").read_text())
        arrays = np.load(folder / "postings.npz")
        vocab = json.loads((folder / "vocab.json").read_text())
        return cls(
            arrays["indptr"], arrays["indices"], arrays["data"], vocab, meta["n_docs"],
            k1=meta["k1"], b=meta["b"], idf=meta["idf"],
        )  # fmt: skip


def _idf(df: np.ndarray, n_docs: int, kind: IdfKind) -> np.ndarray:
    if kind == "lucene":
        return np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    # rank-bm25 BM25Okapi: log((N - df + 0.5) / (df + 0.5)), negative values floored at epsilon * mean idf
    raw = np.log((n_docs - df + 0.5) / (df + 0.5)) if len(df) else df
    if len(raw):
        floor = 0.25 * float(raw.sum()) / len(raw)
        raw = np.where(raw < 0, floor, raw)
    return raw


class RankBM25:
    """The ``rank-bm25`` package's ``BM25Okapi`` behind the scorer interface (slow at scale; for comparison).

    It keeps the analysed corpus in memory and is rebuilt from it on load.
    """

    backend = "rank_bm25"

    def __init__(self, corpus_terms: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        from rank_bm25 import BM25Okapi

        self._terms = [list(t) for t in corpus_terms]
        self.k1, self.b = k1, b
        self.n_docs = len(self._terms)
        # BM25Okapi divides by the corpus size; give it one empty document when the corpus is empty
        self._bm25 = BM25Okapi(self._terms or [[]], k1=k1, b=b)

    def top_k(
        self, terms: Sequence[str], k: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions and scores of the ``k`` best documents (documents with score 0 are left out)."""
        if not self.n_docs or not terms or k <= 0:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        scores = np.asarray(self._bm25.get_scores(list(terms)), dtype=np.float32)
        docs = np.flatnonzero(scores > 0).astype(np.int32)
        if mask is not None:
            docs = docs[mask[docs]]
        return _top_k(docs, scores[docs], k)

    def save(self, folder: Path) -> None:
        """Write the analysed corpus (rank-bm25 has no persistent form of its own)."""
        meta = {"backend": self.backend, "n_docs": self.n_docs, "k1": self.k1, "b": self.b}
        (folder / "scorer.json").write_text(json.dumps(meta))
        with open(folder / "terms.jsonl", "w", encoding="utf-8") as fh:
            for terms in self._terms:
                fh.write(json.dumps(terms, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, folder: Path) -> RankBM25:
        """Rebuild from the analysed corpus written by :meth:`save`."""
        meta = json.loads((folder / "scorer.json").read_text())
        with open(folder / "terms.jsonl", encoding="utf-8") as fh:
            terms = [json.loads(line) for line in fh]
        return cls(terms, k1=meta["k1"], b=meta["b"])


_BUILDERS: dict[str, Callable[..., SparseScorer]] = {
    "sparse": lambda terms, k1, b, idf: PostingsBM25.build(terms, k1=k1, b=b, idf=idf),
    "rank_bm25": lambda terms, k1, b, idf: RankBM25(terms, k1=k1, b=b),
}
_LOADERS: dict[str, Callable[[Path], SparseScorer]] = {"sparse": PostingsBM25.load, "rank_bm25": RankBM25.load}


def build_scorer(
    backend: str, corpus_terms: Sequence[Sequence[str]], *, k1: float, b: float, idf: IdfKind = "lucene"
) -> SparseScorer:
    """Build a scorer of the named backend (``sparse`` or ``rank_bm25``).

    Raises:
        ValueError: If the backend is unknown (the message lists the backends).
    """
    try:
        builder = _BUILDERS[backend]
    except KeyError:
        raise ValueError(f"unknown sparse backend {backend!r}; backends: {', '.join(_BUILDERS)}") from None
    return builder(corpus_terms, k1, b, idf)


def load_scorer(folder: Path) -> SparseScorer:
    """Load the scorer saved in ``folder`` (its backend is read from ``scorer.json``)."""
    meta: dict[str, Any] = json.loads((folder / "scorer.json").read_text())
    return _LOADERS[meta["backend"]](folder)

