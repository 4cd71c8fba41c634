"""Async operators importable by path (``allow_imports``), for the async-flow tests: each records the thread it ran
in, so a test can tell the event loop's thread from a worker thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

RAN_IN: list[str] = []
"""Names of the threads the operators below ran in, in order."""


def keep_two(params: dict[str, Any], env: Any) -> Any:
    """An ``async def`` operator: keeps the first two candidates after yielding to the loop once."""

    async def run(state: Mapping[str, Any]) -> dict[str, Any]:
        RAN_IN.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return {"candidates": list(state.get("candidates") or [])[:2]}

    return run


def sleeps(params: dict[str, Any], env: Any) -> Any:
    """An ``async def`` operator that waits ``params["seconds"]`` (default 5) before keeping every candidate."""

    async def run(state: Mapping[str, Any]) -> dict[str, Any]:
        RAN_IN.append(threading.current_thread().name)
        await asyncio.sleep(float(params.get("seconds", 5)))
        return {"candidates": list(state.get("candidates") or [])}

    return run
