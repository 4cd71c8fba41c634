"""Post-retrieval operators on real hits and the real bundled embedder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modular_rag.errors import OperatorError, ProviderError
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from modular_rag.text import estimate_tokens

pytestmark = pytest.mark.integration


def build(port: Port, name: str, env: Providers, **params: Any):
    info = get_operator(port, name)
    return info.factory(info.params.model_validate(params), env)


def test_embedding_rerank_orders_by_cosine(demo_env: Providers, base_state: dict[str, Any]) -> None:
    out = build(Port.RERANK, "embedding", demo_env, top_k=3)(base_state)["candidates"]
    assert len(out) == 3 and all(h["channel"] == "embedding" for h in out)
    q = demo_env.encoder.encode_query(base_state["query"])
    expected = sorted(base_state["candidates"], key=lambda h: -float(demo_env.encoder.encode([h["text"]])[0] @ q))
    assert [h["chunk_id"] for h in out] == [h["chunk_id"] for h in expected[:3]]


def test_cross_encoder_wiring_follows_the_model_scores(
    demo_env: Providers, base_state: dict[str, Any], cross_encoder_dir: Path
) -> None:
    from sentence_transformers import CrossEncoder

    out = build(Port.RERANK, "cross_encoder", demo_env, model=str(cross_encoder_dir))(base_state)["candidates"]
    model = CrossEncoder(str(cross_encoder_dir), device="cpu")
    scores = model.predict([(base_state["query"], h["text"]) for h in base_state["candidates"]])
    order = np.argsort(-np.asarray(scores), kind="stable")
    assert [h["chunk_id"] for h in out] == [base_state["candidates"][i]["chunk_id"] for i in order]
    assert [h["score"] for h in out] == pytest.approx(sorted(scores.tolist(), reverse=True), rel=1e-5)


def test_cross_encoder_without_weights_says_so(demo_env: Providers, base_state: dict[str, Any]) -> None:
    op = build(Port.RERANK, "cross_encoder", demo_env, model="/nowhere/cross-encoder")
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

    flow = build_flow(demo_flow(demo_dir, operators={
        "retrieve": "bm25", "rerank": {"name": "cross_encoder", "params": {"model": "/nowhere"}}, "generate": "none"}))
    with pytest.raises(OperatorError, match=r"rerank \(cross_encoder\)"):
        flow.invoke({"query": "E07"})
