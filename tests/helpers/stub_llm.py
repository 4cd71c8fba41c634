"""A tiny OpenAI-compatible chat endpoint for tests and benchmarks: every ``POST /v1/chat/completions`` waits a
fixed latency, then answers deterministically from the request (so concurrent and serial runs give the same
answers), citing evidence ``[1]``. It counts calls and the most requests it had in flight at once."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

from tests.helpers.loopback import LoopbackServer, QuietHandler

__all__ = ["StubLLM", "stub_reply"]


def stub_reply(messages: list[dict[str, Any]]) -> str:
    """The stub's answer to a chat request: a digest of the last user message, citing passage [1]."""
    user = next((m for m in reversed(messages) if m.get("role") == "user"), {"content": ""})
    content = user.get("content", "")
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    return f"The passages answer this ({hashlib.sha1(text.encode()).hexdigest()[:10]}) [1]."


class StubLLM(LoopbackServer):
    """Run with ``with StubLLM(latency_s=0.5) as llm: ... llm.url ...`` (the OpenAI ``base_url``, ending ``/v1``).

    Args:
        latency_s: Seconds every chat completion waits before answering (the server handles requests concurrently,
            one thread each, like a remote API).
    """

    def __init__(self, *, latency_s: float = 0.0) -> None:
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0 (got {latency_s})")
        self.latency_s = latency_s
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(QuietHandler):
            def _json(self, status: int, payload: dict[str, Any]) -> None:
                self._reply(status, json.dumps(payload).encode())

            def do_POST(self) -> None:  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}; only /v1/chat/completions"}})
                    return
                with stub._lock:
                    stub.calls += 1
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                try:
                    time.sleep(stub.latency_s)
                    messages = request.get("messages") or []
                    text = stub_reply(messages)
                    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
                    self._json(
                        200,
                        {
                            "id": f"stub-{stub.calls}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": request.get("model", "stub"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop",
                                    "logprobs": None,
                                }
                            ],
                            "usage": {
                                "prompt_tokens": prompt_tokens,
                                "completion_tokens": len(text.split()),
                                "total_tokens": prompt_tokens + len(text.split()),
                            },
                        },
                    )
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

        self._serve(Handler)
        self.url = f"http://127.0.0.1:{self.port}/v1"
