"""A flow as a LangChain tool, for agents: :func:`as_tool`.

The tool takes one argument, ``question``, runs the flow on it and answers with the flow's answer and its sources
(the evidence the answer cites), or, for a retrieval-only flow, the passages found. The whole run's output
(answer, evidence, candidates, ledger) is the tool message's ``artifact``::

    from modular_rag import build_flow
    from modular_rag.tool import as_tool

    manuals = as_tool(build_flow("manuals.yaml"), name="search_manuals",
                      description="Answers questions about Tidewater bikes from their manuals, with sources.")
    agent = create_agent(model, tools=[manuals])      # langchain.agents; or model.bind_tools([manuals])
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

__all__ = ["FlowQuestion", "as_tool", "tool_content"]

_ARTIFACT_KEYS = ("query", "answer", "evidence", "candidates", "ledger")


class FlowQuestion(BaseModel):
    """The tool's argument."""

    question: str = Field(description="The question to answer from the knowledge base, in full (not keywords).")


def tool_content(out: Mapping[str, Any], passages: int = 5) -> str:
    """What the tool tells the model about a run: the answer with its numbered sources, or, without an answer (a
    retrieval-only flow, a refusal), the passages found.

    Args:
        out: The flow's output.
        passages: How many passages to list when there is no answer.
    """
    answer = out.get("answer")
    if answer and answer.get("text") and not answer.get("refused"):
        cited = {c["ref"] for c in answer.get("citations") or []}
        sources = [f"[{e['ref']}] {_name(e)}" for e in out.get("evidence") or [] if e["ref"] in cited]
        return answer["text"] + ("\n\nSources:\n" + "\n".join(sources) if sources else "")
    found = out.get("evidence") or out.get("candidates") or []
    if not found:
        return "Nothing in the knowledge base answers this question."
    lines = [f"[{i}] {_name(h)}: {h['text']}" for i, h in enumerate(found[:passages], 1)]
    head = "No answer was given; the passages found:" if answer else "Passages found:"
    return head + "\n" + "\n\n".join(lines)


def _name(item: Mapping[str, Any]) -> str:
    """A passage as a source line names it: its title and document, else its chunk id."""
    meta = item.get("metadata") or {}
    title, doc = meta.get("title"), meta.get("doc_id")
    return f"{title} ({doc})" if title and doc else str(title or doc or item["chunk_id"])


def as_tool(flow: Any, *, name: str | None = None, description: str | None = None) -> BaseTool:
    """A compiled flow as a LangChain tool taking ``question``.

    The tool answers with :func:`tool_content` and returns the run's answer, evidence, candidates and ledger as the
    tool message's artifact (``response_format="content_and_artifact"``). It runs the flow with the caller's config
    (callbacks, tags) and the flow's own recursion limit.

    Args:
        flow: A compiled flow (:func:`~modular_rag.builder.build_flow`, a pattern factory).
        name: The tool's name (default: the flow's name, with characters other than letters, digits, ``_`` and
            ``-`` replaced by ``_``: what chat model APIs accept).
        description: What the tool is for, as the model reads it (default: one naming the flow).

    Raises:
        ValueError: If ``name`` has characters chat model APIs refuse or is longer than 64 characters.
    """
    flow_name = str(getattr(flow, "name", None) or "knowledge_base")
    tool_name = name if name is not None else re.sub(r"[^A-Za-z0-9_-]+", "_", flow_name)[:64]
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
        raise ValueError(
            f"tool name {tool_name!r}: use 1 to 64 letters, digits, '_' or '-' (what chat model APIs accept)"
        )
    limit = (getattr(flow, "config", None) or {}).get("recursion_limit", 25)

    def run_config(config: RunnableConfig) -> RunnableConfig:
        return {**config, "recursion_limit": limit}  # the tool call's default limit would cut a looping flow short

    def answer(question: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        out = flow.invoke({"query": question}, run_config(config))
        return tool_content(out), {k: out[k] for k in _ARTIFACT_KEYS if k in out}

    async def aanswer(question: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        out = await flow.ainvoke({"query": question}, run_config(config))
        return tool_content(out), {k: out[k] for k in _ARTIFACT_KEYS if k in out}

    return StructuredTool.from_function(
        func=answer,
        coroutine=aanswer,
        name=tool_name,
        args_schema=FlowQuestion,
        description=description
        or f"Answers a question from the knowledge base of the {flow_name!r} flow, citing "
        "the passages the answer rests on.",
        response_format="content_and_artifact",
    )
