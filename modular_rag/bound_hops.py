"""A hop slot's strategy bound to the flow's search (:func:`bind_hop`, what :meth:`FlowBuilder.hop
<modular_rag.builder.FlowBuilder.hop>` returns): ``next_round`` as a traced step, ``follow`` to await from an
``async def`` node."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modular_rag.concurrency import in_pool
from modular_rag.errors import ConfigError
from modular_rag.registry import Hop, Port, Search
from modular_rag.resolve import resolve_operator
from modular_rag.steps import PORT_READS, GraphNode, _Step, make_node

if TYPE_CHECKING:
    from modular_rag.providers import Providers
    from modular_rag.resolve import ResolvedStep

__all__ = ["BoundHop", "bind_hop"]


@dataclass(frozen=True)
class BoundHop:
    """The :class:`~modular_rag.registry.Hop` of a hop slot (operator ``name``) bound to the flow's search by
    :meth:`~modular_rag.builder.FlowBuilder.hop`: each function takes the state alone; ``next_round`` is a traced
    step (``hop:<name>``), ``follow`` is traced by the pattern's step that runs it, an ``async def`` node
    (``update = await hop.follow(state)``), so the searches an async follow waits on are awaited in async runs."""

    name: str
    next_round: GraphNode
    follow: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]] | None
    think: Callable[[Mapping[str, Any]], str] | None
    finished: Callable[[str], bool] | None


def bind_hop(step: ResolvedStep, env: Providers, search: Search, *, node: str, allow_imports: bool) -> BoundHop:
    """Build a hop slot's operator and bind it to the flow's search.

    Args:
        step: The hop slot's resolved operator.
        env: The flow's providers.
        search: The flow's search (a retrieve slot's node, or a runner of it).
        node: The node name the hop's trace events carry.
        allow_imports: Whether an import path may name the operator.

    Raises:
        ConfigError: If the operator does not build a :class:`~modular_rag.registry.Hop`.
    """
    if step.operator is not None:
        built: Any = step.operator.factory(step.params, env)
    elif isinstance(step.spec.object, Hop):
        built = step.spec.object
    else:
        built = resolve_operator(step.spec, Port.HOP, env, path=step.path, allow_imports=allow_imports)[1]
    if not isinstance(built, Hop):
        raise ConfigError(
            f"{step.path}.name",
            f"{step.name!r} builds a {type(built).__name__}; a hop operator's "
            "factory returns a modular_rag.registry.Hop",
        )
    hop = built
    traced = _Step(
        node, f"hop:{step.name}", lambda state: hop.next_round(state, search), step.spec, PORT_READS[Port.HOP]
    )
    follow = None if hop.follow is None else _bound_follow(hop.follow, search)
    return BoundHop(step.name, make_node([traced]), follow, hop.think, hop.finished)


def _bound_follow(
    follow: Callable[[Mapping[str, Any], Search], Any], search: Search
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
    """A hop's ``follow`` bound to the flow's search, to await: an ``async def`` follow awaited, a sync one run in
    the kit's thread pool."""

    async def followed(state: Mapping[str, Any]) -> dict[str, Any]:
        if inspect.iscoroutinefunction(follow):
            return await follow(state, search)
        return await in_pool(follow, state, search)

    return followed
