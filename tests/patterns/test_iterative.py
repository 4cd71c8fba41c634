"""Iterative pattern: rounds search with what the last one produced (ITER-RETGEN, MDR, IRCoT, link hops); a judge may
stop early; T is the bound."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import OperatorSpec, load_config
from tests.conftest import fake_llm
from tests.patterns.conftest import snapshot, template


def never_stop(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"verdicts": [{"judge": "never", "decision": "continue", "reason": "test", "step": state.get("step", 0)}]}


@pytest.mark.unit
def test_template_graph_matches_snapshot() -> None:
    mermaid = build_flow(template("iterative")).get_graph().draw_mermaid()
    assert mermaid == snapshot("iterative", mermaid)


@pytest.mark.integration
@pytest.mark.parametrize("rounds", [1, 4])
def test_a_judge_that_never_stops_ends_exactly_at_the_bound(demo_dir: Path, rounds: int) -> None:
    config = load_config(template("iterative", demo_dir, params={"rounds": rounds}))
    config.providers.llm = fake_llm("The TW-550 uses chromoly steel [1].", "It is chromoly steel [1].")
    config.operators["judge"] = OperatorSpec.from_object(never_stop)
    out = build_flow(config).invoke({"query": "Which frame material does the award-winning bike use?"})
    assert out["step"] == rounds and len(out["rounds"]) == rounds
    assert sum(e["node"] == "generate" for e in out["trace"]) == rounds


@pytest.mark.integration
def test_round_t_retrieves_with_the_previous_answer(demo_dir: Path) -> None:
    config = load_config(template("iterative", demo_dir, params={"rounds": 2}, operators={"judge": "none"}))
    config.providers.llm = fake_llm("The award went to the TW-550 Gravel [1].")
    out = build_flow(config).invoke({"query": "Which bike won the 2022 Coastline Design Award?"})
    assert out["rounds"][0]["query"] == "Which bike won the 2022 Coastline Design Award?"
    # the answer joins the query without its citation markers, which mean nothing to a retriever
    assert out["rounds"][1]["query"] == (
        "Which bike won the 2022 Coastline Design Award? The award went to the TW-550 Gravel."
    )


AWARD_WINNER = "Which bike won the 2022 Coastline Design Award?"


def quoted(demo_dir: Path, question: str) -> str:
    """The sentence the extractive answer quotes from the evidence the template's first round builds (same retrieval,
    same context): an independent run of the linear pattern."""
    config = template("iterative", demo_dir)
    linear = {
        "pattern": "linear",
        "providers": config["providers"],
        "operators": {
            "retrieve": config["operators"]["retrieve"],
            "context": config["operators"]["context"],
            "generate": {"name": "cited_answer", "params": {"mode": "extractive", "min_relevance": None}},
        },
    }
    return build_flow(linear).invoke({"query": question})["answer"]["quote"]


@pytest.mark.integration
def test_a_refused_round_conditions_the_next_query_on_the_sentence_it_would_have_quoted(demo_dir: Path) -> None:
    """ITER-RETGEN conditions every round on the last generation; a refusal says nothing, so the next query takes the
    evidence sentence the extractive answer would have quoted (the bare question again would repeat round 1)."""
    from modular_rag.answers import REFUSAL

    config = load_config(template("iterative", demo_dir, params={"rounds": 2}, operators={"judge": "none"}))
    config.providers.llm = fake_llm(REFUSAL)
    out = build_flow(config).invoke({"query": AWARD_WINNER})
    assert out["rounds"][0]["answer"] == REFUSAL
    sentence = quoted(demo_dir, AWARD_WINNER)
    assert "TW-550" in sentence
    assert [r["query"] for r in out["rounds"]] == [AWARD_WINNER, f"{AWARD_WINNER} {sentence}"]


@pytest.mark.integration
def test_an_extractive_round_conditions_the_next_query_on_the_sentence_it_quoted(demo_dir: Path) -> None:
    """An extractive answer may be a bare span ("TW-550 Gravel"); the generation it stands for is the sentence it
    quoted."""
    config = template(
        "iterative",
        demo_dir,
        params={"rounds": 2},
        operators={
            "judge": "none",
            "generate": {
                "name": "cited_answer",
                "params": {"mode": "extractive", "extract": "span", "min_relevance": None},
            },
        },
    )
    out = build_flow(config).invoke({"query": AWARD_WINNER})
    sentence = quoted(demo_dir, AWARD_WINNER)
    assert len(out["rounds"][0]["answer"]) < len(sentence)  # the span, not the sentence
    assert out["rounds"][1]["query"] == f"{AWARD_WINNER} {sentence}"


@pytest.mark.integration
def test_no_progress_stops_when_the_answer_repeats(demo_dir: Path) -> None:
    config = load_config(template("iterative", demo_dir, params={"rounds": 5}))
    config.providers.llm = fake_llm("Chromoly steel [1].")
    out = build_flow(config).invoke({"query": "Which frame material does the award-winning bike use?"})
    assert out["step"] == 2
    assert out["verdicts"][-1] == {
        "judge": "no_progress",
        "decision": "stop",
        "reason": "no_progress",
        "step": 2,
        "score": 1.0,
    }


@pytest.mark.integration
def test_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    config = template(
        "iterative",
        demo_dir,
        params={"rounds": 2},
        operators={"generate": {"name": "cited_answer", "params": {"max_tokens": 48}}},
    )
    out = build_flow(config).invoke({"query": "Which frame material does the 2022 Coastline Design Award winner use?"})
    assert 1 <= out["step"] <= 2 and out["answer"]["text"].strip()
    assert sum(e["llm_calls"] for e in out["ledger"]) == out["step"]


def hop_config(demo_dir: Path, name: str, rounds: int, retrieve: Any, **hop: Any) -> dict[str, Any]:
    """An LLM-free iterative config on the demo index: retrieval only, no judge."""
    return {
        "pattern": "iterative",
        "providers": {"vectorstore": {"name": "chroma", "path": str(demo_dir), "collection": "demo"}},
        "operators": {
            "retrieve": retrieve,
            "context": "none",
            "generate": "none",
            "judge": "none",
            "hop": {"name": name, "params": {"question_titles": False, **hop}},
        },
        "params": {"rounds": rounds},
    }


@pytest.mark.integration
def test_evidence_hops_never_repeat_a_query_and_pair_hits_with_the_passage_the_query_came_from(demo_dir: Path) -> None:
    """MDR from round 3 on: round 3 searches from the passage round 2 found (not round 1's best again, whose query
    already ran), and what that search finds is paired with that passage."""
    from modular_rag.multihop import hits_by_id
    from tests.conftest import fake_env

    env = fake_env(demo_dir)
    by_doc = {h["metadata"]["doc_id"]: h["chunk_id"] for h in env.index.search_dense("bike", 100)}
    award, distractor, history, ebike = (
        by_doc[d]
        for d in ("coastline-design-award-2022", "warranty-policy-2019", "company-history", "tw-e1-ebike-manual")
    )
    question = "Which e-bike did the company behind the award winner make first?"

    def query_of(chunk: str) -> str:
        return f"{question} {' '.join(hits_by_id(env, [chunk])[0]['text'].split()[:60])}"

    # a scripted retriever: the question finds the award and a distractor; the award's query finds the company
    # history, the history's query the e-bike manual
    script = {question: [award, distractor], query_of(award): [history], query_of(history): [ebike]}
    searched: list[str] = []

    def retrieve(state: Mapping[str, Any]) -> dict[str, Any]:
        query = (state.get("queries") or [state["query"]])[0]
        searched.append(query)
        return {"candidates": hits_by_id(env, script.get(query, []))}

    config = load_config(hop_config(demo_dir, "evidence", 3, "hybrid", beam=1, k=5, weights={"link": 10.0}))
    config.operators["retrieve"] = OperatorSpec.from_object(retrieve)
    out = build_flow(config, providers=env).invoke({"query": question})
    assert [r["query"] for r in out["rounds"]] == [question, query_of(award), query_of(history)]
    assert len(set(searched)) == len(searched) == 3
    ranked = [h["chunk_id"] for h in out["candidates"]]
    assert set(ranked[:2]) == {history, ebike}  # the pair the last search made: (the passage it came from, its hit)


CHAIN = {  # a prize names a kettle, the kettle's page names its maker, the maker's page names the town
    "harrow-prize.md": (
        "Harrow Bridge Prize 2021",
        "The Harrow Bridge Prize 2021 for household design went to the "
        "Vellum Kettle, chosen from forty entries by a jury of five.",
    ),
    "vellum-kettle.md": (
        "Vellum Kettle",
        "The Vellum Kettle is a stovetop kettle with a folding handle. It is cast "
        "by Orrin Forge and sold in three sizes.",
    ),
    "orrin-forge.md": (
        "Orrin Forge",
        "Orrin Forge is a family foundry in the harbour town of Calder Bay, founded in 1902.",
    ),
    "tide-tables.md": ("Tide tables", "Tide tables give the times of high and low water for each day of the year."),
    "bread-ovens.md": ("Bread ovens", "A brick bread oven holds its heat for hours after the fire is raked out."),
    "sail-care.md": ("Sail care", "Rinse a sail in fresh water and dry it loosely folded, never in direct sun."),
}


@pytest.mark.integration
def test_link_hops_follow_a_chain_from_the_passages_the_last_round_found(tmp_path: Path) -> None:
    """Round 3 hops from what round 2 found first (the kettle), not again from round 1's best passage (the prize):
    the chain prize -> kettle -> maker is followed to its third passage."""
    from modular_rag.config import ChromaConfig, ProvidersConfig
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, (title, text) in CHAIN.items():
        (corpus / name).write_text(f"---\ntitle: {title}\n---\n\n{text}\n", encoding="utf-8")
    store = {"name": "chroma", "path": str(tmp_path / "index"), "collection": "chain"}
    index_paths([corpus], Providers(ProvidersConfig(vectorstore=ChromaConfig(**store))), progress=False)
    config = {
        "pattern": "iterative",
        "providers": {"vectorstore": store},
        "operators": {
            "retrieve": {"name": "hybrid", "params": {"k": 1, "pool": 3}},
            "context": "none",
            "generate": "none",
            "judge": "none",
            "hop": {"name": "links", "params": {"beam": 1, "k": 4, "question_titles": False}},
        },
        "params": {"rounds": 3},
    }
    question = "In which town was the kettle that won the Harrow Bridge Prize 2021 cast?"
    out = build_flow(config).invoke({"query": question})
    titles = [h["metadata"]["title"] for h in out["candidates"]]
    assert len(out["rounds"][0]["chunk_ids"]) == 1 and "Vellum Kettle" in titles
    assert "Orrin Forge" in titles  # three hops: prize -> kettle -> forge
    assert sum(e["retrievals"] for e in out["ledger"]) == 2 + 1 + 1  # a search, then one lookup a round


THOUGHTS = [
    "The 2022 Coastline Design Award went to the TW-550 Gravel.",
    "The TW-550 Gravel has a chromoly steel frame, so the answer is chromoly steel.",
]


def _ircot_reply(prompt: str) -> str:
    """A scripted model for IRCoT: the next thought of the chain, then the reader's answer."""
    if prompt.rstrip().endswith("Next step:"):
        return THOUGHTS[1] if "Steps so far:" in prompt else THOUGHTS[0]
    return "Chromoly steel [1]."


@pytest.mark.integration
def test_thought_mode_interleaves_chain_of_thought_with_retrieval_as_ircot_does(demo_dir: Path) -> None:
    from tests.conftest import ScriptedChat

    question = "What is the frame material of the bike that won the 2022 Coastline Design Award?"
    config = load_config(
        template(
            "iterative",
            demo_dir,
            params={"rounds": 5},
            operators={
                "hop": "thought",
                "judge": "none",
                "retrieve": {"name": "hybrid", "params": {"k": 3}},
                "context": {"name": "budget", "params": {"max_chunks": 15, "max_tokens": 4000}},
                "generate": {"name": "cited_answer", "params": {"unsupported": "mark", "min_relevance": None}},
            },
        )
    )
    model = ScriptedChat.of(_ircot_reply)
    config.providers.llm = model
    out = build_flow(config).invoke({"query": question})
    # each thought is the next round's query; the chain stops when it gives the answer
    assert [r["query"] for r in out["rounds"]] == [question, THOUGHTS[0]]
    assert [r["answer"] for r in out["rounds"]] == THOUGHTS
    thinking = [p for p in model.prompts if p.rstrip().endswith("Next step:")]
    assert len(thinking) == 2 and f"Steps so far: {THOUGHTS[0]}" in thinking[1]
    # paragraphs accumulate: the second thought sees every paragraph of both rounds, none of round 1's is dropped
    first, collected = out["rounds"][0]["chunk_ids"], [h["chunk_id"] for h in out["candidates"]]
    assert collected[: len(first)] == first and len(collected) > len(first)
    for hit in out["candidates"]:
        assert f"({hit['metadata']['title']})" in thinking[1]
    # the answer is generated once, after the loop, from the collected paragraphs
    assert len(model.prompts) == 3 and out["answer"]["text"] == "Chromoly steel [1]."
    assert {e["chunk_id"] for e in out["evidence"]} == set(collected)


@pytest.mark.integration
@pytest.mark.parametrize("hop", ["answer", "links", "evidence", "thought"])
def test_every_hop_spends_within_its_cost_model(demo_dir: Path, hop: str) -> None:
    from modular_rag.costs import estimate
    from modular_rag.trace import totals

    config = load_config(template("iterative", demo_dir, params={"rounds": 3}, operators={"judge": "none", "hop": hop}))
    config.providers.llm = fake_llm("The award went to the TW-550 Gravel [1].", "It is chromoly steel [1].")
    expected = estimate(config)
    flow = build_flow(config)
    for question in (AWARD_WINNER, "What does error code E07 mean?"):
        spent = totals(flow.invoke({"query": question})["ledger"])
        assert spent["llm_calls"] in expected.llm_calls, (question, spent, expected)
        assert spent["retrievals"] in expected.retrievals, (question, spent, expected)
