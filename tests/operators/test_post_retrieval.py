"""Post-retrieval operators on real hits and the real bundled embedder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modular_rag.errors import OperatorError, ProviderError
from modular_rag.index import chunk_vectors
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from modular_rag.text import estimate_tokens

pytestmark = pytest.mark.integration


def build(port: Port, name: str, env: Providers, **params: Any):
    info = get_operator(port, name)
    return info.factory(info.params.model_validate(params), env)


def test_embedding_rerank_orders_by_cosine(demo_env: Providers, base_state: dict[str, Any]) -> None:
    out = build(Port.REFINE, "embedding", demo_env, top_k=3)(base_state)["candidates"]
    assert len(out) == 3 and all(h["channel"] == "embedding" for h in out)
    q = demo_env.encoder.encode_query(base_state["query"])
    stored = chunk_vectors(demo_env, list(base_state["candidates"]))  # the chunks' vectors as the store keeps them
    order = sorted(range(len(stored)), key=lambda i: -float(stored[i] @ q))
    expected = [base_state["candidates"][i] for i in order]
    assert [h["chunk_id"] for h in out] == [h["chunk_id"] for h in expected[:3]]


def test_cross_encoder_wiring_follows_the_model_scores(
    demo_env: Providers, base_state: dict[str, Any], cross_encoder_dir: Path
) -> None:
    from sentence_transformers import CrossEncoder

    out = build(Port.REFINE, "cross_encoder", demo_env, model=str(cross_encoder_dir))(base_state)["candidates"]
    model = CrossEncoder(str(cross_encoder_dir), device="cpu")
    scores = model.predict([(base_state["query"], h["text"]) for h in base_state["candidates"]])
    order = np.argsort(-np.asarray(scores), kind="stable")
    assert [h["chunk_id"] for h in out] == [base_state["candidates"][i]["chunk_id"] for i in order]
    assert [h["score"] for h in out] == pytest.approx(sorted(scores.tolist(), reverse=True), rel=1e-5)


def test_cross_encoder_without_weights_says_so(demo_env: Providers, base_state: dict[str, Any]) -> None:
    op = build(Port.REFINE, "cross_encoder", demo_env, model="/nowhere/cross-encoder")
    with pytest.raises(ProviderError, match="cannot load cross-encoder"):
        op(base_state)


def test_budget_respects_the_token_budget(demo_env: Providers, base_state: dict[str, Any]) -> None:
    out = build(Port.CONTEXT, "budget", demo_env, max_tokens=250, max_chunks=4)(base_state)["evidence"]
    assert 1 <= len(out) <= 4
    assert [e["ref"] for e in out] == list(range(1, len(out) + 1))
    assert sum(estimate_tokens(e["text"]) for e in out) <= 250 + 2
    assert out[0]["chunk_id"] == base_state["candidates"][0]["chunk_id"]


def test_operator_errors_name_the_slot(demo_dir: Path) -> None:
    from modular_rag.builder import build_flow
    from tests.conftest import demo_flow

    flow = build_flow(
        demo_flow(
            demo_dir,
            operators={
                "retrieve": "bm25",
                "rerank": {"name": "cross_encoder", "params": {"model": "/nowhere"}},
                "generate": "none",
            },
        )
    )
    with pytest.raises(OperatorError, match=r"rerank \(cross_encoder\)"):
        flow.invoke({"query": "E07"})


def hit(cid: str, text: str, score: float = 1.0) -> dict[str, Any]:
    return {"chunk_id": cid, "text": text, "score": score, "channel": "t", "metadata": {}}


def test_mmr_prefers_diverse_chunks(demo_env: Providers) -> None:
    hits = [
        hit("a", "Chain lube keeps the chain quiet and rust free."),
        hit("b", "Chain lube keeps the chain quiet and free of rust."),
        hit("c", "Tyre pressure depends on rider weight and tyre width."),
    ]
    state = {"query": "chain lube and tyre pressure", "candidates": hits}
    picked = [h["chunk_id"] for h in build(Port.REFINE, "mmr", demo_env, k=2, lambda_mult=0.5)(state)["candidates"]]
    assert "c" in picked and len(picked) == 2


def test_mmr_on_incoming_scores_keeps_the_order_at_lambda_one_and_diversifies_below(demo_env: Providers) -> None:
    hits = [
        hit("a", "Chain lube keeps the chain quiet and rust free.", 3.0),
        hit("b", "Chain lube keeps the chain quiet and free of rust.", 2.9),
        hit("c", "Tyre pressure depends on rider weight and tyre width.", 1.0),
    ]
    state = {"query": "tyre pressure", "candidates": hits}

    def picked(lam: float) -> list[str]:
        out = build(Port.REFINE, "mmr", demo_env, k=2, lambda_mult=lam, relevance="score")(state)["candidates"]
        return [h["chunk_id"] for h in out]

    assert picked(1.0) == ["a", "b"]  # the incoming order, although "c" is closest to the query's embedding
    assert picked(0.3) == ["a", "c"]  # the near-copy of "a" gives way


def test_dedup_drops_exact_and_near_duplicates(demo_env: Providers) -> None:
    hits = [
        hit("a", "Chain lube keeps the chain quiet."),
        hit("b", "chain lube keeps the chain quiet!"),
        hit("c", "Chain lube keeps the chains quiet."),
        hit("d", "Helmets must sit level on the head."),
    ]
    out = build(Port.REFINE, "dedup", demo_env, near_threshold=0.95)({"candidates": hits, "query": "q"})["candidates"]
    assert [h["chunk_id"] for h in out] == ["a", "d"]
    exact_only = build(Port.REFINE, "dedup", demo_env, near_threshold=None)({"candidates": hits})["candidates"]
    assert [h["chunk_id"] for h in exact_only] == ["a", "c", "d"]


def test_extractive_compression_keeps_query_sentences(demo_env: Providers) -> None:
    text = (
        "The TW-E1 has a 504 Wh battery. Its frame is aluminium. The display shows error codes. "
        "Charging takes four hours."
    )
    out = build(Port.REFINE, "extractive", demo_env, max_sentences=1)(
        {"query": "How long does charging take?", "candidates": [hit("a", text)]}
    )["candidates"]
    assert out[0]["text"] == "Charging takes four hours."


def test_lost_in_the_middle_and_compress_budget(demo_env: Providers, base_state: dict[str, Any]) -> None:
    five = [hit(str(i), f"text {i}", 5 - i) for i in range(5)]
    out = build(Port.REFINE, "lost_in_the_middle", demo_env)({"candidates": five})["candidates"]
    assert [h["chunk_id"] for h in out] == ["0", "2", "4", "3", "1"]
    ev = build(Port.CONTEXT, "compress_budget", demo_env, keep_whole=1, max_sentences=1, max_chunks=3)(base_state)[
        "evidence"
    ]
    assert ev[0]["text"] == base_state["candidates"][0]["text"]
    assert len(ev) == 3
    assert all(len(e["text"]) <= len(c["text"]) for e, c in zip(ev, base_state["candidates"], strict=False))
    ends = build(Port.CONTEXT, "budget", demo_env, order="ends", max_chunks=4)(base_state)["evidence"]
    assert [e["chunk_id"] for e in ends] == [base_state["candidates"][i]["chunk_id"] for i in (0, 2, 3, 1)]
    assert [e["ref"] for e in ends] == [1, 2, 3, 4]


def test_llm_critique_and_pointwise_on_scripted_replies(demo_dir: Path, base_state: dict[str, Any]) -> None:
    from tests.conftest import fake_env

    env = fake_env(demo_dir, "yes", "no", "maybe")
    kept = build(Port.REFINE, "llm_critique", env, max_candidates=3, concurrency=1)(base_state)["candidates"]
    assert [h["chunk_id"] for h in kept] == [base_state["candidates"][i]["chunk_id"] for i in (0, 2)]
    ranked = build(
        Port.REFINE, "llm_pointwise", fake_env(demo_dir, "no", "yes", "no"), max_candidates=3, concurrency=1
    )(base_state)["candidates"]
    assert ranked[0]["chunk_id"] == base_state["candidates"][1]["chunk_id"]
