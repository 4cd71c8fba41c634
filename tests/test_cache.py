"""Caches: content-keyed (LLM calls, reranker scores) and semantic (answers); persistent and bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from modular_rag.builder import build_flow
from modular_rag.cache import KVCache, SemanticCache
from modular_rag.config import CacheConfig, load_config
from modular_rag.providers import Providers
from tests.conftest import demo_flow, fake_llm, providers_config


@pytest.mark.unit
def test_kv_cache_is_persistent_and_bounded(tmp_path: Path) -> None:
    cache = KVCache(tmp_path / "c.sqlite", max_entries=3)
    for i in range(5):
        cache.put("ns", f"k{i}", {"v": i})
    assert cache.count() == 3 and cache.get("ns", "k0") is None
    assert KVCache(tmp_path / "c.sqlite").get("ns", "k4") == {"v": 4}  # another process would see it too


@pytest.mark.unit
def test_semantic_cache_threshold(tmp_path: Path) -> None:
    cache = SemanticCache(tmp_path / "a.sqlite", threshold=0.9, max_entries=2)
    a = np.array([1.0, 0.0], dtype=np.float32)
    cache.store("q1", a, {"answer": {"text": "A"}})
    assert cache.lookup(np.array([0.99, 0.14], dtype=np.float32))[0] == {"answer": {"text": "A"}}
    assert cache.lookup(np.array([0.0, 1.0], dtype=np.float32)) is None


@pytest.mark.integration
def test_llm_calls_are_cached_by_content(demo_dir: Path, tmp_path: Path) -> None:
    cfg = providers_config(demo_dir, fake_llm("first", "second"))
    cfg.cache = CacheConfig(path=str(tmp_path / "llm.sqlite"))
    env = Providers(cfg)
    assert env.llm.complete("same prompt").text == "first"
    assert env.llm.complete("same prompt").text == "first"  # the fake would have said "second"
    assert env.llm.complete("other prompt").text == "second"
    config = load_config(demo_flow(demo_dir, operators={"retrieve": "bm25"}))
    config.providers = cfg
    flow = build_flow(config)
    first = flow.invoke({"query": "What does E12 mean?"})
    again = flow.invoke({"query": "What does E12 mean?"})
    assert again["answer"]["text"] == first["answer"]["text"]
    generate = [e for e in again["ledger"] if e["node"] == "generate"][0]
    assert generate["llm_calls"] == 0 and generate["cache_hits"] == 1


@pytest.mark.integration
def test_cross_encoder_scores_are_cached(demo_dir: Path, tmp_path: Path, cross_encoder_dir: Path) -> None:
    from operators.post_retrieval import CrossEncoderScorer

    cache = KVCache(tmp_path / "r.sqlite")
    scorer = CrossEncoderScorer(str(cross_encoder_dir), cache=cache)
    first = scorer.score("q", ["a passage", "another passage"])
    scorer.model.predict = None  # a second call must not touch the model
    assert np.allclose(scorer.score("q", ["a passage", "another passage"]), first)


@pytest.mark.integration
def test_semantic_answer_cache_returns_the_cached_answer(demo_dir: Path, tmp_path: Path) -> None:
    # unsupported: mark keeps the scripted answers whatever the attribution check says: this test is about the cache
    config = demo_flow(
        demo_dir,
        operators={"retrieve": "bm25", "generate": {"name": "cited_answer", "params": {"unsupported": "mark"}}},
        answer_cache={"path": str(tmp_path / "answers.sqlite"), "threshold": 0.9},
    )
    config["providers"]["llm"] = fake_llm("E12 means battery overtemperature [1].", "A different answer.")
    flow = build_flow(config)
    first = flow.invoke({"query": "What does error E12 mean?"})
    assert first["answer"]["text"] == "E12 means battery overtemperature [1]."
    close = flow.invoke({"query": "What does the error E12 mean?"})
    assert close["answer"]["text"] == first["answer"]["text"]
    assert [e["node"] for e in close["trace"]] == ["cache_lookup"]
    assert "cached answer of 'What does error E12 mean?'" in close["trace"][0]["summary"]
    far = flow.invoke({"query": "How do I fit a helmet?"})
    assert far["answer"]["text"] == "A different answer." and len(far["trace"]) > 1


@pytest.mark.integration
def test_answer_cache_never_answers_e12_from_e07(demo_dir: Path, demo_env: Providers, tmp_path: Path) -> None:
    e07 = "What does the E07 error on a Tidewater e-bike display indicate?"
    e12 = "What does the E12 error on a Tidewater e-bike display indicate?"
    cosine = float(demo_env.encoder.encode_query(e07) @ demo_env.encoder.encode_query(e12))
    assert cosine >= 0.88  # over the cache's threshold: only the lexical guard tells them apart
    config = demo_flow(
        demo_dir, operators={"retrieve": "bm25"}, answer_cache={"path": str(tmp_path / "a.sqlite"), "threshold": 0.88}
    )
    config["providers"]["llm"] = fake_llm("E07 means speed sensor signal lost [1].", "E12 is battery overheating [1].")
    flow = build_flow(config)
    assert flow.invoke({"query": e07})["answer"]["text"].startswith("E07")
    out = flow.invoke({"query": e12})
    assert out["answer"]["text"].startswith("E12") and out["trace"][0]["node"] == "cache_lookup"
    assert len(out["trace"]) > 2  # a miss: the flow ran
    assert flow.invoke({"query": e07.replace("What does", "What does the")})["answer"]["text"].startswith("E07")


@pytest.mark.integration
def test_answer_cache_is_keyed_on_the_filter(demo_dir: Path, tmp_path: Path) -> None:
    config = demo_flow(demo_dir, operators={"retrieve": "bm25"}, answer_cache={"path": str(tmp_path / "a.sqlite")})
    config["providers"]["llm"] = fake_llm("Five years [1].", "A lifetime [1].")
    flow = build_flow(config)
    question = "How long is the warranty on an aluminium frame?"
    assert flow.invoke({"query": question, "filter": {"year": 2019}})["answer"]["text"] == "Five years [1]."
    assert flow.invoke({"query": question, "filter": {"year": 2023}})["answer"]["text"] == "A lifetime [1]."
    assert flow.invoke({"query": question, "filter": {"year": 2019}})["answer"]["text"] == "Five years [1]."


@pytest.mark.unit
def test_distinctive_tokens() -> None:
    from modular_rag.cache import distinctive_tokens

    assert distinctive_tokens("What does error code E07 mean?") == {"e07"}
    assert distinctive_tokens("How heavy is the TW-900 Carbon Road in 2023?") == {"tw-900", "carbon", "road", "2023"}
    assert distinctive_tokens("how do i fit a helmet") == set()
