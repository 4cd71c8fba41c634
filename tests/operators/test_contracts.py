"""Every registered state operator keeps its port's contract on real components (bundled embedder, Chroma,
BM25, the local llama-server): it returns a dict with only the keys its port may write and never mutates its
input. A new operator without a case here fails ``test_every_operator_has_a_contract_case``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from modular_rag.providers import Providers
from modular_rag.registry import PORT_WRITES, OperatorInfo, Port, catalogue

# loaders, chunkers and test-set makers do not touch state; hops build a Hop, not an op(state) (test_hops.py)
STATE_PORTS = {p for p in Port if PORT_WRITES[p] and p is not Port.HOP}

ROUTES = {
    "routes": {
        "exact": {
            "description": "error codes and part numbers",
            "keywords": ["error", "code"],
            "examples": ["What does E12 mean?"],
        },
        "open": {"description": "open questions about riding", "examples": ["How do I fit a helmet?"]},
    },
    "fallback": "open",
}

# operator name (or name@port where a name is used by two ports) -> params for the contract run
# ("<cross_encoder>" and "<router>" are replaced by the fixtures' files)
CASES: dict[str, dict[str, Any]] = {
    "rewrite": {"max_tokens": 24},
    "condense": {"max_turns": 2, "max_tokens": 24},
    "dense": {"k": 5},
    "bm25": {"k": 5},
    "hybrid": {"k": 5, "pool": 20},
    "given": {"k": 3},
    "embedding": {"top_k": 4},
    "cross_encoder": {"model": "<cross_encoder>", "top_k": 4},
    "budget": {"max_tokens": 300},
    "cited_answer": {"max_tokens": 40},
    "multi_query": {"styles": ["standalone", "synonyms"], "max_tokens": 24},
    "decompose": {"max_questions": 2, "max_tokens": 40},
    "llm_critique": {"max_candidates": 3},
    "llm_pointwise": {"max_candidates": 3},
    "draft_sentence": {"max_tokens": 24},
    "keyword": {**ROUTES},
    "embedding@route": {**ROUTES},
    "hybrid@route": {**ROUTES},
    "llm": {**ROUTES},
    "learned": {**ROUTES, "model": "<router>"},
    "token_confidence": {"tau": 0.4},
    "llm_judge": {"criterion": "supported"},
    "reflection": {},
    "budget@judge": {"max_steps": 5},
    "no_progress": {},
    "prune": {},
    "self_verify": {},
    "rrf@fuse": {"k": 5},
    "pairs": {"k": 5},
    "weighted": {"k": 5},
    "replug": {"max_tokens": 8},
    "llm_fusion": {"max_tokens": 40},
    "sentences": {},
    "hyde": {"max_tokens": 40, "average_with_query": True},
    "step_back": {"max_tokens": 24},
    "filter_extract": {},
    "mmr": {"k": 3},
    "dedup": {},
    "extractive": {"max_sentences": 1},
    "lost_in_the_middle": {},
    "compress_budget": {"keep_whole": 1},
    "evidence_first": {"max_chunks": 3},
    "link_hop": {"k": 5},
    "verify": {},
    "abstain": {},
}
MAY_BE_EMPTY = {"filter_extract"}  # nothing to filter in the contract question: no update is the right answer
# operators that read more than the base state, and what they get on top of it
EXTRA_STATE: dict[str, dict[str, Any]] = {
    "condense": {
        "messages": [
            HumanMessage("Which bike won the 2022 Coastline Design Award?"),
            AIMessage("The TW-550 Gravel won it [1]."),
        ]
    },  # an earlier turn: one LLM call
}


def state_operators() -> list[OperatorInfo]:
    return [i for i in catalogue() if i.port in STATE_PORTS]


def case(info: OperatorInfo) -> dict[str, Any] | None:
    return CASES.get(f"{info.name}@{info.port.value}", CASES.get(info.name))


@pytest.mark.unit
def test_every_operator_has_a_contract_case() -> None:
    missing = [f"{i.name}@{i.port.value}" for i in state_operators() if case(i) is None]
    assert not missing, f"add contract cases for: {missing}"


@pytest.mark.integration
@pytest.mark.parametrize("info", state_operators(), ids=lambda i: f"{i.port.value}-{i.name}")
def test_operator_keeps_its_contract(
    info: OperatorInfo, demo_env: Providers, base_state: dict[str, Any], cross_encoder_dir: Path, router_file: Path
) -> None:
    files = {"<cross_encoder>": str(cross_encoder_dir), "<router>": str(router_file)}
    raw = {k: files.get(v, v) if isinstance(v, str) else v for k, v in (case(info) or {}).items()}
    op = info.factory(info.params.model_validate(raw), demo_env)
    state = {**base_state, **EXTRA_STATE.get(info.name, {})}
    before = copy.deepcopy(state)
    update = op(state)
    assert isinstance(update, dict)
    assert update or info.name in MAY_BE_EMPTY, f"{info.name} changed nothing"
    assert set(update) <= PORT_WRITES[info.port], f"{info.name} wrote {set(update) - PORT_WRITES[info.port]}"
    assert state == before, f"{info.name} mutated its input"
