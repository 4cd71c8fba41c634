"""Checkpointing and resume with ``SqliteSaver``: a run stopped after round 1 (a breakpoint, a human review, a
crash) resumes from its checkpoint by thread id, and the finished rounds are not run again."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command, interrupt

from modular_rag.errors import OperatorError
from patterns.iterative import ADVANCE, build_iterative
from tests.conftest import demo_flow, providers_config

QUESTION = "What does error code E07 mean on the e-bike display?"
ANSWERS = [
    "Error E07 means the speed sensor signal was lost [1].",
    "Realign the spoke magnet within 5 mm of the sensor [1].",
    "Also check that the sensor cable is not pinched [1].",
]


class ScriptedChat(FakeListChatModel):
    """A scripted chat model that counts its calls; call number ``fail_at`` raises once, like a dropped
    connection (the script does not advance on it)."""

    calls: int = 0
    fail_at: int = 0

    def _call(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ConnectionError("connection reset by peer")
        return super()._call(*args, **kwargs)


def iterative(demo_dir: Path, llm: Any, judge: Any = "none") -> dict[str, Any]:
    """Three rounds over the demo index; no judge ends the loop early unless one is given."""
    return demo_flow(
        demo_dir,
        "iterative",
        providers=providers_config(demo_dir, llm),
        params={"rounds": 3},
        operators={
            "retrieve": {"name": "hybrid", "params": {"k": 4}},
            "context": {"name": "budget", "params": {"max_chunks": 2}},
            "judge": judge,
        },
    )


def generations(result: Mapping[str, Any]) -> int:
    return sum(e["node"] == "generate" for e in result["trace"])


@pytest.mark.integration
def test_resume_after_a_breakpoint_does_not_repeat_finished_rounds(demo_dir: Path, tmp_path: Path) -> None:
    llm = ScriptedChat(responses=ANSWERS)
    db = str(tmp_path / "checkpoints.sqlite")
    thread = {"configurable": {"thread_id": "e07"}}
    with SqliteSaver.from_conn_string(db) as saver:
        flow = build_iterative(iterative(demo_dir, llm), checkpointer=saver)
        first = flow.invoke({"query": QUESTION}, thread, interrupt_after=[ADVANCE])  # a run-time breakpoint
        assert first["step"] == 1 and [r["answer"] for r in first["rounds"]] == ANSWERS[:1]
        assert flow.get_state(thread).next == ("retrieve",)  # round 2 is next
        assert llm.calls == 1
    # a fresh saver on the same file and a freshly built flow, as a new process would have
    with SqliteSaver.from_conn_string(db) as saver:
        flow = build_iterative(iterative(demo_dir, llm), checkpointer=saver)
        final = flow.invoke(None, thread)  # resume from the checkpoint
    assert final["step"] == 3 and [r["answer"] for r in final["rounds"]] == ANSWERS
    assert llm.calls == 3 and generations(final) == 3
    assert sum(e["llm_calls"] for e in final["ledger"]) == 3
    assert final["answer"]["text"] == ANSWERS[2]


@pytest.mark.integration
def test_a_human_review_interrupts_and_command_resume_decides(demo_dir: Path, tmp_path: Path) -> None:
    def review(state: Mapping[str, Any]) -> dict[str, Any]:
        step = int(state.get("step", 0))
        decision = interrupt({"round": step, "answer": state["answer"]["text"]}) if step == 1 else "continue"
        return {"verdicts": [{"judge": "review", "decision": decision, "reason": "human", "step": step}]}

    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        for decision, rounds in (("stop", 1), ("continue", 3)):
            llm = ScriptedChat(responses=ANSWERS)
            flow = build_iterative(iterative(demo_dir, llm, judge=review), checkpointer=saver)
            thread = {"configurable": {"thread_id": f"review-{decision}"}}
            paused = flow.invoke({"query": QUESTION}, thread)
            (pending,) = paused["__interrupt__"]
            assert pending.value == {"round": 1, "answer": ANSWERS[0]}
            final = flow.invoke(Command(resume=decision), thread)
            assert final["step"] == rounds and llm.calls == rounds and generations(final) == rounds
            assert [v["decision"] for v in final["verdicts"]] == [decision] + ["continue"] * (rounds - 1)


@pytest.mark.integration
def test_a_run_that_failed_in_round_2_resumes_there(demo_dir: Path, tmp_path: Path) -> None:
    llm = ScriptedChat(responses=ANSWERS, fail_at=2)
    thread = {"configurable": {"thread_id": "flaky"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        flow = build_iterative(iterative(demo_dir, llm), checkpointer=saver)
        with pytest.raises(OperatorError, match="connection reset by peer"):
            flow.invoke({"query": QUESTION}, thread)
        saved = flow.get_state(thread)
        assert saved.values["step"] == 1 and saved.next == ("generate",)  # round 2's retrieval is kept
        final = flow.invoke(None, thread)
    assert final["step"] == 3 and [r["answer"] for r in final["rounds"]] == ANSWERS
    assert llm.calls == 4 and generations(final) == 3  # 1 ok, 1 failed, then rounds 2 and 3
    searches = [e for e in final["trace"] if e["node"] == "retrieve" and e.get("operator") == "hybrid"]
    assert len(searches) == 3  # no retrieval was repeated (rounds 2 and 3 also trace their hop, hop:answer)
