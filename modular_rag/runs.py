"""One LangChain run per operator, a child of LangGraph's run of its node: named after the operator, tagged
``operator:<name>`` and ``slot:<slot>``, its params in the metadata, so LangSmith and any callback handler show which
brick ran with what (sync :func:`operator_run`, async :func:`aoperator_run`); :func:`node_metadata` is a node's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from langchain_core.runnables.config import (
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    patch_config,
    set_config_context,
    var_child_runnable_config,
)

if TYPE_CHECKING:
    from modular_rag.steps import _Step

__all__ = ["aoperator_run", "node_metadata", "operator_run"]


def jsonable_params(params: Any) -> dict[str, Any]:
    """A params model as JSON values (for run metadata); what JSON cannot hold is shown as its ``repr``."""
    try:
        return dict(params.model_dump(mode="json"))
    except Exception:  # a param holding a Python object (a model, a function) that pydantic cannot serialise
        return {
            key: value if isinstance(value, str | int | float | bool | None) else repr(value)
            for key, value in dict(params).items()
        }


@contextmanager
def operator_run(step: _Step, state: Mapping[str, Any]) -> Iterator[Callable[..., Any]]:
    """One LangChain run for one operator, a child of LangGraph's run of its node: named after the operator, tagged
    ``operator:<name>`` and ``slot:<slot>``, with its params in the metadata, the state keys its port reads as
    inputs and its update as outputs, so LangSmith and any callback handler show which operator ran with what.
    Model calls the operator makes are the run's children. Yields a function that calls ``fn(*args)`` inside the run.
    Outside a LangChain run (an operator called directly) nothing is reported."""
    config = var_child_runnable_config.get()
    if config is None:
        yield lambda fn, *args: fn(*args)
        return
    manager = get_callback_manager_for_config(config)
    name = _label_run(step, manager)
    run = manager.on_chain_start(None, {key: state[key] for key in step.reads if key in state}, name=name)
    outputs: dict[str, Any] = {}

    def call(fn: Callable[..., Any], *args: Any) -> Any:
        with set_config_context(patch_config(config, callbacks=run.get_child())) as context:
            result = context.run(fn, *args)
        outputs.update(result if isinstance(result, Mapping) else {"output": result})
        return result

    try:
        yield call
    except BaseException as exc:
        run.on_chain_error(exc)
        raise
    run.on_chain_end({key: value for key, value in outputs.items() if key not in ("trace", "ledger")})


def _label_run(step: _Step, manager: Any) -> str:
    """Tag a callback manager with the step's operator, slot and params; returns the run's name."""
    name = step.name if step.name != "pattern" else step.slot
    manager.add_tags([f"operator:{name}", f"slot:{step.slot}"], inherit=False)
    manager.add_metadata(
        {"modular_rag_slot": step.slot, "modular_rag_operator": name, "modular_rag_params": step.params}, inherit=False
    )
    return name


@asynccontextmanager
async def aoperator_run(step: _Step, state: Mapping[str, Any]) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """:func:`_operator_run` for an async run: the same LangChain run, through the async callback manager. Yields a
    function that awaits ``fn(*args)`` (a coroutine function) inside the run."""
    config = var_child_runnable_config.get()
    if config is None:

        async def bare(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
            return await fn(*args)

        yield bare
        return
    manager = get_async_callback_manager_for_config(config)
    name = _label_run(step, manager)
    run = await manager.on_chain_start(None, {key: state[key] for key in step.reads if key in state}, name=name)
    outputs: dict[str, Any] = {}

    async def call(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        with set_config_context(patch_config(config, callbacks=run.get_child())) as context:
            result: Any = await asyncio.create_task(fn(*args), context=context)  # type: ignore[arg-type]
        outputs.update(result if isinstance(result, Mapping) else {"output": result})
        return result

    try:
        yield call
    except BaseException as exc:
        await run.on_chain_error(exc)
        raise
    await run.on_chain_end({key: value for key, value in outputs.items() if key not in ("trace", "ledger")})


def node_metadata(steps: Sequence[_Step]) -> dict[str, Any]:
    """The metadata of a slot's node (LangGraph ``add_node(metadata=...)``): its operators with their params."""
    return {"modular_rag_operators": [{"name": step.name, "params": step.params} for step in steps]}
