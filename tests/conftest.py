"""Shared fixtures: the demo corpus indexed once per session into a real Chroma store with BM25 beside it,
the real local LLM (llama-server + SmolLM2), and scripted fake chat models where a test needs exact output."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from modular_rag import demo_corpus_path  # noqa: E402
from modular_rag.config import ChromaConfig, MiniLMConfig, ProvidersConfig  # noqa: E402
from modular_rag.providers import Providers  # noqa: E402

DEMO = demo_corpus_path()
QUESTIONS = DEMO.parent / "questions.jsonl"
SHARED = Path(__file__).resolve().parents[2] / "shared"
DATASETS = Path(os.environ.get("MODULAR_RAG_DATASETS", SHARED / "datasets"))


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """ONNX exports go to a session folder, not the user's cache (the suite fine-tunes throwaway models)."""
    folder = tmp_path_factory.mktemp("onnx-cache")
    before = os.environ.get("MODULAR_RAG_MODEL_CACHE")
    os.environ["MODULAR_RAG_MODEL_CACHE"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("MODULAR_RAG_MODEL_CACHE", None)
    else:
        os.environ["MODULAR_RAG_MODEL_CACHE"] = before


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A persistent Chroma folder holding the demo corpus (indexed once per session)."""
    from modular_rag.ingest import index_paths

    folder = tmp_path_factory.mktemp("demo-index")
    env = Providers(providers_config(folder))
    summary = index_paths([DEMO], env, progress=False)
    assert summary.files_indexed == 36 and summary.index_chunks > 0
    return folder


def providers_config(demo_dir: Path, llm: Any = None) -> ProvidersConfig:
    """Providers over the session's demo index, with the given chat model (default: the local LLM) and the
    templates' embedder (MiniLM, int8)."""
    cfg = ProvidersConfig(
        embeddings=MiniLMConfig(precision="int8"), vectorstore=ChromaConfig(path=str(demo_dir), collection="demo")
    )
    if llm is not None:
        cfg.llm = llm
    return cfg


@pytest.fixture(scope="session")
def demo_env(demo_dir: Path) -> Providers:
    """Providers over the demo index with the real local LLM (started on first use)."""
    return Providers(providers_config(demo_dir))


def fake_llm(*responses: str) -> Any:
    """A scripted chat model that answers with ``responses`` in turn (cycling)."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    return FakeListChatModel(responses=list(responses))


class ScriptedChat:
    """Builds a scripted chat model whose reply is ``reply(prompt)`` (the last message's text), recording every
    prompt in ``prompts`` (and the system messages sent with it in ``systems``): for tests that need exact model
    output chosen by what the prompt says."""

    @staticmethod
    def of(reply: Any) -> Any:
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        class _Scripted(BaseChatModel):
            prompts: list[str] = []
            systems: list[str] = []

            @property
            def _llm_type(self) -> str:
                return "scripted"

            def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
                prompt = str(messages[-1].content)
                self.prompts.append(prompt)
                self.systems.append(" ".join(str(m.content) for m in messages if m.type == "system"))
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply(prompt)))])

        return _Scripted(prompts=[], systems=[])


def fake_env(demo_dir: Path, *responses: str) -> Providers:
    """Providers over the demo index with a scripted chat model."""
    return Providers(providers_config(demo_dir, fake_llm(*responses)))


def demo_flow(demo_dir: Path, pattern: str = "linear", **extra: Any) -> dict[str, Any]:
    """A config dict over the demo index (local LLM unless ``providers`` is overridden)."""
    config: dict[str, Any] = {
        "pattern": pattern,
        "providers": {"vectorstore": {"name": "chroma", "path": str(demo_dir), "collection": "demo"}},
    }
    config.update(extra)
    return config


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sentence-transformers CrossEncoder folder built offline from the bundled MiniLM encoder with a fresh
    (untrained) scoring head: no trained cross-encoder weights can be obtained here, so this checks the wiring."""
    from sentence_transformers import CrossEncoder

    from modular_rag.providers import minilm_path

    folder = tmp_path_factory.mktemp("cross-encoder")
    CrossEncoder(str(minilm_path()), num_labels=1, device="cpu").save(str(folder))
    return folder
