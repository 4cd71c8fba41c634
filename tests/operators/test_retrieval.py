"""Retrieval operators on the real demo index (Chroma + BM25 + bundled MiniLM)."""

from __future__ import annotations

from typing import Any

import pytest

from modular_rag.config import load_config
from modular_rag.errors import ConfigError
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from operators.fusion import rrf, score_fusion

pytestmark = pytest.mark.integration


def run(env: Providers, name: str, state: dict[str, Any], **params: Any) -> list[dict[str, Any]]:
    info = get_operator(Port.RETRIEVE, name)
    return info.factory(info.params.model_validate(params), env)(state)["candidates"]


@pytest.mark.parametrize("name", ["dense", "bm25", "hybrid"])
def test_exact_code_questions_find_their_document(demo_env: Providers, name: str) -> None:
    hits = run(demo_env, name, {"query": "What does display code E17 report?"}, k=3)
    assert len(hits) == 3
    assert {"chunk_id", "text", "score", "channel", "metadata"} <= set(hits[0])
    if name != "dense":  # a bare code is a lexical match; BM25 and hybrid must rank it first
        assert hits[0]["metadata"]["doc_id"] == "display-error-e17"
    assert "display-error-e17" in [h["metadata"]["doc_id"] for h in hits]
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_metadata_filter_passes_through_every_channel(demo_env: Providers) -> None:
    where = {"year": {"$lte": 2019}}
    for name in ("dense", "bm25", "hybrid"):
        hits = run(demo_env, name, {"query": "warranty on aluminium frames", "filter": where}, k=5)
        assert hits and all(h["metadata"]["year"] <= 2019 for h in hits), name
    static = run(
        demo_env, "hybrid", {"query": "warranty", "filter": {"source": "policy"}}, k=5, filter={"year": {"$gte": 2023}}
    )
    assert static and all(h["metadata"]["source"] == "policy" and h["metadata"]["year"] >= 2023 for h in static)


def test_several_queries_are_fused(demo_env: Providers) -> None:
    hits = run(demo_env, "bm25", {"query": "x", "queries": ["error E07", "brake pads part number"]}, k=6)
    docs = [h["metadata"]["doc_id"] for h in hits]
    assert "display-error-e07" in docs and "tp-4410-brake-pads" in docs


def test_pool_is_separate_from_k(demo_env: Providers) -> None:
    hits = run(demo_env, "hybrid", {"query": "tyre pressure"}, k=2, pool=30)
    assert len(hits) == 2
    with pytest.raises(ConfigError, match="pool"):
        load_config({"pattern": "linear", "operators": {"retrieve": {"name": "hybrid", "params": {"k": 9, "pool": 3}}}})


@pytest.mark.parametrize("fusion", ["rrf", "convex", "weighted"])
def test_hybrid_fusion_methods(demo_env: Providers, fusion: str) -> None:
    hits = run(demo_env, "hybrid", {"query": "How should I lubricate my chain?"}, k=3, fusion=fusion)
    assert hits[0]["metadata"]["doc_id"] == "chain-lubrication-guide"
    assert all(h["channel"] == "hybrid" for h in hits)


@pytest.mark.unit
def test_rrf_by_hand() -> None:
    def hit(cid: str, score: float) -> dict[str, Any]:
        return {"chunk_id": cid, "text": cid, "score": score, "channel": "x", "metadata": {}}

    a = [hit("d1", 9), hit("d2", 5)]
    b = [hit("d2", 0.9), hit("d3", 0.8)]
    fused = rrf([a, b], rrf_k=60)
    scores = {h["chunk_id"]: h["score"] for h in fused}
    assert scores["d2"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["d1"] == pytest.approx(1 / 61)
    assert [h["chunk_id"] for h in fused] == ["d2", "d1", "d3"]
    convex = score_fusion([a, b], weights=[0.5, 0.5], norm="minmax")
    # d2: 0.5*0 + 0.5*1; d1: 0.5*1 + 0.5*min(b)=0; d3: 0.5*0 + 0.5*0
    assert {h["chunk_id"]: round(h["score"], 6) for h in convex} == {"d1": 0.5, "d2": 0.5, "d3": 0.0}


def test_chroma_store_returns_what_it_holds_when_k_exceeds_it() -> None:
    import numpy as np

    from modular_rag.index import ChromaStore

    store = ChromaStore(in_memory=True, collection="k-exceeds-store")
    vector = np.eye(4, dtype=np.float32)[0]
    assert store.query(vector, 10) == []  # empty collection
    store.add(["a", "b"], ["alpha", "beta"], [{"n": 1}, {"n": 2}], np.eye(4, dtype=np.float32)[:2])
    hits = store.query(vector, 10)
    assert [h["chunk_id"] for h in hits] == ["a", "b"] and hits[0]["score"] == pytest.approx(1.0)
    assert [h["chunk_id"] for h in store.query(vector, 10, where={"n": 2})] == ["b"]
    assert store.query(vector, 10, where={"n": 3}) == [] and store.query(vector, 0) == []
    store.delete_all()
