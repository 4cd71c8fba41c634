"""Chroma as a server: ``providers.vectorstore: {name: chroma, host, port}`` against a real ``chroma run``."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag import demo_corpus_path
from modular_rag.builder import build_flow
from modular_rag.config import ProvidersConfig
from modular_rag.ingest import index_paths
from modular_rag.providers import Providers
from tests.ecosystem.conftest import background, executable, free_port


@pytest.mark.integration
def test_index_and_retrieve_through_a_chroma_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the catalog and postings of a server-backed store live under MODULAR_RAG_HOME/index (texts stay in Chroma)
    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    port = free_port()
    cmd = [
        executable("chroma"),
        "run",
        "--path",
        str(tmp_path / "chroma"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    ready = f"http://127.0.0.1:{port}/api/v2/heartbeat"
    with background(cmd, ready, log=tmp_path / "chroma.log", env={"ANONYMIZED_TELEMETRY": "False"}, timeout_s=60):
        vectorstore = {"name": "chroma", "host": "127.0.0.1", "port": port, "collection": "served"}
        env = Providers(ProvidersConfig.model_validate({"vectorstore": vectorstore}))
        assert env.index.dense.describe() == f"chroma server 127.0.0.1:{port}/served"
        summary = index_paths([demo_corpus_path()], env, progress=False)
        assert summary.files_indexed == 36 and env.index.count() == summary.index_chunks > 0
        assert (tmp_path / "home" / "index" / f"127.0.0.1_{port}_served" / "catalog.sqlite").exists()

        flow = build_flow(
            {
                "pattern": "linear",
                "providers": {"vectorstore": vectorstore},
                "operators": {"retrieve": {"name": "hybrid", "params": {"k": 5}}, "generate": "none"},
            }
        )
        out = flow.invoke({"query": "What does error code E07 mean on the e-bike display?"})
        assert "E07" in out["candidates"][0]["text"]
        assert [e["node"] for e in out["ledger"]] == ["retrieve", "context"]

        dense = build_flow(
            {
                "pattern": "linear",
                "providers": {"vectorstore": vectorstore},
                "operators": {"retrieve": "dense", "generate": "none"},
            }
        )
        hits = dense.invoke({"query": "speed sensor signal lost"})["candidates"]
        assert hits and hits[0]["channel"] == "dense" and "E07" in hits[0]["text"]

        # BM25 ranks from the catalog's postings, which hold no texts: its hits read theirs from the server
        sparse = build_flow(
            {
                "pattern": "linear",
                "providers": {"vectorstore": vectorstore},
                "operators": {"retrieve": {"name": "bm25", "params": {"k": 5}}, "generate": "none"},
            }
        )
        hits = sparse.invoke({"query": "E07 speed sensor"})["candidates"]
        assert hits and hits[0]["channel"] == "bm25" and all(h["text"] for h in hits) and "E07" in hits[0]["text"]
        assert all(h["metadata"].get("source") for h in hits)

        # the data lives in the server: a plain Chroma client sees what the kit wrote
        import chromadb
        from chromadb.config import Settings

        client = chromadb.HttpClient(host="127.0.0.1", port=port, settings=Settings(anonymized_telemetry=False))
        assert client.get_collection("served").count() == summary.index_chunks
