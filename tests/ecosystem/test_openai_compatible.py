"""OpenAI-compatible endpoints: ``providers.llm: {name: openai, base_url: ...}`` against the local
llama-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import ProvidersConfig
from modular_rag.errors import ProviderError
from modular_rag.providers import Providers
from tests.conftest import demo_flow

UNSET = "MODULAR_RAG_TEST_UNSET_KEY"


def openai_llm(base_url: str | None, **extra: object) -> dict[str, object]:
    return {
        "name": "openai",
        "base_url": base_url,
        "api_key_env": UNSET,
        "model": "smollm2",
        "prefill": True,
        "max_tokens": 64,
        **extra,
    }


@pytest.fixture
def base_url(demo_env: Providers, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session's llama-server (OpenAI API under /v1), with no key in the environment."""
    monkeypatch.delenv(UNSET, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    url = str(demo_env.llm.model.openai_api_base)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    return url


@pytest.mark.integration
def test_a_keyless_compatible_endpoint_answers_with_logprobs(base_url: str) -> None:
    env = Providers(ProvidersConfig.model_validate({"llm": openai_llm(base_url)}))
    assert env.llm.describe == f"openai-compatible smollm2 at {base_url}"
    completion = env.llm.complete("Name a colour.", max_tokens=8, logprobs=True, top_logprobs=3)
    assert completion.text.strip() and completion.completion_tokens > 0
    assert completion.tokens is not None and len(completion.tokens) > 0
    assert all(t.logprob <= 0.0 for t in completion.tokens) and len(completion.tokens[0].top) == 3
    # prefill: the server continues a partial assistant message (FLARE and REPLUG use it): after "The capital of
    # France is" the next token is " Paris"; without the prefix the reply would start a new sentence
    top = env.llm.next_token("What is the capital of France?", "The capital of France is", top_logprobs=5)
    assert len(top) == 5 and all(lp <= 0.0 for _, lp in top)
    assert top[0][0] == " Paris" and top[0][1] > -0.7  # p > 0.5
    fresh = env.llm.next_token("What is the capital of France?", "", top_logprobs=5)
    assert " Paris" not in dict(fresh)


@pytest.mark.integration
def test_a_flow_answers_through_the_compatible_endpoint(base_url: str, demo_dir: Path) -> None:
    vectorstore = {"name": "chroma", "path": str(demo_dir), "collection": "demo"}
    flow = build_flow(
        demo_flow(
            demo_dir,
            providers={"llm": openai_llm(base_url), "vectorstore": vectorstore},
            operators={
                "retrieve": {"name": "hybrid", "params": {"k": 4}},
                "context": {"name": "budget", "params": {"max_chunks": 2}},
                "generate": {"name": "cited_answer", "params": {"max_tokens": 48, "logprobs": True}},
            },
        )
    )
    out = flow.invoke({"query": "What does error code E07 mean on the e-bike display?"})
    assert out["answer"]["text"].strip() and not out["answer"]["refused"]
    assert out["answer"].get("confidence") is not None  # from the endpoint's token log-probabilities
    assert sum(e["llm_calls"] for e in out["ledger"]) == 1 and out["ledger"][-1]["completion_tokens"] > 0


@pytest.mark.integration
def test_logprobs_false_asks_the_endpoint_for_none(base_url: str) -> None:
    env = Providers(ProvidersConfig.model_validate({"llm": openai_llm(base_url, logprobs=False, seed=1)}))
    assert env.llm.complete("Name a colour.", max_tokens=8, logprobs=True).tokens is None


@pytest.mark.unit
def test_the_key_is_required_only_without_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ProviderError) as err:
        Providers(ProvidersConfig.model_validate({"llm": openai_llm(None)})).llm  # noqa: B018
    assert str(err.value) == (
        f"providers.llm: environment variable {UNSET} is not set; set it, or give base_url for a keyless "
        "OpenAI-compatible server"
    )
    # OPENAI_BASE_URL counts as a base_url; building the client contacts nobody
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    llm = Providers(ProvidersConfig.model_validate({"llm": openai_llm(None, seed=2)})).llm
    assert llm.describe == "openai-compatible smollm2 at http://127.0.0.1:9/v1"
    # a key in the environment is used and never shown
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv(UNSET, "sk-test-0123456789abcdef")
    llm = Providers(ProvidersConfig.model_validate({"llm": openai_llm(None, seed=3)})).llm
    assert llm.model.openai_api_key.get_secret_value() == "sk-test-0123456789abcdef"
    assert "0123456789" not in llm.describe and llm.describe.endswith("at api.openai.com")
