"""The local llama-server: launched without waiting (so it loads while the embedder does), ready on first use, run
with all cores but one by default."""

from __future__ import annotations

import os
import urllib.request

import pytest

from modular_rag.config import LocalLLMConfig, OpenAILLMConfig, ProvidersConfig
from modular_rag.providers import LocalLLMServer, Providers, default_server_threads, local_model_path


@pytest.mark.unit
def test_default_server_threads_leave_a_core_for_the_flow() -> None:
    assert default_server_threads() == max(1, (os.cpu_count() or 2) - 1)


@pytest.mark.integration
def test_launch_then_start_gives_a_ready_server_with_default_threads() -> None:
    server = LocalLLMServer(local_model_path(), parallel=1, ctx_size=1024)
    try:
        server.launch()
        assert server.process is not None and server.process.poll() is None
        first = server.process
        server.launch()  # a no-op while it runs
        assert server.process is first
        server.start()  # waits for /health
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as resp:
            assert resp.status == 200
        args = list(server.process.args)  # type: ignore[arg-type]
        assert args[args.index("-t") + 1] == str(default_server_threads())
    finally:
        server.stop()


@pytest.mark.integration
def test_prestart_launches_the_shared_server_the_chat_model_then_uses() -> None:
    env = Providers(ProvidersConfig(llm=LocalLLMConfig(parallel=1, ctx_size=1024, max_tokens=4)))
    env.prestart()
    assert env.llm.complete("Say yes.", max_tokens=2).completion_tokens > 0
    remote = Providers(ProvidersConfig(llm=OpenAILLMConfig(model="m", base_url="http://127.0.0.1:9/v1")))
    remote.prestart()  # not a local model: nothing to launch, nothing contacted


def _thread_test_flow(demo_dir, **llm: object):  # type: ignore[no-untyped-def]
    """A linear flow whose local server settings no other test uses, so its server starts where this test says."""
    from modular_rag.builder import build_flow
    from tests.conftest import demo_flow

    llm_cfg = {"name": "local", "parallel": 1, "ctx_size": 1536, "max_tokens": 12, **llm}
    return build_flow(
        demo_flow(
            demo_dir,
            providers={"llm": llm_cfg, "vectorstore": {"name": "chroma", "path": str(demo_dir), "collection": "demo"}},
        )
    )


@pytest.mark.integration
def test_the_local_server_outlives_the_thread_that_started_it(demo_dir) -> None:  # type: ignore[no-untyped-def]
    import threading

    flow = _thread_test_flow(demo_dir)
    results: list[dict] = []
    worker = threading.Thread(target=lambda: results.append(flow.invoke({"query": "What does error code E07 mean?"})))
    worker.start()
    worker.join()
    assert results and results[0]["answer"]["text"].strip()
    # the thread that started llama-server has ended; the server must still answer
    again = flow.invoke({"query": "What does error code E12 mean?"})
    assert again["answer"]["text"].strip()
    assert not any("restarted" in e["summary"] for e in again["trace"])  # alive, not revived


@pytest.mark.integration
def test_a_dead_local_server_is_restarted_once_with_the_reason_in_the_trace(demo_dir) -> None:  # type: ignore[no-untyped-def]
    import signal

    from modular_rag.providers import running_local_servers

    flow = _thread_test_flow(demo_dir, ctx_size=1280)
    assert flow.invoke({"query": "What does error code E07 mean?"})["answer"]["text"].strip()
    server = next(s for s in running_local_servers() if s.ctx_size == 1280)
    server.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    server.process.wait()  # type: ignore[union-attr]
    out = flow.invoke({"query": "What does error code E12 mean?"})
    assert out["answer"]["text"].strip()
    event = next(e for e in out["trace"] if e["node"] == "generate")
    assert "llama-server restarted" in event["summary"] and "killed by SIGKILL" in event["summary"]


@pytest.mark.integration
def test_an_embeddings_endpoint_indexes_and_retrieves(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from modular_rag.config import load_config
    from modular_rag.errors import ProviderError
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers
    from tests.conftest import DEMO
    from tests.helpers.stub_embeddings import StubEmbeddings

    monkeypatch.setenv("STUB_EMBED_KEY", "sk-test")
    with StubEmbeddings(fail_first=1) as stub:
        config = load_config(
            {
                "pattern": "linear",
                "providers": {
                    "embeddings": {
                        "name": "openai",
                        "model": "stub",
                        "base_url": stub.url,
                        "batch_size": 4,
                        "api_key_env": "STUB_EMBED_KEY",
                        "max_retries": 2,
                    },
                    "vectorstore": {"name": "chroma", "path": str(tmp_path), "collection": "endpoint"},
                },
            }
        )
        providers = Providers(config.providers)
        files = sorted(DEMO.glob("display-error-*.md"))
        summary = index_paths(files, providers, progress=False)
        sentences = sum(len(s) for s in providers.index.sentence_vectors(list(providers.index.catalog.ids())).values())
        assert summary.chunks == len(files) == 5 and sentences > 0
        assert stub.texts == 5 + sentences  # the chunks and their sentences (stored: a question embeds only itself)
        # one 500 retried by the client, two batches of at most 4 chunks, the sentences in batches of 4
        assert stub.requests == 1 + 2 + -(-sentences // 4)
        assert stub.authorization == {"Bearer sk-test"}  # the key comes from the named environment variable
        hit = providers.index.search_dense("battery overtemperature: the cell temperature is above 60 C", 1)[0]
        assert hit["metadata"]["doc_id"] == "display-error-e12"
        assert config.to_yaml().count("STUB_EMBED_KEY") == 1 and "sk-test" not in config.to_yaml()
    broken = load_config(
        {
            "pattern": "linear",
            "providers": {
                "embeddings": {"name": "openai", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0, "timeout_s": 2}
            },
        }
    )
    with pytest.raises(ProviderError, match="embeddings endpoint http://127.0.0.1:9/v1"):
        Providers(broken.providers).encoder.encode(["a text"])


@pytest.mark.integration
def test_an_embeddings_endpoint_gets_its_batches_concurrently_within_the_bound() -> None:
    """Indexing through an endpoint (TEI, vLLM, OpenAI) sends up to ``concurrency`` batch requests at once, and the
    vectors come back in the texts' order."""
    import numpy as np

    from modular_rag.config import OpenAIEmbeddingsConfig
    from modular_rag.encoders import EndpointEncoder
    from tests.helpers.stub_embeddings import StubEmbeddings, bag_of_words

    texts = [f"text number {i} about part {i % 7}" for i in range(32)]
    with StubEmbeddings(delay_s=0.2) as stub:
        encoder = EndpointEncoder(OpenAIEmbeddingsConfig(model="stub", base_url=stub.url, batch_size=4, concurrency=4))
        vectors = encoder.encode(texts)
        assert stub.requests == 8 and stub.max_in_flight == 4
    want = np.asarray([bag_of_words(t, 256) for t in texts], dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(vectors, want, atol=1e-6)
