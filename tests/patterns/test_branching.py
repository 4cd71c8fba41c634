"""Branching pattern: parallel fan-out with Send (proven by timing), fusion of lists and of answers (REPLUG)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from modular_rag.builder import build_flow
from modular_rag.config import OperatorSpec, load_config
from modular_rag.errors import ConfigError
from modular_rag.index import chunk_vectors
from operators.fusion import replug_weights
from tests.conftest import fake_llm
from tests.patterns.conftest import snapshot, template


@pytest.mark.unit
def test_template_graphs_match_snapshots() -> None:
    mermaid = build_flow(template("branching")).get_graph().draw_mermaid()
    assert mermaid == snapshot("branching", mermaid)
    docs = template(
        "branching",
        params={"mode": "documents", "branches": 3},
        operators={"fuse": {"name": "replug"}, "expand": "none"},
    )
    mermaid = build_flow(docs).get_graph().draw_mermaid()
    assert mermaid == snapshot("branching-documents", mermaid)


@pytest.mark.unit
def test_fusion_that_does_not_fit_the_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match="mode 'queries' needs a candidates fusion"):
        build_flow(template("branching", operators={"fuse": {"name": "replug"}}))


@pytest.mark.unit
def test_replug_weights_are_a_softmax_of_scores() -> None:
    w = replug_weights([0.9, 0.8, 0.1], temperature=0.1)
    assert w.sum() == pytest.approx(1.0) and w[0] > w[1] > w[2]
    assert w[0] / w[1] == pytest.approx(2.718281828, rel=1e-6)


@pytest.mark.integration
def test_branches_run_concurrently(demo_dir: Path) -> None:
    def four_queries(state: Mapping[str, Any]) -> dict[str, Any]:
        return {"queries": [f"{state['query']} {i}" for i in range(4)]}

    def slow_retrieve(state: Mapping[str, Any]) -> dict[str, Any]:
        time.sleep(0.6)
        hit = {"chunk_id": state["query"], "text": state["query"], "score": 1.0, "channel": "slow", "metadata": {}}
        return {"candidates": [hit]}

    config = load_config(template("branching", demo_dir, operators={"context": "none", "generate": "none"}))
    config.operators["expand"] = OperatorSpec.from_object(four_queries)
    config.operators["retrieve"] = OperatorSpec.from_object(slow_retrieve)
    flow = build_flow(config)
    start = time.perf_counter()
    out = flow.invoke({"query": "q"})
    elapsed = time.perf_counter() - start
    assert len(out["branches"]) == 4 and len(out["candidates"]) == 4
    assert elapsed < 4 * 0.6 * 0.6, f"4 branches of 0.6 s took {elapsed:.2f} s: not concurrent"
    branch_events = [e for e in out["trace"] if e["node"].startswith("branch[")]
    assert len(branch_events) == 4
    starts = sorted(e["start"] for e in branch_events)
    assert starts[-1] - starts[0] < 0.6  # all four started before the first finished


@pytest.mark.integration
def test_multi_query_branches_are_fused(demo_dir: Path) -> None:
    config = load_config(template("branching", demo_dir, operators={"generate": "none", "context": "none"}))
    config.providers.llm = fake_llm("E07 display error", "speed sensor fault code", "e-bike speed sensor signal")
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert [b["query"] for b in out["branches"]][0] == "What does error code E07 mean?"
    assert len(out["branches"]) == 4
    assert out["candidates"][0]["metadata"]["doc_id"] == "display-error-e07"
    assert out["candidates"][0]["channel"] == "weighted"


class PassageChat(BaseChatModel):
    """A scripted chat model that answers from the one passage in its prompt: the answer scripted for that
    passage's document, citing the number the prompt gave the passage (a faithful reader of one document)."""

    answers: dict[str, str]

    @property
    def _llm_type(self) -> str:
        return "passage-chat"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        prompt = str(messages[-1].content)
        ref = re.search(r"^\[(\d+)\]", prompt, re.M)
        text = next((a for code, a in self.answers.items() if code in prompt), "Unknown.")
        cite = ref.group(1) if ref else "1"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"{text} [{cite}]"))])


def _chunk_of(env: Any, doc_id: str) -> dict[str, Any]:
    chunk = next(c for part in env.index.catalog.scan() for c in part if c.doc_id == doc_id)
    return {"chunk_id": chunk.id, "text": chunk.text, "score": 0.0, "channel": "fixed", "metadata": chunk.metadata}


@pytest.mark.integration
def test_replug_weights_come_from_dense_similarity_and_decide_the_vote(demo_dir: Path, demo_env: Any) -> None:
    # retrieval order (and scores) favour E07; only the query-document similarity says E12 matters most
    docs = [_chunk_of(demo_env, d) for d in ("display-error-e07", "display-error-e17", "display-error-e12")]
    ranked = [{**h, "score": float(3 - i)} for i, h in enumerate(docs)]
    query = "What does the E12 error on the e-bike display indicate?"
    config = load_config(
        template(
            "branching",
            demo_dir,
            params={"mode": "documents", "branches": 3},
            operators={"fuse": {"name": "replug", "params": {"temperature": 0.05}}, "expand": "none"},
        )
    )
    config.operators["retrieve"] = OperatorSpec.from_object(lambda state: {"candidates": ranked})
    config.providers.llm = PassageChat(
        answers={"E07 means": "Speed sensor signal lost", "E17": "Controller fault", "E12": "Battery overtemperature"}
    )
    out = build_flow(config).invoke({"query": query})  # its own providers: the scripted reader over the demo index
    q = demo_env.encoder.encode_query(query)
    sims = [float(v @ q) for v in chunk_vectors(demo_env, docs)]  # as the store keeps them (int8: batch-dependent)
    weights = replug_weights(sims, temperature=0.05)
    assert [round(e["score"], 4) for e in out["evidence"]] == [round(float(w), 4) for w in weights]
    assert int(weights.argmax()) == 2
    assert out["answer"]["text"] == "Battery overtemperature [3]"
    assert [c["chunk_id"] for c in out["answer"]["citations"]] == [docs[2]["chunk_id"]]  # the document it came from


@pytest.mark.integration
def test_replug_vote_with_a_model_without_token_probabilities(demo_dir: Path) -> None:
    config = load_config(
        template(
            "branching",
            demo_dir,
            params={"mode": "documents", "branches": 3},
            operators={"fuse": {"name": "replug"}, "expand": "none"},
        )
    )
    config.providers.llm = fake_llm("Speed sensor signal lost.", "Speed sensor signal lost.", "Battery too hot.")
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert len(out["branches"]) == 3
    fuse = next(e for e in out["trace"] if e["node"] == "fuse")
    assert "answer-level weighted vote" in fuse["summary"]


@pytest.mark.integration
def test_replug_token_level_on_the_local_model(demo_dir: Path) -> None:
    config = template(
        "branching",
        demo_dir,
        params={"mode": "documents", "branches": 2},
        operators={
            "fuse": {"name": "replug", "params": {"max_tokens": 16}},
            "expand": "none",
            "generate": {"name": "cited_answer", "params": {"max_tokens": 24}},
            "retrieve": {"name": "bm25", "params": {"k": 4}},
        },
    )
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    fuse = next(e for e in out["trace"] if e["node"] == "fuse")
    assert "token-level ensemble over 2 documents" in fuse["summary"]
    assert out["answer"]["text"].strip()
    ledger = next(e for e in out["ledger"] if e["node"] == "fuse")
    assert 2 <= ledger["llm_calls"] <= 2 * 16  # two documents per decoding step
    assert ledger["llm_calls"] % 2 == 0
    # the token-level ensemble is the answer: no per-document answers are generated and thrown away
    assert sum(e["llm_calls"] for e in out["ledger"]) == ledger["llm_calls"]
    assert all("answer" not in b for b in out["branches"])


@pytest.mark.integration
def test_end_to_end_multi_query_on_the_local_model(demo_dir: Path) -> None:
    config = template(
        "branching",
        demo_dir,
        operators={
            "expand": {"name": "multi_query", "params": {"styles": ["standalone", "synonyms"], "max_tokens": 24}},
            "generate": {"name": "cited_answer", "params": {"max_tokens": 48}},
        },
    )
    out = build_flow(config).invoke({"query": "What does display code E17 report?"})
    assert 1 <= len(out["branches"]) <= 3 and out["answer"]["text"].strip()
    assert "display-error-e17" in [h["metadata"]["doc_id"] for h in out["candidates"][:3]]
