"""A tiny OpenAI-compatible embeddings endpoint for tests: ``POST /v1/embeddings`` answers each input with a
hashed bag-of-words vector (so texts sharing words are near), counts requests and texts, can fail the first
``fail_first`` requests with HTTP 500 (to exercise retries), and can take ``delay_s`` per request while counting how
many are in flight at once (``max_in_flight``)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from typing import Any

from tests.helpers.loopback import LoopbackServer, QuietHandler

__all__ = ["StubEmbeddings", "bag_of_words"]


def bag_of_words(text: str, dim: int) -> list[float]:
    """The stub's vector of a text: word counts hashed into ``dim`` buckets."""
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.sha1(word.encode()).hexdigest(), 16) % dim] += 1.0
    return vector


class StubEmbeddings(LoopbackServer):
    """Run with ``with StubEmbeddings() as stub: ... stub.url ...`` (the OpenAI ``base_url``, ending ``/v1``)."""

    def __init__(self, *, dim: int = 256, fail_first: int = 0, delay_s: float = 0.0) -> None:
        self.dim, self.fail_first, self.delay_s = dim, fail_first, delay_s
        self.in_flight = self.max_in_flight = 0
        self.requests = 0
        self.texts = 0
        self.authorization: set[str] = set()
        self._lock = threading.Lock()
        stub = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                request: dict[str, Any] = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with stub._lock:
                    stub.requests += 1
                    stub.authorization.add(self.headers.get("Authorization", ""))
                    failing = stub.requests <= stub.fail_first
                if failing:
                    self._reply(500, json.dumps({"error": {"message": "stub failure"}}).encode())
                    return
                if not self.path.rstrip("/").endswith("/embeddings"):
                    self._reply(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())
                    return
                inputs = request["input"] if isinstance(request["input"], list) else [request["input"]]
                with stub._lock:
                    stub.texts += len(inputs)
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                time.sleep(stub.delay_s)
                with stub._lock:
                    stub.in_flight -= 1
                data = [
                    {"object": "embedding", "index": i, "embedding": bag_of_words(t, stub.dim)}
                    for i, t in enumerate(inputs)
                ]
                self._reply(
                    200,
                    json.dumps(
                        {
                            "object": "list",
                            "data": data,
                            "model": request.get("model"),
                            "usage": {"prompt_tokens": 0, "total_tokens": 0},
                        }
                    ).encode(),
                )

        self._serve(Handler)

    @property
    def url(self) -> str:
        """The ``base_url`` to configure."""
        return f"http://127.0.0.1:{self.port}/v1"
