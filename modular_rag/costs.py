"""The cost model: LLM calls and retrievals per query, as ranges, from a flow's config alone.

Every operator may register a cost function with its registration (``@operator(..., cost=fn)``): ``fn(params,
ctx) -> Cost``, reading and updating a :class:`CostContext` (how many queries flow into retrieval, how many
candidates into post-retrieval). Every pattern registers how its slots combine (a loop multiplies its body by its
bounds). :func:`estimate` walks a config and returns a :class:`Cost` whose ranges are what the ledger of a run must
fall within: exact for flows without data-dependent branches, ``[min, max]`` for loops and judges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Span",
    "Cost",
    "CostContext",
    "ZERO",
    "estimate",
    "slot_cost",
    "llm",
    "retrievals",
    "context_for",
    "active",
    "total",
    "llm_continues",
]


@dataclass(frozen=True)
class Span:
    """A closed range ``[lo, hi]`` of counts."""

    lo: float
    hi: float

    @classmethod
    def of(cls, value: float | tuple[float, float]) -> Span:
        """A span from a number or a ``(lo, hi)`` pair."""
        return cls(*value) if isinstance(value, tuple) else cls(value, value)

    def __add__(self, other: Span | float) -> Span:
        o = other if isinstance(other, Span) else Span.of(other)
        return Span(self.lo + o.lo, self.hi + o.hi)

    def __mul__(self, other: Span | float) -> Span:
        o = other if isinstance(other, Span) else Span.of(other)
        return Span(self.lo * o.lo, self.hi * o.hi)

    __rmul__ = __mul__
    __radd__ = __add__

    def __contains__(self, value: float) -> bool:
        return self.lo - 1e-9 <= value <= self.hi + 1e-9

    def __str__(self) -> str:
        fmt = lambda v: f"{v:g}"  # noqa: E731
        return fmt(self.lo) if self.lo == self.hi else f"{fmt(self.lo)}-{fmt(self.hi)}"


@dataclass(frozen=True)
class Cost:
    """LLM calls and retrievals of (part of) a run, as ranges."""

    llm_calls: Span = field(default_factory=lambda: Span(0, 0))
    retrievals: Span = field(default_factory=lambda: Span(0, 0))

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.llm_calls + other.llm_calls, self.retrievals + other.retrievals)

    def __mul__(self, times: Span | float) -> Cost:
        return Cost(self.llm_calls * times, self.retrievals * times)

    __rmul__ = __mul__

    def as_dict(self) -> dict[str, list[float]]:
        """``{"llm_calls": [lo, hi], "retrievals": [lo, hi]}``."""
        return {
            "llm_calls": [self.llm_calls.lo, self.llm_calls.hi],
            "retrievals": [self.retrievals.lo, self.retrievals.hi],
        }


ZERO = Cost()


@dataclass
class CostContext:
    """What flows between slots, as ranges: queries into retrieval, candidates into post-retrieval, evidence."""

    queries: Span = field(default_factory=lambda: Span(1, 1))
    candidates: Span = field(default_factory=lambda: Span(10, 10))
    evidence: Span = field(default_factory=lambda: Span(5, 5))
    query_embedding: bool = False
    prefill: bool = False
    search: Cost = field(default_factory=Cost)
    """For a hop (``Port.HOP``): what one search through the flow's retrieve slot costs."""
    hop: str = "first"
    """For a hop, which one: ``first`` (round 2's), ``later`` (round 3's on), or ``follow`` (from the passages in
    ``candidates``: a branch, a tree node)."""


def llm(n: float | tuple[float, float] = 1) -> Cost:
    """A cost of ``n`` LLM calls."""
    return Cost(llm_calls=Span.of(n))


def retrievals(n: Span | float) -> Cost:
    """A cost of ``n`` retrievals."""
    return Cost(retrievals=n if isinstance(n, Span) else Span.of(n))


def llm_continues(llm_config: Any) -> bool:
    """Whether a chat model config continues a partial answer and gives token log-probabilities (the local
    llama-server does; an OpenAI-compatible endpoint when it says ``prefill`` and keeps ``logprobs``; a LangChain
    object is not assumed to). REPLUG's token-level ensemble needs both."""
    if getattr(llm_config, "name", None) == "local":
        return True
    return bool(getattr(llm_config, "prefill", False)) and bool(getattr(llm_config, "logprobs", False))


def context_for(config: Any) -> CostContext:
    """A fresh context for a config or a resolved flow (whether its model continues partial answers, which REPLUG
    uses)."""
    return CostContext(prefill=llm_continues(getattr(config, "config", config).providers.llm))


def _resolved(config: Any) -> Any:
    """The resolution of a config (:func:`modular_rag.builder.resolution`); a resolved flow as it is."""
    from modular_rag.builder import resolution

    return resolution(config)


def slot_cost(config: Any, slot: str, ctx: CostContext, *, default: Any = None) -> Cost:
    """The cost of a pattern slot as configured (or its default: a name or an ``OperatorSpec``), updating ``ctx``.
    Reads the same resolution the builder builds from (:meth:`~modular_rag.resolve.ResolvedFlow.slot`); pass the
    resolved flow to resolve once. Python objects in a slot and operators without a cost function count as free
    (their own calls still show in the ledger)."""
    out = ZERO
    for step in _resolved(config).slot(slot, default=default):
        if step.operator is not None and step.operator.cost is not None:
            out = out + step.operator.cost(step.params, ctx)
    return out


def active(config: Any, slot: str, default: Any = None) -> bool:
    """Whether a slot runs under the config (configured and enabled, or defaulting to an operator)."""
    return _resolved(config).active(slot, default=default)


def total(config: Any, slots: list[str], ctx: CostContext, defaults: dict[str, Any] | None = None) -> Cost:
    """The summed cost of slots run in order (the context flows from one to the next)."""
    flow = _resolved(config)
    out = ZERO
    for slot in slots:
        out = out + slot_cost(flow, slot, ctx, default=(defaults or {}).get(slot))
    return out


def estimate(config: Any) -> Cost:
    """The LLM calls and retrievals per query the config's flow makes, as ranges.

    Raises:
        ConfigError: If the config is invalid.
    """
    flow = _resolved(config)
    if flow.pattern.cost is None:
        from modular_rag.errors import ConfigError

        raise ConfigError(
            "pattern", f"pattern {flow.config.pattern!r} registers no cost model (register_pattern(cost=...))"
        )
    return flow.pattern.cost(flow)


CostFn = Callable[[Any, CostContext], Cost]
