"""What the test HTTP servers share: a quiet request handler that writes a whole reply, and a threaded server on
127.0.0.1 (a free port) that runs as a context manager."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["QuietHandler", "LoopbackServer"]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and replies with a whole body and its length."""

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog: many clients connect at once


class LoopbackServer:
    """Base of the test servers: call :meth:`_serve` with the handler class in ``__init__``; ``with`` starts the
    server thread and shuts the server down on exit. ``port`` is the free port it bound."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = _Server(("127.0.0.1", 0), handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
