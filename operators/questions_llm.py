"""Test-set module, with a model: the LLM question maker and the closed-book check.

``llm`` asks the flow's configured chat model to write questions of four kinds from passages: ``single`` (one
passage), ``multi`` (two passages joined by a link: A mentions B's title), ``comparison`` (two passages, a question
comparing their subjects) and ``unanswerable`` (about a passage's topic, but not answered by it: no gold passage).
The model's answer is located in the gold passages; the ``answer_in_passage`` check drops a question whose answer
is not there, and ``closed_book`` drops one the model answers without any passage (answerable without retrieval).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from pydantic import Field

from modular_rag.providers import Providers
from modular_rag.questions import Passage, PassageSet, Question, QuestionCheck, QuestionMaker, Verdict
from modular_rag.registry import OperatorParams, Port, operator
from modular_rag.text import normalize_answer
from operators.questions import find_answer

__all__ = ["PROMPTS", "parse_question"]

PROMPTS = {
    "single": "Passage:\n{a}\n\nWrite one question that the passage answers, and its short answer copied from the "
    "passage. Reply in two lines:\nQuestion: ...\nAnswer: ...",
    "multi": "Passage 1:\n{a}\n\nPassage 2:\n{b}\n\nPassage 1 mentions {bridge}. Write one question that needs both "
    "passages: ask about a fact of passage 2, naming {bridge} only through what passage 1 says. Give its "
    "short answer copied from passage 2. Reply in two lines:\nQuestion: ...\nAnswer: ...",
    "comparison": "Passage 1:\n{a}\n\nPassage 2:\n{b}\n\nWrite one question that compares {ta} and {tb} (which is "
    "older, larger, first ...), and its short answer. Reply in two lines:\nQuestion: ...\nAnswer: ...",
    "unanswerable": "Passage:\n{a}\n\nWrite one question about the same topic that the passage does NOT answer. "
    "Reply in one line:\nQuestion: ...",
}
"""The prompt of each kind (``{a}``, ``{b}``: passage texts; ``{bridge}``, ``{ta}``, ``{tb}``: titles)."""
ANSWER_PROMPT = "{passages}\n\nQuestion: {question}\nAnswer with a few words copied from the passages.\nAnswer:"
"""Asked when the model wrote a question without its answer (small models often do)."""

_LINE = re.compile(r"^\s*(question|answer)\s*[:\-]\s*(.+?)\s*$", re.I | re.M)


def parse_question(reply: str) -> tuple[str, str]:
    """``(question, answer)`` from a reply in the prompts' ``Question: ... / Answer: ...`` form ("" when absent)."""
    found: dict[str, str] = {}
    for key, value in _LINE.findall(reply):
        found.setdefault(key.lower(), value.strip().strip('"'))
    return found.get("question", ""), found.get("answer", "").rstrip(".")


class LLMMakerParams(OperatorParams):
    kinds: list[str] = Field(
        ["single", "multi", "comparison", "unanswerable"],
        min_length=1,
        description="kinds to write, in turn: single, multi, comparison, unanswerable",
    )
    max_tokens: int = Field(96, gt=0, le=1024, description="completion cap per question")
    max_chars: int = Field(1200, ge=100, description="each passage is cut to this many characters in the prompt")
    ask_answer: bool = Field(
        True, description="when a reply has a question but no answer, ask for the answer in a second call"
    )


def _cut(p: Passage, max_chars: int) -> str:
    text = f"{p.title}\n{p.text}" if p.title else p.text
    return text if len(text) <= max_chars else text[:max_chars].rsplit(" ", 1)[0] + " ..."


def _linked(passages: PassageSet, i: int) -> tuple[str, int] | None:
    """A passage ``i`` mentions by its title (a single document): ``(the title, its position)``."""
    for alias, hit in passages.links.mentions(passages[i].text, exclude=i):
        if len({passages[j].doc or passages[j].id for j in hit}) == 1:
            return " ".join(alias), min(hit)
    return None


@operator("testset", "question_making", "llm", port=Port.QUESTION, needs_llm=True)
def llm_questions(params: LLMMakerParams, providers: Providers) -> QuestionMaker:
    """LLM questions from the configured model, one call each (a second for the answer when the reply has none):
    single-hop, multi-hop over two linked passages, comparison of two passages' subjects, and unanswerable (no gold
    passage); the model's answer is located in the gold passages (the ``answer_in_passage`` check drops it when it is
    not there). (LLM)"""
    for kind in params.kinds:
        if kind not in PROMPTS:
            raise ValueError(f"unknown question kind {kind!r}; kinds: {', '.join(PROMPTS)}")

    def make(passages: PassageSet, n: int, rng: random.Random) -> list[Question]:
        out: list[Question] = []
        order = passages.order(rng)
        for turn, i in enumerate(order):
            if len(out) >= n or turn >= 3 * n:
                break
            kind = params.kinds[len(out) % len(params.kinds)]
            a = passages[i]
            b = None
            slots = {"a": _cut(a, params.max_chars), "ta": a.title}
            if kind == "multi":
                link = _linked(passages, i)
                if link is None:
                    continue
                b = passages[link[1]]
                slots["bridge"] = link[0]
            elif kind == "comparison":
                b = passages[order[(turn + 1) % len(order)]]
                if b.id == a.id or not a.title or not b.title:
                    continue
            if b is not None:
                slots.update(b=_cut(b, params.max_chars), tb=b.title)
            reply = providers.llm.complete(
                PROMPTS[kind].format(**{"b": "", "bridge": "", "tb": "", **slots}), max_tokens=params.max_tokens
            ).text
            question, answer = parse_question(reply)
            if not question:
                question = reply.strip().splitlines()[0].strip() if reply.strip() else ""
            if not question:
                continue
            if not answer and kind != "unanswerable" and params.ask_answer:
                shown = "\n\n".join(slots[k] for k in ("a", "b") if slots.get(k))
                lines = (
                    providers.llm.complete(ANSWER_PROMPT.format(passages=shown, question=question), max_tokens=24)
                    .text.strip()
                    .splitlines()[0:1]
                )
                answer = lines[0].strip().strip('"').rstrip(".") if lines else ""
            gold = () if kind == "unanswerable" else (a.id,) if b is None else (a.id, b.id)
            answer = "" if kind == "unanswerable" else answer
            where = find_answer(answer, passages, gold)
            kind_type = "none" if not answer else "phrase"
            out.append(Question(question, kind, gold, answer, kind_type, where, {"reply": reply}))
        return out

    return make


class ClosedBookParams(OperatorParams):
    max_tokens: int = Field(32, gt=0, le=512, description="completion cap of the closed-book answer")


CLOSED_BOOK_PROMPT = "Answer in a few words, without explanation.\nQuestion: {question}\nAnswer:"


@operator("testset", "question_checking", "closed_book", port=Port.CHECK, needs_llm=True)
def closed_book(params: ClosedBookParams, providers: Providers) -> QuestionCheck:
    """Answerable without retrieval: ask the configured model each question with no passage, and drop the question
    when its reply contains the gold answer (it tests the model's memory, not retrieval). Questions without a short
    answer are kept unasked. (LLM)"""

    def check(questions: Sequence[Question], passages: PassageSet) -> list[Verdict]:
        out = []
        for q in questions:
            if not q.answer:
                out.append(Verdict(True))
                continue
            reply = providers.llm.complete(CLOSED_BOOK_PROMPT.format(question=q.text), max_tokens=params.max_tokens)
            if f" {normalize_answer(q.answer)} " in f" {normalize_answer(reply.text)} ":
                out.append(Verdict(False, "answerable without retrieval"))
            else:
                out.append(Verdict(True))
        return out

    return check
