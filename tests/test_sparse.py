"""The BM25 scorers: exact scores by hand, the two backends agree, filters, persistence."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from modular_rag.index import matches_where
from modular_rag.sparse import PostingsBM25, RankBM25
from modular_rag.text import Analyzer

pytestmark = pytest.mark.unit

DOCS = [["cat", "sat", "mat"], ["dog", "sat"], ["cat", "cat", "dog", "bird"], []]


def test_bm25_score_by_hand() -> None:
    index = PostingsBM25.build(DOCS, k1=1.2, b=0.75)
    docs, scores = index.top_k(["cat"], 4)
    n, df, avgdl = 4, 2, (3 + 2 + 4 + 0) / 4
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))

    def bm25(tf: int, dl: int) -> float:
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * dl / avgdl))

    assert list(docs) == [2, 0]
    assert scores.tolist() == pytest.approx([bm25(2, 4), bm25(1, 3)], rel=1e-6)


def test_backends_agree_with_okapi_idf() -> None:
    corpus = [
        Analyzer()(t)
        for t in (Path(__file__).parents[1] / "modular_rag/demo/corpus").glob("*.md")
        for t in [t.read_text()]
    ]
    fast, slow = PostingsBM25.build(corpus, idf="okapi"), RankBM25(corpus)
    for query in ("error code battery", "chain lube wax", "warranty aluminium frame years"):
        q = Analyzer()(query)
        (a, sa), (b, sb) = fast.top_k(q, 10), slow.top_k(q, 10)
        assert list(a) == list(b) and sa == pytest.approx(sb, rel=1e-5)


def test_mask_and_unknown_terms() -> None:
    index = PostingsBM25.build(DOCS)
    docs, _ = index.top_k(["cat", "dog"], 4, mask=np.array([False, True, False, True]))
    assert list(docs) == [1]
    assert len(index.top_k(["zebra"], 3)[0]) == 0


def test_analyzer_folds_stems_and_drops_stop_words() -> None:
    assert Analyzer()("The Cafés were running quickly!") == ["cafe", "run", "quick"]
    assert Analyzer(stemmer="none", stopwords="none")("The Cats") == ["the", "cats"]


def test_where_filters_match_chroma_semantics() -> None:
    meta = {"year": 2021, "source": "policy"}
    assert matches_where(meta, {"year": {"$gte": 2020}})
    assert not matches_where(meta, {"$and": [{"year": {"$gte": 2020}}, {"source": "manual"}]})
    assert matches_where(meta, {"$or": [{"year": 1999}, {"source": {"$in": ["policy", "faq"]}}]})
    assert not matches_where({}, {"year": {"$gt": 1}})


def _zipf_corpus(n_docs: int, seed: int) -> tuple[list[list[str]], np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(400)]
    p = 1 / np.arange(1, len(words) + 1)
    p /= p.sum()
    docs = [list(rng.choice(words, size=int(rng.integers(0, 60)), p=p)) for _ in range(n_docs)]
    return docs, p, words


def test_maxscore_pruning_returns_exactly_what_scoring_every_posting_does() -> None:
    docs, p, words = _zipf_corpus(3000, seed=1)
    pruned = PostingsBM25.build(docs, idf="okapi")
    pruned.prune_above = pruned.prune_min_docs = 0  # prune every multi-term query, even on this small corpus
    exhaustive = PostingsBM25.build(docs, idf="okapi")
    exhaustive.prune_above = 10**12
    rng = np.random.default_rng(2)
    mask = rng.random(len(docs)) < 0.5
    for _ in range(300):
        query = list(rng.choice(words, size=int(rng.integers(2, 12)), p=p))  # repeats count, as in rank-bm25
        for k in (1, 10, 50):
            for m in (None, mask):
                (a, sa), (b, sb) = pruned.top_k(query, k, m), exhaustive.top_k(query, k, m)
                assert a.tolist() == b.tolist() and sa.tolist() == sb.tolist(), (query, k)


def test_ties_at_the_cut_are_broken_by_position() -> None:
    index = PostingsBM25.build([["x", "y"], ["x"], ["x"], ["x"], ["y"]])
    docs, scores = index.top_k(["x"], 2)
    assert docs.tolist() == [1, 2] and scores[0] == scores[1]  # 1, 2 and 3 tie; the first positions win


def test_build_handles_empty_documents_and_corpora() -> None:
    assert PostingsBM25.build([]).top_k(["a"], 3)[0].tolist() == []
    index = PostingsBM25.build([[], ["a", "a", "b"], []])
    assert index.n_docs == 3 and index.top_k(["a", "b"], 3)[0].tolist() == [1]
    assert index.top_k(["b"], 3, mask=np.array([True, False, True]))[0].tolist() == []
