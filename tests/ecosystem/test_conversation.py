"""Threads are conversations: ``messages`` keeps a thread's turns (LangGraph's ``add_messages``); a caller asks with
``{"query": ...}`` or chat style ``{"messages": [HumanMessage(...)]}``; ``condense`` turns a follow-up into a
standalone question from the history; every pattern's run ends by adding the turn to ``messages``, with the answer's
citations. The per-question state still starts clean, and a resume with input ``None`` still continues."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from modular_rag.builder import build_flow
from modular_rag.config import load_config
from tests.conftest import ScriptedChat, demo_flow
from tests.ecosystem.test_threads import CASES, FIRST, SECOND, _flow, _shape
from tests.patterns.conftest import template

E07 = "What does error code E07 mean on the e-bike display?"
E12 = "What does error code E12 mean on the e-bike display?"
FOLLOW_UP = "And E12?"
THIRD = "Should I keep riding?"
CONDENSED = {FOLLOW_UP: E12, THIRD: "Should I keep riding with error E12 on the e-bike display?"}


def condenser(prompt: str) -> str:
    """The scripted model: condenses the follow-ups it knows; answers anything else with a cited sentence."""
    for follow_up, standalone in CONDENSED.items():
        if f"Follow-up question: {follow_up}\n" in prompt:
            return f"Question: {standalone}"
    return "Error E12 means battery overtemperature [1]."


def linear(demo_dir: Path, llm: Any) -> Any:
    """The linear template (extractive: no LLM call to answer) with ``condense`` in its rewrite slot."""
    config = load_config(template("linear", demo_dir, operators={"rewrite": {"name": "condense"}}))
    config.providers.llm = llm
    return config


def doc_ids(out: Mapping[str, Any]) -> list[str]:
    """The documents the answer cites."""
    by_ref = {e["ref"]: e["metadata"]["doc_id"] for e in out.get("evidence") or []}
    return [by_ref[c["ref"]] for c in out["answer"]["citations"]]


def roles(out: Mapping[str, Any]) -> list[str]:
    return [m.type for m in out["messages"]]


@pytest.mark.integration
def test_a_three_turn_conversation_on_one_thread(demo_dir: Path, tmp_path: Path) -> None:
    llm = ScriptedChat.of(condenser)
    thread = {"configurable": {"thread_id": "e-bike"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "threads.sqlite")) as saver:
        flow = build_flow(linear(demo_dir, llm), checkpointer=saver)
        first = flow.invoke({"query": E07}, thread)  # the kit's own input
        second = flow.invoke({"messages": [HumanMessage(FOLLOW_UP)]}, thread)  # chat style, as Studio sends it
        flow.invoke({"messages": [HumanMessage(THIRD)]}, thread, interrupt_after=["retrieve"])
        assert flow.get_state(thread).next == ("context",)
        third = flow.invoke(None, thread)  # a resume continues the third question, it does not start a fourth
    assert first["queries"] == [E07] and doc_ids(first) == ["display-error-e07"]
    assert second["query"] == FOLLOW_UP and second["queries"] == [E12]
    assert doc_ids(second) == ["display-error-e12"]
    assert len(llm.prompts) == 2  # one condense call per follow-up, none for the first question
    assert f"Assistant: {second['answer']['text'].replace(' [1]', '')}" in llm.prompts[1]  # turn 2 is history
    assert roles(third) == ["human", "ai"] * 3
    assert [m.text for m in third["messages"][::2]] == [E07, FOLLOW_UP, THIRD]
    reply = third["messages"][3]
    assert reply.text == second["answer"]["text"]
    assert reply.additional_kwargs["citations"] == [
        {"ref": 1, "chunk_id": second["answer"]["citations"][0]["chunk_id"], "title": "E-bike display error E12"}
    ]
    for out in (first, second, third):  # per-question keys start clean on every turn
        assert [e["node"] for e in out["trace"]] == ["rewrite", "retrieve", "context", "generate"]
        assert [e["node"] for e in out["ledger"]] == ["rewrite", "retrieve", "context", "generate"]
        assert not out.get("rounds") and not out.get("verdicts") and not out.get("branches")


@pytest.mark.integration
@pytest.mark.parametrize("case", list(CASES))
def test_every_pattern_takes_chat_messages_and_answers_into_them(case: str, demo_dir: Path) -> None:
    flow = _flow(case, demo_dir, InMemorySaver())
    thread = {"configurable": {"thread_id": f"chat-{case}"}}
    chat = flow.invoke({"messages": [HumanMessage(SECOND)]}, thread)
    plain = _flow(case, demo_dir, InMemorySaver()).invoke({"query": SECOND}, {"configurable": {"thread_id": "q"}})
    assert chat["query"] == SECOND and _shape(chat) == _shape(plain)  # the same run as with {"query": ...}
    then = flow.invoke({"query": FIRST}, thread)
    assert roles(then) == ["human", "ai", "human", "ai"]
    assert [m.text for m in then["messages"]] == [SECOND, chat["answer"]["text"], FIRST, then["answer"]["text"]]
    assert all("citations" in m.additional_kwargs for m in then["messages"][1::2])


@pytest.mark.integration
def test_a_caller_may_send_the_history_with_the_question(demo_dir: Path) -> None:
    flow = build_flow(linear(demo_dir, ScriptedChat.of(condenser)), threads=True)  # no checkpointer: the caller
    history = [HumanMessage(E07), AIMessage("Error E07 means speed sensor signal lost [1].")]  # keeps the history
    out = flow.invoke({"query": FOLLOW_UP, "messages": history})
    assert out["queries"] == [E12] and doc_ids(out) == ["display-error-e12"]
    assert roles(out) == ["human", "ai", "human", "ai"] and out["messages"][2].text == FOLLOW_UP


@pytest.mark.integration
def test_route_sub_flows_see_the_conversation(demo_dir: Path) -> None:
    config = template("conditional", demo_dir)
    config["params"]["routes"]["exact"]["flow"]["operators"]["rewrite"] = {"name": "condense"}
    config = load_config(config)
    config.providers.llm = ScriptedChat.of(condenser)
    flow = build_flow(config, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "routes"}}
    flow.invoke({"query": E07}, thread)
    out = flow.invoke({"messages": [HumanMessage(FOLLOW_UP)]}, thread)
    assert out["route"] == "exact" and out["queries"] == [E12]
    assert roles(out) == ["human", "ai", "human", "ai"]


@pytest.mark.integration
def test_a_follow_up_is_neither_answered_from_nor_stored_in_the_answer_cache(demo_dir: Path, tmp_path: Path) -> None:
    config = demo_flow(
        demo_dir,
        operators={"retrieve": "bm25", "generate": {"name": "cited_answer", "params": {"mode": "extractive"}}},
        answer_cache={"path": str(tmp_path / "answers.sqlite")},
    )
    flow = build_flow(config, checkpointer=InMemorySaver())
    for name in ("a", "b"):
        thread = {"configurable": {"thread_id": name}}
        first = flow.invoke({"query": E07}, thread)
        follow_up = flow.invoke({"query": FOLLOW_UP}, thread)
        assert sum(e["cache_hits"] for e in first["ledger"]) == (name == "b")  # thread b: E07 from the cache
        assert sum(e["cache_hits"] for e in follow_up["ledger"]) == 0 and len(follow_up["trace"]) > 2


@pytest.mark.integration
def test_three_turns_with_the_local_model(demo_dir: Path) -> None:
    """End to end on the embedded defaults: SmolLM2-135M condenses, the extractive generator answers. What the small
    model writes varies; what must hold does not depend on it."""
    config = load_config(template("linear", demo_dir, operators={"rewrite": {"name": "condense"}}))
    flow = build_flow(config, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "local"}}
    flow.invoke({"messages": [HumanMessage(E07)]}, thread)
    second = flow.invoke({"messages": [HumanMessage(FOLLOW_UP)]}, thread)
    third = flow.invoke({"messages": [HumanMessage(THIRD)]}, thread)
    assert "E12" in second["queries"][0]  # the rewrite, or the follow-up itself when the rewrite dropped it
    assert doc_ids(second) == ["display-error-e12"]
    assert sum(e["llm_calls"] for e in second["ledger"]) == 1  # the condense call
    assert roles(third) == ["human", "ai"] * 3 and third["messages"][-1].text == third["answer"]["text"]
    assert len(third["trace"]) == len(second["trace"])
