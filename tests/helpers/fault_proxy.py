"""A fault-injecting HTTP proxy for tests: forwards to an upstream server, but at a configured rate answers with a
timeout (holds the connection), HTTP 500 or 429, an empty body, or a malformed JSON body."""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request

from tests.helpers.loopback import LoopbackServer, QuietHandler

FAULTS = ("timeout", "500", "429", "empty", "malformed")


class FaultProxy(LoopbackServer):
    """Run with ``with FaultProxy(upstream, rate=0.3, seed=1) as proxy: ... proxy.url ...``.

    Args:
        upstream: Base URL of the real server (``http://127.0.0.1:PORT``).
        rate: Share of requests answered with a fault.
        seed: RNG seed (faults are reproducible).
        hold_s: How long a ``timeout`` fault holds the connection.
    """

    def __init__(
        self, upstream: str, *, rate: float = 0.3, seed: int = 0, hold_s: float = 3.0, faults: tuple[str, ...] = FAULTS
    ) -> None:
        self.upstream, self.rate, self.hold_s, self.faults = upstream.rstrip("/"), rate, hold_s, faults
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {"ok": 0, **dict.fromkeys(faults, 0)}
        proxy = self

        class Handler(QuietHandler):
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
                request = urllib.request.Request(
                    proxy.upstream + self.path,
                    data=body,
                    method=self.command,
                    headers={"Content-Type": "application/json"},
                )
                try:
                    with urllib.request.urlopen(request, timeout=120) as resp:
                        self._reply(resp.status, resp.read(), resp.headers.get("Content-Type", "application/json"))
                except urllib.error.HTTPError as err:
                    self._reply(err.code, err.read())

        self._serve(Handler)
        self.url = f"http://127.0.0.1:{self.port}"
