"""A fault-injecting HTTP proxy for tests: forwards to an upstream server, but at a configured rate answers with a
timeout (holds the connection), HTTP 500 or 429, an empty body, or a malformed JSON body."""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("timeout", "500", "429", "empty", "malformed")


class FaultProxy:
    """Run with ``with FaultProxy(upstream, rate=0.3, seed=1) as proxy: ... proxy.url ...``.

    Args:
        upstream: Base URL of the real server (``http://127.0.0.1:PORT``).
        rate: Share of requests answered with a fault.
        seed: RNG seed (faults are reproducible).
        hold_s: How long a ``timeout`` fault holds the connection.
    """

    def __init__(self, upstream: str, *, rate: float = 0.3, seed: int = 0, hold_s: float = 3.0,
                 faults: tuple[str, ...] = FAULTS) -> None:  # fmt: skip
        self.upstream, self.rate, self.hold_s, self.faults = upstream.rstrip("/"), rate, hold_s, faults
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {"ok": 0, **dict.fromkeys(faults, 0)}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                self._forward(None)

            def do_POST(self) -> None:  # noqa: N802
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body: bytes | None) -> None:
                with proxy.lock:
                    fault = proxy.rng.choice(proxy.faults) if proxy.rng.random() < proxy.rate else None
                    proxy.counts[fault or "ok"] += 1
                if fault == "timeout":
                    time.sleep(proxy.hold_s)
                    self.close_connection = True
                    return
                if fault in ("500", "429"):
                    self._reply(int(fault), b'{"error": {"message": "injected fault"}}')
                    return
                if fault == "empty":
                    self._reply(200, b"")
                    return
                if fault == "malformed":
                    self._reply(200, b'{"choices": [{"message": ')
                    return
                request = urllib.request.Request(proxy.upstream + self.path, data=body, method=self.command,
                                                 headers={"Content-Type": "application/json"})  # fmt: skip
                try:
                    with urllib.request.urlopen(request, timeout=120) as resp:
                        self._reply(resp.status, resp.read(), resp.headers.get("Content-Type", "application/json"))
                except urllib.error.HTTPError as err:
                    self._reply(err.code, err.read())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
