"""``python benchmarks/layers.py``: the kit's own frames between a linear flow's ``invoke`` / ``ainvoke`` and its chat
model, and the thread the model is called on: how many layers an LLM slot passes through.

The flow is the linear template on the bundled demo index, its answer written by the model (``cited_answer`` in
mode ``llm``), with a scripted chat model that records the call stack at
its first call. A frame counts when its file is in this tree's ``modular_rag/``, ``operators/`` or ``patterns/``. To
compare with an earlier commit, run this file with that commit's code first on the path (as for
``benchmarks/behaviour.py``)::

    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/layers.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after a PYTHONPATH given first: the earlier commit's code wins


def _behaviour() -> Any:
    """``benchmarks/behaviour.py`` of this tree (an earlier commit's tree may have none), loaded by path."""
    spec = importlib.util.spec_from_file_location("behaviour", Path(__file__).with_name("behaviour.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kit_frames(stack: list[traceback.FrameSummary]) -> list[str]:
    """``package/file.py:function`` of the stack's frames that are the kit's own, outermost first."""
    out = []
    for frame in stack:
        parts = Path(frame.filename).parts
        for package in ("modular_rag", "operators", "patterns"):
            if package in parts and "site-packages" not in parts and "tests" not in parts:
                at = parts.index(package)
                out.append(f"{'/'.join(parts[at:])}:{frame.name}")
                break
    return out


def _coroutine_frames(task: asyncio.Task[Any]) -> list[Any]:
    """The frames of ``task``'s coroutine and of every coroutine it awaits in turn, outermost first
    (``Task.get_stack`` gives a suspended task's outermost frame only)."""
    frames = []
    coro: Any = task.get_coro()
    while coro is not None and hasattr(coro, "cr_frame"):
        if coro.cr_frame is not None:
            frames.append(coro.cr_frame)
        coro = coro.cr_await
    return frames


def _holds(value: Any, task: asyncio.Future[Any]) -> bool:
    return value is task or (isinstance(value, asyncio.Future) and task in getattr(value, "_children", ()))


def _awaited_by(task: asyncio.Future[Any]) -> asyncio.Task[Any] | None:
    """The task waiting for ``task``: on it, on a gather of it, or (``asyncio.wait_for``) holding it in its innermost
    frame while it waits."""
    for other in asyncio.all_tasks():
        if other is task:
            continue
        frames = _coroutine_frames(other)
        if _holds(getattr(other, "_fut_waiter", None), task) or (
            frames and any(_holds(v, task) for v in frames[-1].f_locals.values())
        ):
            return other
    return None


def task_chain_stack() -> list[traceback.FrameSummary]:
    """The frames of the tasks awaiting the current one, outermost first, up to the current task's own (which the
    thread's stack shows); Python 3.11 has no ``asyncio.capture_call_graph``."""
    try:
        task: asyncio.Task[Any] | None = asyncio.current_task()
    except RuntimeError:
        return []
    frames: list[Any] = []
    while task is not None and (task := _awaited_by(task)) is not None:
        frames = _coroutine_frames(task) + frames
    return list(traceback.StackSummary.extract((f, f.f_lineno) for f in frames))


def main() -> None:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from modular_rag import build_flow, demo_corpus_path, index_paths, load_config
    from modular_rag.providers import Providers

    behaviour = _behaviour()
    seen: dict[str, tuple[list[str], str]] = {}
    mode = ["invoke"]

    def recording(prompt: str) -> str:
        if mode[0] not in seen:
            stack = traceback.extract_stack()
            if threading.current_thread() is threading.main_thread() and mode[0] == "ainvoke":
                stack = task_chain_stack() + stack  # on the loop: the awaiting tasks' frames too
            seen[mode[0]] = (kit_frames(stack), threading.current_thread().name)
        return str(behaviour.reply(prompt))

    class Recording(BaseChatModel):
        """Scripted, and native both ways: ``invoke`` runs ``_generate`` on the caller's thread, ``ainvoke`` awaits
        ``_agenerate`` on the event loop (so an awaited call shows its coroutines' frames)."""

        @property
        def _llm_type(self) -> str:
            return "recording"

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            text = recording(str(messages[-1].content))
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            return self._generate(messages, stop, run_manager, **kwargs)

    with tempfile.TemporaryDirectory() as index:
        raw = behaviour.config_of("linear", index)
        raw["operators"]["generate"] = {"name": "cited_answer", "params": {"mode": "llm"}}
        config = load_config(raw)
        index_paths([demo_corpus_path()], Providers(config.providers), progress=False)
        config.providers.llm = Recording()
        flow = build_flow(config, providers=Providers(config.providers))
        flow.invoke({"query": behaviour.QUESTIONS[0]})
        mode[0] = "ainvoke"
        asyncio.run(flow.ainvoke({"query": behaviour.QUESTIONS[0]}))
    import modular_rag

    print(f"code: {Path(modular_rag.__file__).parents[1]}")
    for name, (frames, thread) in seen.items():
        print(f"\n{name}: {len(frames)} kit frames at the model call, on thread {thread!r}")
        for frame in frames:
            print(f"  {frame}")


if __name__ == "__main__":
    main()
