"""On the SciFact dev split, hybrid retrieval beats BM25-only and dense-only, computed in the same run; the sparse
backends agree. Slow: the first run embeds the 5,183 abstracts (cached under .modular_rag/eval afterwards)."""

from __future__ import annotations

import pytest

from benchmarks.bench import retrieval_preset
from tests.conftest import DATASETS

SCIFACT = DATASETS / "scifact"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (SCIFACT / "corpus.jsonl").exists(), reason=f"SciFact not found at {SCIFACT}"),
]


@pytest.fixture(scope="module")
def scifact():
    from modular_rag.eval import load_beir
    from modular_rag.eval.runner import dataset_providers

    dataset = load_beir(SCIFACT)
    return dataset, dataset_providers(dataset, progress=False, sentences=False)  # retrieval only: none read


def test_hybrid_beats_bm25_and_dense_on_ndcg10(scifact) -> None:
    from modular_rag.eval.runner import run_retrieval

    dataset, env = scifact
    assert len(dataset.queries) == 210
    scores = {name: run_retrieval(retrieval_preset(name), dataset, env).mean for name in ("bm25", "dense", "hybrid")}
    ndcg = {name: s["ndcg@10"] for name, s in scores.items()}
    assert ndcg["hybrid"] > ndcg["bm25"] and ndcg["hybrid"] > ndcg["dense"], ndcg


def test_sparse_backends_give_the_same_top10(scifact) -> None:
    from modular_rag.sparse import PostingsBM25, RankBM25

    dataset, env = scifact
    analyzer = env.index.analyzer
    terms = [analyzer(c.text) for part in env.index.catalog.scan() for c in part]
    fast = PostingsBM25.build(terms, idf="okapi")
    slow = RankBM25(terms)
    for query in dataset.queries[:60]:
        q = analyzer(query.text)
        a_docs, a_scores = fast.top_k(q, 10)
        b_docs, b_scores = slow.top_k(q, 10)
        assert a_scores == pytest.approx(b_scores, rel=1e-4), query.text
        assert list(a_docs) == list(b_docs), query.text
