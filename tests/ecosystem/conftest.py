"""Helpers for the ecosystem tests: free ports and background servers (LangGraph Server, Chroma, Milvus Lite)
started in their own process group and stopped by their PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def executable(name: str) -> str:
    """A console script of the virtualenv running the tests (``chroma``, ``langgraph``)."""
    import sys

    here = Path(sys.executable).parent / name
    return str(here if here.exists() else BIN / name)


@contextmanager
def background(
    cmd: Sequence[str],
    ready_url: str | None,
    *,
    log: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 180.0,
    ready: Callable[[], bool] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` in a new process group until ``ready_url`` answers 200 (or, for a server that speaks no HTTP,
    until ``ready()`` returns true), yield the process, then stop it (SIGTERM, then SIGKILL) by its PID, with
    anything it started. The server's output goes to ``log``."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"{cmd[0]} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
                )
            if ready is not None:
                if ready():
                    break
            elif ready_url is not None:
                try:
                    with urllib.request.urlopen(ready_url, timeout=2) as resp:
                        if resp.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{cmd[0]} not ready after {timeout_s:.0f}s:\n{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.25)
        yield proc
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    # the process leads its own session (start_new_session), so its group id is its PID
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # children that outlived the leader (same group) get the last signal too
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
