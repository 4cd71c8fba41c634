"""Recursive pattern (Tree of Clarifications): breadth-first tree bounded by depth and node budget, pruned, fused."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import OperatorSpec, load_config
from tests.conftest import fake_llm
from tests.patterns.conftest import snapshot, template


def keep_all(state: Mapping[str, Any]) -> dict[str, Any]:
    level = max(n["depth"] for n in state["tree"])
    return {
        "verdicts": [
            {"judge": "keep", "decision": "continue", "reason": "kept", "step": level, "target": n["node_id"]}
            for n in state["tree"]
            if n["depth"] == level
        ]
    }


@pytest.mark.unit
def test_template_graph_matches_snapshot() -> None:
    mermaid = build_flow(template("recursive")).get_graph().draw_mermaid()
    assert mermaid == snapshot("recursive", mermaid)


@pytest.mark.integration
@pytest.mark.parametrize(("depth", "nodes", "expected"), [(3, 64, 1 + 2 + 4 + 8), (3, 5, 5), (1, 64, 3)])
def test_tree_grows_breadth_first_to_its_bounds(demo_dir: Path, depth: int, nodes: int, expected: int) -> None:
    config = load_config(
        template("recursive", demo_dir, params={"branching": 2, "max_depth": depth, "max_nodes": nodes})
    )
    config.providers.llm = fake_llm("Which model?\nWhich year?", "An answer [1].", "An answer [1].")
    config.operators["clarify"] = OperatorSpec.from_object(
        lambda s: {"queries": [f"{s['query']} (a)", f"{s['query']} (b)", f"{s['query']} (c)"]}
    )
    config.operators["prune"] = OperatorSpec.from_object(keep_all)
    out = build_flow(config).invoke({"query": "What is the warranty?"})
    tree = out["tree"]
    assert len(tree) == expected
    assert max(n["depth"] for n in tree) <= depth
    depths = [n["depth"] for n in sorted(tree, key=lambda n: int(n["node_id"][1:]))]
    assert depths == sorted(depths)  # breadth-first: a level is complete before the next starts
    assert all(n["parent"] in {m["node_id"] for m in tree} for n in tree if n["depth"] > 0)


@pytest.mark.integration
def test_pruned_nodes_are_not_expanded_or_fused(demo_dir: Path, demo_env) -> None:
    from modular_rag.registry import Port, get_operator

    prune = get_operator(Port.JUDGE, "prune").factory(get_operator(Port.JUDGE, "prune").params(), demo_env)
    state = {
        "query": "How long is the warranty on a carbon frame?",
        "tree": [
            {
                "node_id": "n0",
                "parent": None,
                "depth": 0,
                "question": "How long is the warranty on a carbon frame?",
                "answer": "7 years",
                "chunk_ids": [],
            },
            {
                "node_id": "n1",
                "parent": "n0",
                "depth": 1,
                "question": "How long is the warranty on a carbon frame?",
                "answer": "7 years",
                "chunk_ids": [],
            },
            {
                "node_id": "n2",
                "parent": "n0",
                "depth": 1,
                "question": "What is the best pizza topping in Naples?",
                "answer": "basil",
                "chunk_ids": [],
            },
            {
                "node_id": "n3",
                "parent": "n0",
                "depth": 1,
                "question": "What warranty applied to carbon frames in 2023?",
                "answer": "7 years",
                "chunk_ids": [],
            },
        ],
    }
    verdicts = {v["target"]: v["reason"] for v in prune(state)["verdicts"]}
    assert verdicts == {"n1": "duplicate", "n2": "irrelevant", "n3": "kept"}


@pytest.mark.integration
def test_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    config = template(
        "recursive",
        demo_dir,
        params={"branching": 2, "max_depth": 1, "max_nodes": 3},
        operators={
            "clarify": {"name": "decompose", "params": {"mode": "clarify", "max_questions": 2, "max_tokens": 48}},
            "generate": {"name": "cited_answer", "params": {"max_tokens": 40}},
            "fuse": {"name": "llm_fusion", "params": {"max_tokens": 60}},
        },
    )
    out = build_flow(config).invoke({"query": "How long is the warranty?"})
    assert 1 <= len(out["tree"]) <= 3 and out["tree"][0]["depth"] == 0
    assert out["answer"]["text"].strip()
    cited = {c["chunk_id"] for c in out["answer"]["citations"]}
    assert cited <= {e["chunk_id"] for e in out["evidence"]}


ROOT = "How long is the warranty?"


def _toc_reply(prompt: str) -> str:
    """A scripted model for the Tree of Clarifications: clarifies, verifies, answers each node citing its [1]."""
    if "specific versions" in prompt:  # clarify
        question = prompt.rsplit("Question: ", 1)[1].strip()
        if question == ROOT:
            return "Which warranty covers an aluminium frame?\nWhich warranty covers the battery?"
        if "aluminium" in question:
            return "Which warranty covered aluminium frames in 2019?\nWhich warranty covers aluminium frames in 2023?"
        return "Which battery model?\nWhich battery capacity?"  # never asked: the battery node is pruned
    if "One interpretation of it:" in prompt:  # self-verification
        return "No" if "battery" in prompt.split("One interpretation of it:")[1].split("\n")[0] else "Yes"
    if "interpretations, each with the answer" in prompt:  # long-form fusion
        return "Aluminium frames were covered for 5 years in 2019 [1]."
    return "Covered for 5 years [1]."


@pytest.mark.integration
def test_tree_of_clarifications_clarifies_from_passages_verifies_and_fuses_with_node_references(
    demo_dir: Path,
) -> None:
    from tests.conftest import ScriptedChat

    config = load_config(
        template(
            "recursive",
            demo_dir,
            params={"branching": 2, "max_depth": 2, "max_nodes": 7},
            operators={
                "prune": "self_verify",
                "fuse": {"name": "llm_fusion", "params": {"style": "long_form"}},
                # keep every scripted node answer: the judge under test is the model's
                "generate": {"name": "cited_answer", "params": {"unsupported": "mark", "min_relevance": None}},
            },
        )
    )
    model = ScriptedChat.of(_toc_reply)
    config.providers.llm = model
    out = build_flow(config).invoke({"query": ROOT})
    tree = {n["node_id"]: n for n in out["tree"]}
    battery = next(n for n in tree.values() if "battery" in n["question"])
    # retrieval-augmented clarification: the root's children were written from the root's own passages
    clarify = [p for p in model.prompts if "specific versions" in p]
    assert "<passages>" in clarify[0] and " ".join(tree["n0"]["evidence"][0]["text"].split())[40:120] in clarify[0]
    # self-verification dropped the battery node: it is neither expanded nor fused
    assert [v["reason"] for v in out["verdicts"] if v.get("target") == battery["node_id"]] == ["verified:no"]
    assert not [n for n in tree.values() if n["parent"] == battery["node_id"]]
    assert not [p for p in clarify if battery["question"] in p]
    assert len([n for n in tree.values() if n["depth"] == 2]) == 2
    [fusion] = [p for p in model.prompts if "interpretations, each with the answer" in p]
    assert battery["question"] not in fusion
    # each node's own [1] is renumbered to where its passage sits in the fused evidence
    refs = {e["chunk_id"]: e["ref"] for e in out["evidence"]}
    kept = [n for n in tree.values() if n["node_id"] != battery["node_id"]]
    for node in kept:
        assert f"- {node['question']} -> Covered for 5 years [{refs[node['evidence'][0]['chunk_id']]}]." in fusion
    assert out["answer"]["citations"][0]["chunk_id"] == out["evidence"][0]["chunk_id"]


def _quoting_reply(prompt: str) -> str:
    """A scripted model for the default template: two interpretations per node, each written into the question;
    every verification says yes; every answer quotes the first sentence of passage [1] (so it is supported)."""
    if "specific versions" in prompt:  # clarify
        question = prompt.rsplit("Question: ", 1)[1].strip().rstrip("?")
        return f"{question} for a carbon frame?\n{question} for an aluminium frame?"
    if "One interpretation of it:" in prompt:  # self-verification
        return "Yes"
    if "interpretations, each with the answer" in prompt:  # long-form fusion
        return "Frames are covered for 7 years [1]."
    passage = re.search(r"^\[1\] (?:\([^)]*\) )?(.+)$", prompt, re.M)
    first = re.split(r"(?<=[.!?])\s", passage.group(1))[0] if passage else "Covered for 5 years."
    return f"{first.rstrip('.')} [1]."


@pytest.mark.integration
def test_the_default_template_recurses_to_depth_two_within_max_nodes(demo_dir: Path) -> None:
    """Tree of Clarifications recurses: with the shipped template as it is (only the model scripted), the children
    of the question's interpretations are clarified in turn, and the tree stops at max_nodes."""
    from tests.conftest import ScriptedChat

    config = load_config(template("recursive", demo_dir))
    config.providers.llm = ScriptedChat.of(_quoting_reply)
    out = build_flow(config).invoke({"query": "How long is the warranty on a frame?"})
    depths = [n["depth"] for n in out["tree"]]
    assert max(depths) == 2
    assert len(out["tree"]) <= config.params["max_nodes"]
