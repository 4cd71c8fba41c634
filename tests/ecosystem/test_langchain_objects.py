"""The kit's pieces as LangChain objects: the index as a ``BaseRetriever`` (``KnowledgeIndex.as_retriever``), a flow
as a tool (``as_tool``), and one LangChain run per operator (named after it, with its params) that any callback
handler and LangSmith see. The retriever and the tool also pass LangChain's own standard suites (langchain-tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import RetrieversIntegrationTests, ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

from modular_rag.builder import build_flow
from modular_rag.config import load_config
from modular_rag.errors import ConfigError
from modular_rag.providers import Providers
from modular_rag.retriever import IndexRetriever
from modular_rag.tool import as_tool
from tests.patterns.conftest import template

QUESTION = "What does error code E07 mean on the e-bike display?"


class Recorder(BaseCallbackHandler):
    """Records every chain run LangChain reports: name, parent, tags and metadata."""

    def __init__(self) -> None:
        self.runs: dict[UUID, dict[str, Any]] = {}

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs[run_id] = {
            "name": kwargs.get("name"),
            "parent": parent_run_id,
            "tags": tags or [],
            "metadata": metadata or {},
            "inputs": inputs,
        }

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs[run_id] = {"name": "chat model", "parent": parent_run_id, "tags": [], "metadata": {}}

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.runs[run_id]["outputs"] = outputs

    def named(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.runs.values() if r["name"] == name]

    def parent(self, run: dict[str, Any]) -> dict[str, Any]:
        return self.runs[run["parent"]]


@pytest.mark.integration
def test_a_callback_handler_sees_one_run_per_operator_with_its_params(demo_dir: Path) -> None:
    config = template(
        "linear",
        demo_dir,
        operators={
            "retrieve": {"name": "hybrid", "params": {"k": 8, "pool": 20, "fusion": "convex"}},
            "rerank": [{"name": "dedup"}, {"name": "mmr", "params": {"k": 6}}],
        },
    )
    recorder = Recorder()
    out = build_flow(config).invoke({"query": QUESTION}, {"callbacks": [recorder]})
    assert out["answer"]["text"]

    (retrieve,) = recorder.named("hybrid")
    assert "operator:hybrid" in retrieve["tags"] and "slot:retrieve" in retrieve["tags"]
    assert retrieve["metadata"]["modular_rag_operator"] == "hybrid"
    assert retrieve["metadata"]["modular_rag_slot"] == "retrieve"
    params = retrieve["metadata"]["modular_rag_params"]
    assert params["k"] == 8 and params["pool"] == 20 and params["fusion"] == "convex"
    assert params["rrf_k"] == 60  # the validated params, defaults included
    assert retrieve["inputs"] == {"query": QUESTION}  # what the port reads
    assert len(retrieve["outputs"]["candidates"]) == 8
    node = recorder.parent(retrieve)  # the operator's run sits under LangGraph's run of the node
    assert node["name"] == "retrieve"
    assert node["metadata"]["modular_rag_operators"] == [{"name": "hybrid", "params": params}]

    # a slot holding a chain of operators: one run each, in order, under the one node
    dedup, mmr = recorder.named("dedup")[0], recorder.named("mmr")[0]
    assert recorder.parent(dedup) is recorder.parent(mmr) and recorder.parent(mmr)["name"] == "rerank"
    assert mmr["metadata"]["modular_rag_params"]["k"] == 6
    assert [o["name"] for o in recorder.parent(mmr)["metadata"]["modular_rag_operators"]] == ["dedup", "mmr"]
    (generate,) = recorder.named("cited_answer")
    assert generate["metadata"]["modular_rag_params"]["mode"] == "extractive"
    assert recorder.parent(generate)["name"] == "generate"


@pytest.mark.integration
def test_an_operators_model_calls_are_children_of_its_run(demo_dir: Path) -> None:
    from tests.conftest import fake_llm

    config = load_config(
        template("linear", demo_dir, operators={"generate": {"name": "cited_answer", "params": {"mode": "llm"}}})
    )
    config.providers.llm = fake_llm("Error E07 means the speed sensor signal was lost [1].")
    recorder = Recorder()
    build_flow(config).invoke({"query": QUESTION}, {"callbacks": [recorder]})
    (call,) = recorder.named("chat model")
    assert recorder.parent(call)["name"] == "cited_answer"
    assert recorder.parent(recorder.parent(call))["name"] == "generate"


# ---------------------------------------------------------------------------------------------------- the retriever


@pytest.mark.integration
def test_as_retriever_ranks_as_the_flows_retrieve_step_and_filters(demo_env: Providers, demo_dir: Path) -> None:
    index = demo_env.index
    retriever = index.as_retriever("hybrid", k=5, pool=20)
    docs = retriever.invoke(QUESTION)
    step = build_flow(
        template(
            "linear",
            demo_dir,
            operators={
                "retrieve": {"name": "hybrid", "params": {"k": 5, "pool": 20}},
                "context": "none",
                "generate": "none",
            },
        ),
    ).invoke({"query": QUESTION})
    assert [d.id for d in docs] == [c["chunk_id"] for c in step["candidates"]]
    assert docs[0].metadata["doc_id"] == "display-error-e07" and docs[0].metadata["channel"] == "hybrid"
    assert docs[0].metadata["chunk_id"] == docs[0].id and docs[0].metadata["score"] > 0

    policies = index.as_retriever("bm25", k=3, filter={"source": "policy"})
    assert {d.metadata["source"] for d in policies.invoke("battery warranty")} == {"policy"}
    # a call's own filter holds together with the retriever's
    both = policies.invoke("battery warranty", k=10, filter={"year": {"$gte": 2023}})
    assert both and all(d.metadata["source"] == "policy" and d.metadata["year"] >= 2023 for d in both)
    dense = index.as_retriever("dense", k=2).invoke(QUESTION)
    assert len(dense) == 2 and {d.metadata["channel"] for d in dense} == {"dense"}


@pytest.mark.unit
def test_as_retriever_refuses_an_unknown_search_type_listing_the_known_ones(demo_env: Providers) -> None:
    with pytest.raises(ConfigError, match="search types: bm25, dense, hybrid"):
        demo_env.index.as_retriever("similarity")
    with pytest.raises(ConfigError, match="fusion"):
        demo_env.index.as_retriever("hybrid", fusion="max")


class TestIndexRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's standard retriever suite, on the demo index."""

    pytestmark = [pytest.mark.integration]

    @pytest.fixture(autouse=True)
    def _demo_index(self, demo_env: Providers) -> None:
        self.index = demo_env.index

    @property
    def retriever_constructor(self) -> type[IndexRetriever]:
        return IndexRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": self.index, "search_type": "hybrid"}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION


# --------------------------------------------------------------------------------------------------------- the tool


@pytest.fixture(scope="module")
def flow_tool(demo_dir: Path) -> BaseTool:
    return as_tool(
        build_flow(template("linear", demo_dir)),
        name="tidewater_manuals",
        description="Answers questions about Tidewater bikes from their manuals, citing them.",
    )


@pytest.mark.integration
def test_a_flow_as_a_tool_answers_with_its_sources_and_returns_the_run(flow_tool: BaseTool, demo_dir: Path) -> None:
    assert flow_tool.name == "tidewater_manuals"
    assert set(flow_tool.get_input_schema().model_json_schema()["properties"]) == {"question"}
    message = flow_tool.invoke(
        {"type": "tool_call", "id": "c1", "name": flow_tool.name, "args": {"question": QUESTION}}
    )
    assert "Sources:" in message.content and "(display-error-e07" in message.content
    assert message.artifact["answer"]["citations"] and message.artifact["evidence"]
    assert {e["node"] for e in message.artifact["ledger"]} == {"retrieve", "context", "generate"}
    # a retrieval-only flow answers with the passages it found
    config = template("linear", demo_dir, operators={"retrieve": "bm25", "context": "none", "generate": "none"})
    passages = as_tool(build_flow(config)).invoke({"question": QUESTION})
    assert passages.startswith("Passages found:") and "E07" in passages


@pytest.mark.unit
def test_a_tool_name_chat_apis_refuse_is_refused() -> None:
    flow = build_flow(template("linear", None))
    assert as_tool(flow).name == "linear-hybrid"
    with pytest.raises(ValueError, match="letters, digits"):
        as_tool(flow, name="ask the manuals")


class TestFlowToolStandard(ToolsIntegrationTests):
    """LangChain's standard tool suite (integration), on the linear template over the demo index."""

    pytestmark = [pytest.mark.integration]

    @pytest.fixture(autouse=True)
    def _tool(self, flow_tool: BaseTool) -> None:
        self.built = flow_tool

    @property
    def tool_constructor(self) -> BaseTool:
        return self.built

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"question": QUESTION}


class TestFlowToolStandardUnit(ToolsUnitTests):
    """LangChain's standard tool suite (unit: name, input schema)."""

    pytestmark = [pytest.mark.integration]

    @pytest.fixture(autouse=True)
    def _tool(self, flow_tool: BaseTool) -> None:
        self.built = flow_tool

    @property
    def tool_constructor(self) -> BaseTool:
        return self.built

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"question": QUESTION}
