"""The latency stub speaks the OpenAI chat API well enough for the kit's client, answers deterministically, and
serves calls concurrently (its in-flight counter shows the overlap; no timing is asserted)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from modular_rag.config import OpenAILLMConfig, ProvidersConfig
from modular_rag.providers import Providers
from tests.helpers.stub_llm import StubLLM, stub_reply

pytestmark = pytest.mark.unit


def test_the_kit_client_gets_a_deterministic_cited_answer_with_usage() -> None:
    with StubLLM() as stub:
        env = Providers(ProvidersConfig(llm=OpenAILLMConfig(model="stub", base_url=stub.url, max_retries=0)))
        first = env.llm.complete("What does E07 mean?", system="Answer from the passages.")
        again = env.llm.complete("What does E07 mean?", system="Answer from the passages.")
        other = env.llm.complete("What does E12 mean?")
    assert first.text == again.text == stub_reply([{"role": "user", "content": "What does E07 mean?"}])
    assert first.text.endswith("[1].") and other.text != first.text
    assert first.prompt_tokens > 0 and first.completion_tokens > 0 and stub.calls == 3


def test_calls_are_served_concurrently() -> None:
    body = json.dumps({"model": "stub", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with StubLLM(latency_s=0.3) as stub:

        def call() -> None:
            request = urllib.request.Request(
                stub.url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=30) as resp:
                assert json.loads(resp.read())["choices"][0]["message"]["content"]

        threads = [threading.Thread(target=call) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert stub.calls == 6 and stub.max_in_flight > 1 and stub.in_flight == 0


def test_unknown_routes_and_bad_latency_are_refused() -> None:
    with StubLLM() as stub:
        request = urllib.request.Request(stub.url + "/embeddings", data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 404 and "/v1/chat/completions" in err.value.read().decode()
    with pytest.raises(ValueError, match="latency_s must be >= 0"):
        StubLLM(latency_s=-1)
