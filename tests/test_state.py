"""The stage contracts are pinned: swapping an implementation must never change a port."""

from __future__ import annotations

import operator
import typing

import pytest
from langgraph.graph.message import add_messages

from modular_rag import state
from modular_rag.registry import PORT_WRITES, Port

pytestmark = pytest.mark.unit


def test_stage_contract_fields_are_pinned() -> None:
    assert set(state.Chunk.__annotations__) == {"chunk_id", "text", "metadata"}
    assert set(state.Hit.__annotations__) == {"chunk_id", "text", "score", "channel", "metadata"}
    assert set(state.Evidence.__annotations__) == {"ref", "chunk_id", "text", "score", "metadata"}
    assert set(state.Answer.__annotations__) == {
        "text",
        "citations",
        "refused",
        "unsupported",
        "supported",
        "source",
        "quote",
        "reason",
        "confidence",
        "flags",
    }
    assert set(state.Citation.__annotations__) == {"ref", "chunk_id", "method", "verdict", "reason"}
    assert set(state.LedgerEntry.__annotations__) == {
        "node",
        "operator",
        "llm_calls",
        "prompt_tokens",
        "completion_tokens",
        "retrievals",
        "embed_calls",
        "cache_hits",
        "ms",
    }


def test_keys_written_by_parallel_branches_have_append_reducers() -> None:
    hints = typing.get_type_hints(state.RAGState, include_extras=True)
    for key in state.APPEND_KEYS:
        assert typing.get_origin(hints[key]) is typing.Annotated, key
        assert hints[key].__metadata__[0] is operator.add, key
    assert hints["messages"].__metadata__[0] is add_messages  # the conversation: appended, or replaced by id
    plain = set(hints) - state.APPEND_KEYS - {"messages"}
    for key in plain:
        assert typing.get_origin(hints[key]) is not typing.Annotated, f"{key} has a reducer but is not listed"


def test_the_conversation_is_not_a_per_question_key() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    assert "messages" in state.INPUT_KEYS and "messages" not in state.QUESTION_KEYS
    turns = [HumanMessage("What does E07 mean?"), AIMessage("Speed sensor signal lost [1]."), HumanMessage("And E12?")]
    assert "messages" not in state.fresh_question({"messages": turns, "trace": [{"node": "a"}]})
    assert state.pending_question({"messages": turns}) == "And E12?"
    assert state.history({"messages": turns}) == turns[:2]
    answered = {"messages": turns[:2]}
    assert state.pending_question(answered) is None and state.history(answered) == turns[:2]


def test_every_port_writes_only_state_keys() -> None:
    for port in Port:
        assert PORT_WRITES[port] <= state.STATE_KEYS, port


def test_state_graph_accepts_the_schema() -> None:
    from langgraph.graph import START, StateGraph

    graph = StateGraph(state.RAGState)
    graph.add_node("a", lambda s: {"trace": [{"node": "a"}]})
    graph.add_node("b", lambda s: {"trace": [{"node": "b"}]})
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    out = graph.compile().invoke({"query": "q"})
    assert sorted(e["node"] for e in out["trace"]) == ["a", "b"]  # parallel writes merged, not rejected
