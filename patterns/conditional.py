"""Conditional pattern: a router picks one named sub-flow per query.

Each route is a whole flow config (any pattern) compiled as a subgraph that shares the parent's providers unless
it names its own; the router (keyword, llm, embedding or hybrid) writes ``route`` and ``route_confidence``, and
below ``threshold`` (or when nothing matches) the configured ``fallback`` route runs.

With a ``retrieve`` operator the flow retrieves once before the router: the router may decide from that evidence
(the ``learned`` router trained with ``--features evidence``), and every route starts from its candidates (a route
whose ``retrieve`` is ``given`` does not search again), so a question costs that retrieval plus its route's own.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from typing_extensions import Unpack

from modular_rag.builder import BuildOptions, FlowBuilder, FlowSource
from modular_rag.config import FlowConfig, format_validation_error
from modular_rag.costs import Cost, Span, context_for, estimate, slot_cost
from modular_rag.errors import ConfigError
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.resolve import ResolvedFlow, resolve
from modular_rag.state import RAGState

__all__ = ["build_conditional", "ConditionalParams", "Route", "ROUTE", "RETRIEVE"]

ROUTE, RETRIEVE = "route", "retrieve"

SLOTS = {
    RETRIEVE: SlotSpec(
        Port.RETRIEVE,
        doc="a retrieval shared by every route, run before the router (none: each route retrieves itself)",
    ),
    ROUTE: SlotSpec(
        Port.ROUTE, default="keyword", optional=False, doc="router: keyword, llm, embedding, hybrid, learned"
    ),
}


class Route(BaseModel):
    """A named sub-flow and what routers know about it."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field("", description="what questions belong here (embedding and LLM routers read it)")
    keywords: list[str] = Field(default_factory=list, description="keyword router terms; 're:<regex>' allowed")
    examples: list[str] = Field(default_factory=list, description="example questions (embedding router)")
    flow: dict[str, Any] = Field(..., description="a flow config; shares the parent's providers unless it sets its own")


class ConditionalParams(BaseModel):
    """Routes, the fallback route and the confidence threshold below which the fallback runs."""

    model_config = ConfigDict(extra="forbid")

    routes: dict[str, Route] = Field(..., min_length=2, description="route name -> sub-flow")
    fallback: str = Field(..., description="the route taken below threshold or when the router finds nothing")
    threshold: float = Field(0.0, ge=0.0, le=1.0, description="minimum router confidence")
    _flows: dict[str, ResolvedFlow[Any]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _fallback_is_a_route(self) -> ConditionalParams:
        if self.fallback not in self.routes:
            raise ValueError(f"fallback {self.fallback!r} is not a route; routes: {', '.join(self.routes)}")
        for name in self.routes:
            if name in (START, END, ROUTE) or not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"route name {name!r} must be alphanumeric (with - or _) and not {ROUTE!r}")
        return self


def _route_flow(name: str, route: Route, path: str) -> ResolvedFlow[Any]:
    """A route's sub-flow, read and resolved (its errors name their path inside the parent config)."""
    try:
        config = FlowConfig.model_validate(route.flow)
    except Exception as exc:
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            raise format_validation_error(exc, f"{path}.routes.{name}.flow", route.flow) from None
        raise
    if config.pattern == "conditional":
        raise ConfigError(f"{path}.routes.{name}.flow.pattern", "a route cannot itself be conditional")
    return resolve(config, path=f"{path}.routes.{name}.flow")


def _check(params: ConditionalParams, path: str) -> None:
    """Resolve every route's sub-flow when the config is resolved; the build and the cost model use them."""
    params._flows = {name: _route_flow(name, route, path) for name, route in params.routes.items()}


def _routes(params: ConditionalParams) -> dict[str, ResolvedFlow[Any]]:
    """The routes' resolved sub-flows (resolved once, with the config)."""
    if not params._flows:
        _check(params, "params")
    return params._flows


def cost(flow: ResolvedFlow[ConditionalParams]) -> Cost:
    """The shared retrieval's and the router's cost plus the cheapest to the dearest route's."""
    params = flow.params
    ctx = context_for(flow)
    router = slot_cost(flow, RETRIEVE, ctx) + slot_cost(flow, ROUTE, ctx)
    routes = [estimate(sub) for sub in _routes(params).values()]
    llm = Span(min(r.llm_calls.lo for r in routes), max(r.llm_calls.hi for r in routes))
    retr = Span(min(r.retrievals.lo for r in routes), max(r.retrievals.hi for r in routes))
    return router + Cost(llm, retr)


def _refuse_given(routes: dict[str, ResolvedFlow[Any]]) -> None:
    """Without a shared retrieval, a route whose retrieve is ``given`` would find no candidates: say so at build."""
    for name, sub in routes.items():
        if "retrieve" in sub.pattern.slots and any(step.name == "given" for step in sub.slot("retrieve")):
            raise ConfigError(
                f"params.routes.{name}.flow.operators.retrieve",
                "retrieve: given takes the candidates "
                "of a retrieval shared before the router, and this flow has none: set operators.retrieve "
                "of the conditional flow (e.g. hybrid), or give the route its own retriever",
            )


@register_pattern("conditional", slots=SLOTS, params=ConditionalParams, check=_check, cost=cost)
def build_conditional(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the conditional flow: (shared retrieve ->) route -> one of the route sub-flows -> end.

    Args:
        config: A flow config with ``pattern: conditional`` and ``params.routes``.
        **options: ``checkpointer``, ``providers``, ``threads``, ``output_schema``: see
            :class:`~modular_rag.builder.BuildOptions`.

    Returns:
        The compiled graph. Cost: the shared retrieval's (if any) and the router's (0 LLM calls for
        keyword/embedding/learned, 1 for llm) plus the chosen route's.

    Example:
        >>> flow = build_conditional({"pattern": "conditional", "providers": {"vectorstore": {"in_memory": True}},
        ...     "params": {"fallback": "open", "routes": {
        ...         "exact": {"keywords": ["re:\\\\bE\\\\d\\\\d\\\\b"], "flow": {"pattern": "linear"}},
        ...         "open": {"flow": {"pattern": "linear", "operators": {"retrieve": "dense"}}}}}})
        >>> sorted(flow.get_graph().nodes)
        ['__end__', '__start__', 'exact', 'open', 'route']
    """
    flow = FlowBuilder[ConditionalParams](config, "conditional", **options)
    params = flow.params
    flow.add_slot(
        ROUTE,
        inject={
            "routes": {
                n: r.model_dump(include={"description", "keywords", "examples"}) for n, r in params.routes.items()
            },
            "fallback": params.fallback,
            "threshold": params.threshold,
        },
        fallback={"route": params.fallback, "route_confidence": 0.0},
    )
    shared = flow.add_slot(RETRIEVE)
    if shared:
        flow.edge(START, RETRIEVE)
        flow.edge(RETRIEVE, ROUTE)
    else:
        flow.edge(START, ROUTE)
        _refuse_given(_routes(params))
    for name, sub in _routes(params).items():
        flow.add_node(name, flow.subflow(name, sub, carry=("candidates",) if shared else ()))
        flow.edge(name, END)

    def by_route(state: RAGState) -> str:  # a route name: the routes are the config's, not known statically
        return state["route"]

    flow.branch(ROUTE, by_route, {name: name for name in params.routes})
    return flow.compile()  # each route runs as one node, with its own bound
