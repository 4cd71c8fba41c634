"""Cost metering: what each node spends (LLM calls, tokens, retrievals, embedding calls); a step's deadline.

The builder opens a :class:`Meter` around every node run; providers record into the current meter through
:func:`record`. The meter is found through a context variable, so operators never pass it around, and a node's
own worker threads see it when started with :func:`contextvars.copy_context`.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Meter",
    "metered",
    "record",
    "note",
    "current_meter",
    "totals",
    "LEDGER_FIELDS",
    "Deadline",
    "current_deadline",
    "run_with_deadline",
    "under_deadline",
]


@dataclass
class Meter:
    """Counters for one node run. Thread-safe: a node may fan work out to threads."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retrievals: int = 0
    embed_calls: int = 0
    cache_hits: int = 0
    notes: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add to one or more counters (``llm_calls=1, prompt_tokens=42``)."""
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


_CURRENT: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("modular_rag_meter", default=None)


def current_meter() -> Meter | None:
    """The meter of the node running in this context, or ``None`` outside a flow."""
    return _CURRENT.get()


def note(text: str) -> None:
    """Add a remark to the current node's trace event (a fallback taken, a retry, a degraded result)."""
    meter = _CURRENT.get()
    if meter is not None:
        with meter._lock:
            meter.notes.append(text)


def record(**counts: int) -> None:
    """Record costs into the current node's meter; a no-op outside a flow (plain Python use of a provider)."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.add(**counts)


@contextmanager
def metered() -> Iterator[Meter]:
    """Open a fresh meter for the enclosed work and make it current.

    Nested meters do not propagate upward: each node run is accounted for on its own.
    """
    meter = Meter()
    token = _CURRENT.set(meter)
    try:
        yield meter
    finally:
        _CURRENT.reset(token)


class Deadline:
    """The time a step may still take (``timeout_s`` of its config). Model clients read it: they pass the time left
    down as the HTTP request's timeout and refuse to start a call once it is over or cancelled, so a timed-out
    step stops spending instead of running on in its worker thread.

    Args:
        seconds: Seconds from now.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self._cancelled = threading.Event()
        self._idle = threading.Condition()
        self._calls = 0

    @contextmanager
    def calling(self) -> Iterator[None]:
        """Mark a model call in flight (so a timed-out step can wait for it to end and be counted)."""
        with self._idle:
            self._calls += 1
        try:
            yield
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no model call is in flight, at most ``timeout`` seconds; returns whether none is."""
        with self._idle:
            return self._idle.wait_for(lambda: self._calls == 0, timeout)

    def remaining(self) -> float:
        """Seconds left (0 once over or cancelled)."""
        return 0.0 if self._cancelled.is_set() else max(0.0, self.ends - time.monotonic())

    def cancel(self) -> None:
        """End it now: calls not yet started are refused."""
        self._cancelled.set()

    @property
    def over(self) -> bool:
        """Whether no time is left."""
        return self.remaining() <= 0.0


_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("modular_rag_deadline", default=None)


def current_deadline() -> Deadline | None:
    """The deadline of the step running in this context, or ``None`` when it has no ``timeout_s``."""
    return _DEADLINE.get()


def run_with_deadline(context: contextvars.Context, deadline: Deadline, fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)`` in ``context`` with ``deadline`` current (a step's worker thread does this)."""

    def call() -> Any:
        _DEADLINE.set(deadline)
        return fn(*args)

    return context.run(call)


@contextmanager
def under_deadline(deadline: Deadline) -> Iterator[Deadline]:
    """Make ``deadline`` current in this context for the enclosed work (a step's async run does this)."""
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


LEDGER_FIELDS = (
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "retrievals",
    "embed_calls",
    "cache_hits",
    "ms",
)
"""The counters of a ledger entry, in display order."""


def totals(ledger: list[Mapping[str, Any]] | None) -> dict[str, float]:
    """Sum a run's ledger entries into one row of costs (``llm_calls``, tokens, ``retrievals``, ``ms`` ...)."""
    out: dict[str, float] = dict.fromkeys(LEDGER_FIELDS, 0)
    for entry in ledger or []:
        for key in LEDGER_FIELDS:
            out[key] += entry.get(key, 0) or 0
    out["ms"] = round(out["ms"], 3)
    return out
