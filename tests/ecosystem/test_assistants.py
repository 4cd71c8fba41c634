"""An assistant per client: every served graph takes a typed context (config, index, budget), so one deployed graph
serves several clients, each on its own config and index, and their runs never cross. Tested in process (the graph
factories called as LangGraph Server calls them) and over HTTP with the LangGraph SDK against ``langgraph dev``."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from modular_rag import demo_corpus_path, server
from modular_rag.config import ChromaConfig, ProvidersConfig
from modular_rag.errors import ConfigError
from modular_rag.providers import Providers
from tests.ecosystem.conftest import REPO, background, executable, free_port

DEMO = demo_corpus_path()
ACME = sorted(p.stem for p in DEMO.glob("*.md") if p.stem.startswith("display-error") or p.stem.startswith("tw-"))
"""The first client's documents: display errors and bike manuals."""
GLOBEX = sorted(p.stem for p in DEMO.glob("*.md") if "policy" in p.stem or p.stem == "trade-in-program")
"""The second client's documents: the policies."""
QUESTIONS = [
    "What does error code E07 mean on the e-bike display?",
    "How long is the warranty on a frame?",
    "Can I return a bike I bought online?",
    "How do I adjust the saddle height?",
]


def chroma(folder: Path, collection: str) -> dict[str, Any]:
    return {"name": "chroma", "path": str(folder), "collection": collection}


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory, demo_dir: Path) -> tuple[Path, Path]:
    """Two clients' indexes (collections ``acme`` and ``globex`` of one Chroma folder) and their configs: acme's a
    linear flow with hybrid retrieval, globex's a retrieval-only BM25 flow; both in a flows folder."""
    from modular_rag.ingest import index_paths

    store = tmp_path_factory.mktemp("client-indexes")
    for collection, docs in (("acme", ACME), ("globex", GLOBEX)):
        env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(store), collection=collection)))
        index_paths([DEMO / f"{d}.md" for d in docs], env, progress=False)
    flows = tmp_path_factory.mktemp("flows")
    (flows / "clients").mkdir()
    linear = yaml.safe_load((REPO / "modular_rag" / "templates" / "linear.yaml").read_text())
    linear["providers"]["vectorstore"] = chroma(store, "acme")
    (flows / "clients" / "acme.yaml").write_text(yaml.safe_dump({**linear, "name": "acme"}))
    (flows / "globex.yaml").write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "name": "globex",
                "providers": {"vectorstore": chroma(store, "globex")},
                "operators": {"retrieve": {"name": "bm25", "params": {"k": 4}}, "context": "none", "generate": "none"},
            }
        )
    )
    # a linear config whose model answers: one LLM call per question (never called here: its budget refuses it)
    (flows / "chatty.yaml").write_text(
        yaml.safe_dump(
            {
                **linear,
                "name": "chatty",
                "operators": {**linear["operators"], "generate": {"name": "cited_answer", "params": {"mode": "llm"}}},
            }
        )
    )
    return store, flows


def docs_of(out: dict[str, Any]) -> set[str]:
    return {h["metadata"]["doc_id"] for h in [*out.get("candidates", []), *out.get("evidence", [])]}


@pytest.mark.integration
def test_two_assistants_of_one_graph_answer_from_their_own_config_and_index(
    clients: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, flows = clients
    monkeypatch.setenv("MODULAR_RAG_FLOWS", str(flows))
    acme = SimpleNamespace(context={"flow": "clients/acme"})  # a config by path inside the flows folder
    globex = SimpleNamespace(context={"flow": "globex", "budget": {"max_llm_calls": 0, "max_retrievals": 1}})

    def ask(runtime: Any, question: str) -> dict[str, Any]:
        graph = server.flow({}, runtime)  # as LangGraph Server calls the factory for each run
        return graph.invoke({"query": question})  # type: ignore[no-any-return]

    jobs = [(runtime, q) for q in QUESTIONS for runtime in (acme, globex)]
    with ThreadPoolExecutor(4) as pool:  # both clients' runs at once
        outs = list(pool.map(lambda job: ask(*job), jobs))
    for (runtime, _), out in zip(jobs, outs, strict=True):
        own = ACME if runtime is acme else GLOBEX
        assert docs_of(out) <= set(own), (runtime.context, docs_of(out))
    assert all(docs_of(out) for out in outs[:4])  # E07 and the warranty: both clients find theirs
    acme_out, globex_out = outs[0], outs[1]
    assert acme_out["answer"]["text"] and [e["node"] for e in acme_out["ledger"]] == ["retrieve", "context", "generate"]
    assert not globex_out.get("answer") and [e["node"] for e in globex_out["ledger"]] == ["retrieve"]
    assert server.flow({}, acme).get_context_jsonschema()["properties"].keys() == {"flow", "index", "budget"}


@pytest.mark.integration
def test_a_pattern_graph_serves_one_config_on_each_clients_index(
    clients: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, flows = clients
    monkeypatch.setenv("MODULAR_RAG_FLOWS", str(flows))
    (flows / "linear.yaml").write_text((flows / "clients" / "acme.yaml").read_text())  # the linear graph's default
    outs = {}
    for index in ("acme", "globex"):
        graph = server.linear({}, SimpleNamespace(context={"index": index}))
        outs[index] = graph.invoke({"query": "What does error code E07 mean, and can I return the bike?"})
        assert graph.get_graph().nodes.keys() == server.linear({}, None).get_graph().nodes.keys()  # same topology
    assert docs_of(outs["acme"]) <= set(ACME) and docs_of(outs["globex"]) <= set(GLOBEX)
    assert outs["acme"]["answer"]["text"] != outs["globex"]["answer"]["text"]


@pytest.mark.unit
def test_a_context_is_checked_naming_what_is_wrong(clients: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, flows = clients
    monkeypatch.setenv("MODULAR_RAG_FLOWS", str(flows))
    run = lambda graph, **context: graph({}, SimpleNamespace(context=context))  # noqa: E731
    with pytest.raises(ConfigError, match=r"context.budget.max_llm_calls: config 'chatty' may take up to 1 LLM calls"):
        run(server.flow, flow="chatty", budget={"max_llm_calls": 0})
    assert run(server.flow, flow="chatty", budget={"max_llm_calls": 1}).name == "chatty"
    with pytest.raises(ConfigError, match="context.index: '../acme' is not a collection name"):
        run(server.flow, flow="globex", index="../acme")
    with pytest.raises(ConfigError, match="no config named '../linear'"):  # never a file outside the flows folder
        run(server.flow, flow="../linear")
    with pytest.raises(ConfigError, match="is a linear flow; this graph serves iterative configs"):
        run(server.iterative, flow="globex")
    with pytest.raises(ConfigError, match=r"unknown keys \['collection'\]; allowed: flow, index, budget"):
        run(server.flow, collection="acme")
    with pytest.raises(ConfigError, match=r"context.budget: unknown keys \['llm_calls'\]"):
        run(server.flow, flow="globex", budget={"llm_calls": 1})


@pytest.mark.integration
@pytest.mark.slow
def test_two_assistants_over_http_never_cross(clients: tuple[Path, Path], tmp_path: Path) -> None:
    from langgraph_sdk import get_sync_client

    _, flows = clients
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        executable("langgraph"),
        "dev",
        "--config",
        str(tmp_path / "server" / "langgraph.json"),
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
    served = tmp_path / "server"  # its own folder: langgraph dev keeps its assistants in .langgraph_api there
    served.mkdir()
    spec = json.loads((REPO / "langgraph.json").read_text())
    spec["graphs"] = {name: str(REPO / path) for name, path in spec["graphs"].items()}
    spec["dependencies"] = [str(REPO)]
    (served / "langgraph.json").write_text(json.dumps(spec))
    with background(cmd, f"{url}/ok", log=tmp_path / "langgraph-dev.log", cwd=served, env=env):
        client = get_sync_client(url=url, timeout=300)
        schema = client.assistants.get_schemas(client.assistants.search(graph_id="flow")[0]["assistant_id"])
        assert set(schema["context_schema"]["properties"]) == {"flow", "index", "budget"}
        acme = client.assistants.create("flow", context={"flow": "clients/acme"}, name="acme")
        globex = client.assistants.create("flow", context={"flow": "globex", "index": "globex"}, name="globex")
        # both clients at once, each question on a thread of its own
        jobs = [(a, q) for q in QUESTIONS for a in (acme, globex)]

        def ask(job: tuple[dict[str, Any], str]) -> dict[str, Any]:
            thread = client.threads.create()
            return client.runs.wait(thread["thread_id"], job[0]["assistant_id"], input={"query": job[1]})  # type: ignore[return-value]

        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(ask, jobs))
        for (assistant, _), out in zip(jobs, outs, strict=True):
            own = ACME if assistant is acme else GLOBEX
            assert docs_of(out) <= set(own), (assistant["name"], docs_of(out))
        assert all(docs_of(out) for out in outs[:4])
        assert outs[0]["answer"]["text"] and not outs[1].get("answer")
        # a budget the config does not fit: the run fails, naming the budget
        tight = client.assistants.create("flow", context={"flow": "chatty", "budget": {"max_llm_calls": 0}})
        thread = client.threads.create()
        run = client.runs.create(thread["thread_id"], tight["assistant_id"], input={"query": QUESTIONS[0]})
        client.runs.join(thread["thread_id"], run["run_id"])
        assert client.runs.get(thread["thread_id"], run["run_id"])["status"] == "error"
