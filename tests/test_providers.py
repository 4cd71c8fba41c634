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
