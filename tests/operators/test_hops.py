"""Every hop operator (``Port.HOP``: how the next round searches) keeps its contract on real components (bundled
embedder, Chroma, BM25, the local llama-server for ``thought``): its factory builds a ``Hop``; ``next_round``, given
the state a round left and the flow's search, returns only the next round's queries and candidates (with the trace
and ledger of the searches it ran) and never mutates its input; ``follow`` does the same with one branch per
passage. A new hop without a case here fails ``test_every_hop_has_a_contract_case``; a new hop is one registered
function and a config line, no pattern change (``test_a_hop_registered_elsewhere_runs_in_every_pattern``)."""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.errors import ConfigError
from modular_rag.providers import Providers
from modular_rag.registry import PORT_WRITES, Hop, NoParams, OperatorInfo, Port, catalogue, get_operator, operator
from modular_rag.state import Branch
from tests.conftest import demo_flow
from tests.operators.test_multihop import AWARD, docs

CASES: dict[str, dict[str, Any]] = {
    "answer": {},
    "query": {},
    "links": {"k": 5},
    "evidence": {"k": 5, "beam": 2},
    "thought": {"max_tokens": 24},
}
RUN_KEYS = {"trace", "ledger"}  # a hop that searches returns its searches' entries


def hops() -> list[OperatorInfo]:
    return [i for i in catalogue() if i.port is Port.HOP]


@pytest.mark.unit
def test_every_hop_has_a_contract_case() -> None:
    missing = [i.name for i in hops() if i.name not in CASES]
    assert not missing, f"add contract cases for: {missing}"


@pytest.mark.unit
def test_an_unknown_hop_is_refused_with_the_registered_names() -> None:
    from modular_rag.builder import resolution

    with pytest.raises(
        ConfigError,
        match=r"operators\.hop\.name: unknown operator 'sideways'.*answer, evidence, "
        r"links, query, thought",
    ):
        resolution({"pattern": "iterative", "operators": {"hop": "sideways"}})


@pytest.fixture()
def search(demo_env: Providers) -> Any:
    """The flow's search as a pattern gives it: the hybrid retrieve operator as a traced node (called in sync runs,
    ``acall`` awaited by an async ``follow``)."""
    from modular_rag.steps import internal_node

    retrieve = get_operator(Port.RETRIEVE, "hybrid")
    return internal_node(
        "retrieve", retrieve.factory(retrieve.params.model_validate({"k": 5, "pool": 20}), demo_env), "hybrid"
    )


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(CASES))
def test_hop_keeps_its_contract(name: str, demo_env: Providers, base_state: dict[str, Any], search: Any) -> None:
    info = get_operator(Port.HOP, name)
    hop = info.factory(info.params.model_validate(CASES[name]), demo_env)
    assert isinstance(hop, Hop)
    state = {**base_state, "step": 1, "rounds": [{**base_state["rounds"][0], "chunk_ids": []}]}
    before = copy.deepcopy(state)
    update = hop.next_round(state, search)
    assert isinstance(update, dict) and update.get("queries") and update.get("candidates"), f"{name}: {update}"
    assert set(update) <= PORT_WRITES[Port.HOP] | RUN_KEYS, f"{name} wrote {set(update) - PORT_WRITES[Port.HOP]}"
    assert state == before, f"{name} mutated its input"
    if hop.think is not None:
        thought = hop.think(state)
        assert isinstance(thought, str) and thought and hop.finished is not None
        assert state == before, f"{name} mutated its input"
    if hop.follow is not None:
        seeds = {**state, "candidates": state["candidates"][:2]}
        before = copy.deepcopy(seeds)
        update = hop.follow(seeds, search)
        if inspect.isawaitable(update):  # an async follow, awaiting its searches together
            update = asyncio.run(update)
        assert set(update) <= {"branches"} | RUN_KEYS, f"{name} wrote {set(update) - {'branches'}}"
        assert [b["candidates"][0]["chunk_id"] for b in update["branches"]] == [
            h["chunk_id"] for h in seeds["candidates"]
        ] or name == "links"  # links: the link table's order
        assert {b["candidates"][0]["chunk_id"] for b in update["branches"]} == {
            h["chunk_id"] for h in seeds["candidates"]
        }
        assert seeds == before, f"{name} mutated its input"


def second_best(params: NoParams, providers: Providers) -> Hop:
    """A seventh hop, registered outside the kit: search with the question and the title of the last round's second
    passage; from a passage, the passages that search finds."""

    def text(state: Mapping[str, Any], hit: Mapping[str, Any]) -> str:
        return f"{state['query']} {hit['metadata'].get('title', '')}"

    def next_round(state: Mapping[str, Any], search: Any) -> dict[str, Any]:
        hits = list(state.get("candidates") or [])
        query = text(state, hits[1] if len(hits) > 1 else hits[0])
        return {**search({**state, "queries": [query]}), "queries": [query]}

    def follow(state: Mapping[str, Any], search: Any) -> dict[str, Any]:
        runs = [search({**state, "queries": [text(state, h)]}) for h in state.get("candidates") or []]
        return {
            "branches": [
                Branch(branch=i, query=state["query"], weight=1.0, candidates=[h, *run["candidates"]])
                for i, (h, run) in enumerate(zip(state["candidates"], runs, strict=True))
            ]
        }

    return Hop(next_round, follow=follow)


@pytest.fixture()
def seventh_hop() -> Iterator[str]:
    """``second_best`` registered for the test's length (the registry is process-wide)."""
    from modular_rag import registry

    operator("retrieval", "multi_hop", "second_best", port=Port.HOP)(second_best)
    yield "second_best"
    registry._OPERATORS.pop((Port.HOP, "second_best"))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("pattern", "extra"),
    [
        ("iterative", {"params": {"rounds": 2}, "operators": {"judge": "none"}}),
        (
            "branching",
            {
                "params": {"mode": "passages", "branches": 2},
                "operators": {"fuse": {"name": "pairs", "params": {"k": 5}}},
            },
        ),
        (
            "recursive",
            {
                "params": {"expand": "hop", "branching": 2, "max_depth": 1, "max_nodes": 10},
                "operators": {"fuse": {"name": "pairs", "params": {"k": 5}}},
            },
        ),
    ],
)
def test_a_hop_registered_elsewhere_runs_in_every_pattern(
    demo_dir: Path, pattern: str, extra: dict[str, Any], seventh_hop: str
) -> None:
    config = demo_flow(
        demo_dir,
        pattern,
        params=extra["params"],
        operators={
            "retrieve": {"name": "hybrid", "params": {"k": 4, "pool": 20}},
            "hop": seventh_hop,
            "context": "none",
            "generate": "none",
            **extra["operators"],
        },
    )
    out = build_flow(config).invoke({"query": AWARD})
    assert docs(out)
    assert any(e["operator"] == f"hop:{seventh_hop}" for e in out["trace"])


@pytest.mark.unit
@pytest.mark.parametrize(
    ("pattern", "params", "line"),
    [
        (
            "iterative",
            {"rounds": 2, "query_with": "links", "hop": {"k": 10}},
            "params: query_with, hop: .* write operators: {hop: {name: links, params: {k: 10}}}",
        ),
        (
            "iterative",
            {"query_with": "llm", "max_tokens": 32},
            "params: query_with, max_tokens: .* write operators: {hop: {name: thought, params: {max_tokens: 32}}}",
        ),
        ("iterative", {"query_with": "answer"}, "params: query_with: .* write operators: {hop: answer}"),
        (
            "branching",
            {"mode": "passages", "hop_with": "evidence", "passage_words": 40},
            "params: hop_with, passage_words: .* write operators: {hop: {name: evidence, params: {passage_words: 40}}}",
        ),
        ("recursive", {"expand": "links"}, "params.expand: 'links' is spelled 'hop' now"),
    ],
)
def test_a_former_hop_spelling_is_refused_with_the_line_that_replaces_it(
    pattern: str, params: dict[str, Any], line: str
) -> None:
    from modular_rag.builder import resolution

    with pytest.raises(ConfigError, match=line):
        resolution({"pattern": pattern, "params": params})
