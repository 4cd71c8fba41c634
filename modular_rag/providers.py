"""Models and stores, built from config and loaded lazily: the chat model, the embedder, the knowledge index.

* ``llm: {name: local}`` starts the bundled SmolLM2-135M-Instruct GGUF behind llama.cpp's OpenAI-compatible
  ``llama-server`` on 127.0.0.1 (a free port), reuses it within the process and stops it at exit.
  ``llm: {name: openai, ...}`` is ``ChatOpenAI`` for OpenAI or any compatible endpoint. Both go through one
  code path (the OpenAI chat API, with token log-probabilities).
* ``embeddings: {name: minilm}`` is the bundled all-MiniLM-L6-v2, loaded from site-packages, never from a hub,
  and run on ONNX Runtime (exported once and cached, see :mod:`modular_rag.onnx_embedder`) unless
  ``backend: torch`` asks for sentence-transformers; both give the same vectors.
* ``vectorstore: {name: chroma, ...}`` with the kit's own vectors, plus the BM25 index beside it.
  ``vectorstore: {name: milvus, uri: ..., collection: ...}`` keeps vectors and BM25 in one Milvus collection
  (:mod:`modular_rag.milvus`), ranked there.

Every heavy object is built on first use and cached per process by its config, so two flows with the same
providers (a conditional flow's routes) share one model, one server and one index.

The pieces live in their own modules: the encoders in :mod:`modular_rag.encoders` (and
:mod:`modular_rag.onnx_embedder`), the llama-server process in :mod:`modular_rag.llama_server`, the chat client in
:mod:`modular_rag.chat`. This module holds :class:`Providers` and the glue that builds each from its config, and
re-exports the public names of the others.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from modular_rag.chat import ChatClient, Completion, TokenLogprob, _build_openai_chat, _chat_openai
from modular_rag.chat import _redact as _redact
from modular_rag.config import (
    ChromaConfig,
    LocalLLMConfig,
    MilvusConfig,
    MiniLMConfig,
    OpenAIEmbeddingsConfig,
    OpenAILLMConfig,
    ProvidersConfig,
    SentenceTransformersConfig,
    SparseConfig,
)
from modular_rag.encoders import (
    EndpointEncoder,
    LangChainEncoder,
    LocalEncoder,
    QueryCache,
    SentenceEncoder,
    l2_normalise,
    minilm_path,
)
from modular_rag.errors import MissingDependencyError, ProviderError
from modular_rag.index import ChromaStore, Encoder, KnowledgeIndex, LangChainStore
from modular_rag.llama_server import (
    LocalLLMServer,
    default_server_threads,
    llama_server_binary,
    local_model_path,
    running_local_servers,
    shutdown_local_servers,
)
from modular_rag.milvus import MilvusStore
from modular_rag.milvus_terms import milvus_analyzer
from modular_rag.sentences import encoder_identity
from modular_rag.text import Analyzer

__all__ = [
    "QueryCache",
    "Providers",
    "ChatClient",
    "Completion",
    "TokenLogprob",
    "LocalEncoder",
    "l2_normalise",
    "SentenceEncoder",
    "LangChainEncoder",
    "LocalLLMServer",
    "local_model_path",
    "llama_server_binary",
    "default_server_threads",
    "shutdown_local_servers",
    "running_local_servers",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

_SHARED: dict[tuple[str, str], Any] = {}
_SHARED_LOCK = threading.RLock()


def _shared(kind: str, key: str, build: Callable[[], T]) -> T:
    with _SHARED_LOCK:
        found = _SHARED.get((kind, key))
        if found is None:
            found = build()
            _SHARED[(kind, key)] = found
        return found


def _build_encoder(cfg: MiniLMConfig | SentenceTransformersConfig) -> LocalEncoder:
    """The configured backend; ``auto`` takes ONNX Runtime unless the model or the installed packages rule it
    out (then torch, with the reason logged)."""
    path = minilm_path() if isinstance(cfg, MiniLMConfig) else Path(cfg.path)
    prefix = cfg.query_prefix if isinstance(cfg, SentenceTransformersConfig) else ""
    precision = cfg.precision if isinstance(cfg, MiniLMConfig) else "fp32"
    if cfg.backend != "torch" and path.is_dir():
        from modular_rag.onnx_embedder import OnnxEncoder

        try:
            encoder = OnnxEncoder(path, batch_size=cfg.batch_size, query_prefix=prefix, precision=precision)
            if cfg.backend == "auto":
                encoder.session  # noqa: B018 - export or load now, so a failure can fall back to torch
            return encoder
        except (ProviderError, MissingDependencyError) as exc:
            if cfg.backend == "onnx" or precision != "fp32":  # torch would give other vectors than int8's
                raise
            log.info("embeddings %s: ONNX backend unavailable (%s); using torch", path, exc)
    return SentenceEncoder(path, batch_size=cfg.batch_size, query_prefix=prefix)


def _local_server(cfg: LocalLLMConfig) -> LocalLLMServer:
    """The process-wide server for a local LLM config (one per model file and server settings), not started."""
    model_path = Path(cfg.model_path) if cfg.model_path else local_model_path()
    if not model_path.exists():
        raise ProviderError(f"providers.llm.model_path: no such file: {model_path}")
    key = json.dumps([str(model_path), cfg.parallel, cfg.ctx_size, cfg.threads])
    return _shared(
        "llama-server",
        key,
        lambda: LocalLLMServer(model_path, parallel=cfg.parallel, ctx_size=cfg.ctx_size, threads=cfg.threads),
    )


def _build_local_chat(cfg: LocalLLMConfig) -> ChatClient:
    server = _local_server(cfg)
    model_path = server.model_path
    model = _chat_openai(model=model_path.stem, base_url=server.base_url, api_key="local-no-key", cfg=cfg)
    return ChatClient(
        model,
        openai_compatible=True,
        describe=f"local llama-server ({model_path.name})",
        prefill=True,
        retries=cfg.max_retries,
        revive=server.revive,
    )


_LLM_BUILDERS: dict[type, Callable[[Any], ChatClient]] = {
    LocalLLMConfig: _build_local_chat,
    OpenAILLMConfig: _build_openai_chat,
}


# ---------------------------------------------------------------------------------------------------------- providers

_CONFIG_TYPES = (
    LocalLLMConfig,
    OpenAILLMConfig,
    MiniLMConfig,
    SentenceTransformersConfig,
    OpenAIEmbeddingsConfig,
    ChromaConfig,
    MilvusConfig,
)


class Providers:
    """The models and stores one flow uses, built lazily from :class:`ProvidersConfig`.

    Args:
        config: Provider settings (default: the embedded defaults).

    Each of ``config.llm``, ``config.embeddings`` and ``config.vectorstore`` may be a LangChain object
    (``BaseChatModel``, ``Embeddings``, ``VectorStore``) instead of settings.
    """

    def __init__(self, config: ProvidersConfig | None = None) -> None:
        self.config = config or ProvidersConfig()

    def _key(self, value: Any) -> str:
        return value.model_dump_json() if isinstance(value, _CONFIG_TYPES) else f"object:{id(value)}"

    @cached_property
    def llm(self) -> ChatClient:
        """The chat model (a local server starts here, on first use)."""
        cfg = self.config.llm
        if not isinstance(cfg, _CONFIG_TYPES):  # a LangChain chat model
            from langchain_openai import ChatOpenAI

            client = ChatClient(cfg, openai_compatible=isinstance(cfg, ChatOpenAI), describe=type(cfg).__name__)
        else:
            build = _LLM_BUILDERS[type(cfg)]
            shared = _shared("llm", self._key(cfg), lambda: build(cfg))
            client = ChatClient(
                shared.model,
                openai_compatible=shared.openai_compatible,
                describe=shared.describe,
                prefill=shared.prefill,
                logprobs=shared.logprobs,
                retries=shared.retries,
                revive=shared.revive,
            )
        if self.config.cache is not None and self.config.cache.llm:
            client.cache = self.cache
        return client

    def prestart(self) -> None:
        """Launch the local llama-server now without waiting for it, so it loads while the embedder and the index
        load; the first LLM call waits until it is ready. A no-op for other chat models. The command line does this
        before running a flow that may call the model.

        Raises:
            MissingDependencyError: If the model file or the ``llama-server`` binary is not installed.
        """
        if isinstance(self.config.llm, LocalLLMConfig):
            _local_server(self.config.llm).launch()

    @cached_property
    def cache(self) -> Any:
        """The content-keyed cache (a :class:`~modular_rag.cache.KVCache`), or ``None`` when not configured."""
        cfg = self.config.cache
        if cfg is None:
            return None
        from modular_rag.cache import KVCache

        return _shared("cache", json.dumps([cfg.path, cfg.max_entries]), lambda: KVCache(cfg.path, cfg.max_entries))

    @cached_property
    def encoder(self) -> Encoder:
        """The embedder (loaded on first use)."""
        cfg = self.config.embeddings
        if not isinstance(cfg, _CONFIG_TYPES):
            return _shared("encoder", self._key(cfg), lambda: LangChainEncoder(cfg))
        if isinstance(cfg, OpenAIEmbeddingsConfig):
            return _shared("encoder", self._key(cfg), lambda: EndpointEncoder(cfg))
        return _shared("encoder", self._key(cfg), lambda: _build_encoder(cfg))

    @cached_property
    def index(self) -> KnowledgeIndex:
        """The knowledge index (dense store + sparse BM25), opened on first use."""
        vs, sp = self.config.vectorstore, self.config.sparse
        key = json.dumps([self._key(vs), self._key(self.config.embeddings), sp.model_dump_json()])
        return _shared("index", key, lambda: self._build_index())

    def _build_index(self) -> KnowledgeIndex:
        vs, sp = self.config.vectorstore, self.config.sparse
        analyzer = Analyzer(stemmer=sp.stemmer, stopwords=sp.stopwords)
        settings: dict[str, Any] = {
            "analyzer": analyzer,
            "k1": sp.k1,
            "b": sp.b,
            "encoder_identity": encoder_identity(self.config.embeddings),
        }
        if isinstance(vs, MilvusConfig):
            # dense search, BM25 and texts in Milvus; the kit's term statistics and link table in the catalog
            return KnowledgeIndex(_milvus_store(vs, sp), _LazyEncoder(self), folder=_milvus_folder(vs), **settings)
        if not isinstance(vs, ChromaConfig):
            return KnowledgeIndex(LangChainStore(vs), None, folder=None, **settings)
        dense = ChromaStore(path=vs.path, host=vs.host, port=vs.port, in_memory=vs.in_memory, collection=vs.collection)
        return KnowledgeIndex(dense, _LazyEncoder(self), folder=_index_folder(vs), **settings)

    def close(self) -> None:
        """Forget this flow's references (shared objects stay cached for other flows)."""
        for name in ("llm", "encoder", "index"):
            self.__dict__.pop(name, None)


class _LazyEncoder:
    """The providers' encoder, built on first use: a BM25-only flow needs no embedder installed."""

    def __init__(self, providers: Providers) -> None:
        self._providers = providers

    @property
    def dim(self) -> int | None:
        """Vector size."""
        return self._providers.encoder.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts."""
        return self._providers.encoder.encode(texts)

    def encode_query(self, text: str) -> np.ndarray:
        """Embed one query."""
        return self._providers.encoder.encode_query(text)


def _milvus_store(vs: MilvusConfig, sp: SparseConfig) -> MilvusStore:
    """The Milvus store of a config; the token is read from the environment here, when the index is first used.

    Raises:
        ProviderError: If ``token_env`` names a variable that is not set.
    """
    token = None
    if vs.token_env:
        token = os.environ.get(vs.token_env)
        if not token:
            raise ProviderError(
                f"providers.vectorstore: environment variable {vs.token_env} (token_env) is not set; "
                "set it, or drop token_env for a server without authentication"
            )
    analyzer = vs.analyzer if vs.analyzer is not None else milvus_analyzer(sp.stemmer, sp.stopwords)
    return MilvusStore(
        uri=vs.uri,
        collection=vs.collection,
        token=token,
        analyzer=analyzer,
        k1=sp.k1,
        b=sp.b,
        consistency=vs.consistency,
        timeout_s=vs.timeout_s,
        bm25=vs.bm25,
        search_params=vs.search_params,
    )


def _index_folder(vs: ChromaConfig) -> Path | None:
    """Where the catalog and the BM25 postings of a Chroma store live: beside its folder; for a Chroma server, under
    ``$MODULAR_RAG_HOME/index`` (one per machine: the server keeps the texts); in memory for an in-memory store."""
    if vs.in_memory:
        return None
    if vs.host:
        home = Path(os.environ.get("MODULAR_RAG_HOME", ".modular_rag"))
        return home / "index" / f"{vs.host}_{vs.port}_{vs.collection}"
    return Path(vs.path or ".modular_rag/index") / f"{vs.collection}.kit"


def _milvus_folder(vs: MilvusConfig) -> Path:
    """Where a Milvus collection's catalog lives: ``catalog`` when set (a folder the processes that share the
    collection share), else beside a Milvus Lite file, else under ``$MODULAR_RAG_HOME/milvus``."""
    if vs.catalog:
        return Path(vs.catalog)
    if "://" not in vs.uri:
        return Path(vs.uri).with_suffix(f".{vs.collection}.kit")
    home = Path(os.environ.get("MODULAR_RAG_HOME", ".modular_rag"))
    return home / "milvus" / f"{vs.uri.split('://', 1)[1].replace(':', '_').replace('/', '_')}_{vs.collection}"
