"""The BM25 scorers: exact scores by hand, the two backends agree, filters, persistence."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from modular_rag.index import SparseIndex, matches_where
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
    corpus = [Analyzer()(t) for t in (Path(__file__).parents[1] / "modular_rag/demo/corpus").glob("*.md")
              for t in [t.read_text()]]  # fmt: skip
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


def test_sparse_index_saves_and_loads_atomically(tmp_path: Path) -> None:
    index = SparseIndex.build(["a", "b"], ["red bicycle", "blue car"], [{"n": 1}, {"n": 2}], analyzer=Analyzer())
    file = tmp_path / "s.npz"
    index.save(file)
    loaded = SparseIndex.load(file)
    assert loaded.ids == ["a", "b"] and loaded.search("bicycles", 1)[0]["chunk_id"] == "a"
    assert loaded.search("car", 5, where={"n": 1}) == []
    assert [p.name for p in tmp_path.iterdir()] == ["s.npz"]


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


def _demo_chunks() -> tuple[list[str], list[str], list[dict[str, object]]]:
    """The demo corpus split into paragraphs: (ids ascending, texts, metadata)."""
    rows = []
    for path in sorted((Path(__file__).parents[1] / "modular_rag/demo/corpus").glob("*.md")):
        for i, para in enumerate(p for p in path.read_text().split("\n\n") if p.strip()):
            rows.append((f"{path.stem}-{i:03d}", para, {"doc": path.stem, "n": i}))
    rows.sort()
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


QUERIES = ("error code battery", "chain lube wax", "warranty aluminium frame years", "E07 display", "recycling")


def _assert_same_index(got: SparseIndex, want: SparseIndex) -> None:
    assert got.ids == want.ids and got.texts == want.texts and got.metadatas == want.metadatas
    assert got.digest == want.digest
    a, b = got.scorer, want.scorer
    if isinstance(a, PostingsBM25) and isinstance(b, PostingsBM25):
        assert a.vocab == b.vocab and a.n_docs == b.n_docs
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        assert np.allclose(a.data, b.data, rtol=1e-6, atol=0) and np.array_equal(a.tf, b.tf)  # type: ignore[arg-type]
    where = {"doc": "display-error-e07"}
    for query in QUERIES:
        assert got.search(query, 10) == want.search(query, 10)
        assert got.search(query, 5, where=where) == want.search(query, 5, where=where)
        assert got.score(query, want.ids[::7]).tolist() == want.score(query, want.ids[::7]).tolist()


@pytest.mark.parametrize(("backend", "idf"), [("sparse", "lucene"), ("sparse", "okapi"), ("rank_bm25", "okapi")])
def test_an_incremental_update_equals_a_full_build_and_analyses_only_the_added_texts(
    backend: str, idf: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, texts, metas = _demo_chunks()
    rng = np.random.default_rng(3)
    held_out = set(rng.choice(len(ids), size=12, replace=False).tolist())  # added later, at scattered positions
    removed = [ids[i] for i in rng.choice(len(ids), size=15, replace=False).tolist() if i not in held_out]
    start = [i for i in range(len(ids)) if i not in held_out]
    settings = {"analyzer": Analyzer(), "backend": backend, "idf": idf}
    before = SparseIndex.build([ids[i] for i in start], [texts[i] for i in start], [metas[i] for i in start],
                               **settings)  # type: ignore[arg-type]  # fmt: skip
    added = sorted(held_out, reverse=True)  # any order in
    analysed: list[str] = []
    many = Analyzer.many

    def counted(self: Analyzer, batch: Sequence[str]) -> list[list[str]]:
        analysed.extend(batch)
        return many(self, batch)

    monkeypatch.setattr(Analyzer, "many", counted)
    after = before.updated([ids[i] for i in added], [texts[i] for i in added], [metas[i] for i in added],
                           [*removed, "not-in-the-index"])  # fmt: skip
    assert sorted(analysed) == sorted(texts[i] for i in held_out)  # the kept texts are not analysed again
    final = [i for i in range(len(ids)) if ids[i] not in set(removed)]
    full = SparseIndex.build([ids[i] for i in final], [texts[i] for i in final], [metas[i] for i in final],
                             **settings)  # type: ignore[arg-type]  # fmt: skip
    _assert_same_index(after, full)
    assert len(before.ids) == len(start)  # the index updated from is left as it was
    # removing everything a term had drops the term; re-adding a chunk that is held replaces it
    again = after.updated([ids[final[0]]], ["a brand new text"], [{"doc": "x"}], after.ids[1:])
    assert again.ids == [ids[final[0]]] and again.texts == ["a brand new text"] and again.metadatas == [{"doc": "x"}]
    _assert_same_index(again, SparseIndex.build(again.ids, again.texts, again.metadatas, **settings))  # type: ignore[arg-type]


def test_update_rejects_what_it_cannot_merge() -> None:
    index = SparseIndex.build(["b", "a"], ["red bicycle", "blue car"], [{}, {}], analyzer=Analyzer())
    with pytest.raises(ValueError, match="ascending order"):
        index.updated(["c"], ["green"], [{}])
    index = SparseIndex.build(["a", "b"], ["red bicycle", "blue car"], [{}, {}], analyzer=Analyzer())
    with pytest.raises(ValueError, match="more than once"):
        index.updated(["c", "c"], ["x", "y"], [{}, {}])
    with pytest.raises(ValueError, match="one entry per chunk"):
        index.updated(["c"], [], [{}])
    with pytest.raises(ValueError, match="strictly ascending"):
        PostingsBM25.build([["a"], ["b"]]).updated(np.array([1, 0]), [], np.zeros(0, np.int64))


def test_a_sparse_file_of_the_older_format_loads_and_its_first_update_rebuilds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids, texts, metas = _demo_chunks()
    current = SparseIndex.build(ids[:-5], texts[:-5], metas[:-5], analyzer=Analyzer())
    scorer = current.scorer
    assert isinstance(scorer, PostingsBM25) and scorer.updatable
    old_scorer = PostingsBM25(scorer.indptr, scorer.indices, scorer.data, scorer.vocab, scorer.n_docs, k1=scorer.k1,
                              b=scorer.b, idf=scorer.idf)  # fmt: skip  # no term frequencies: what older versions saved
    file = tmp_path / "old.npz"
    SparseIndex(current.ids, current.texts, current.metadatas, old_scorer, current.analyzer, current.digest).save(file)
    with np.load(file) as npz, np.load(io.BytesIO(npz["postings__npz"].tobytes())) as postings:
        assert sorted(postings.files) == ["data", "indices", "indptr"]  # the older layout, exactly
    loaded = SparseIndex.load(file)
    assert not loaded.scorer.updatable
    assert loaded.search("E07 display", 3) == current.search("E07 display", 3)
    with caplog.at_level("INFO", logger="modular_rag.index"):
        after = loaded.updated(ids[-5:], texts[-5:], metas[-5:])
    assert "saved without term frequencies" in caplog.text
    _assert_same_index(after, SparseIndex.build(ids, texts, metas, analyzer=Analyzer()))
    assert after.scorer.updatable
    file_new = tmp_path / "new.npz"
    after.save(file_new)
    _assert_same_index(SparseIndex.load(file_new), after)
    assert SparseIndex.load(file_new).scorer.updatable
