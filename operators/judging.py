"""Orchestration / scheduling: judges decide whether a loop retrieves again (``continue``) or stops (``stop``).

Each judge appends a :class:`~modular_rag.state.Verdict` with a reason code and the loop step it judged; the loop
patterns stop when any verdict of the current step says ``stop``, and always at their configured bound.

* ``token_confidence`` - FLARE's rule: continue (retrieve) when any token's probability is below ``tau``. Needs
  token log-probabilities; a model that gives none raises :class:`~modular_rag.errors.JudgeError`.
* ``llm_judge`` - a prompted yes/no question (supported? complete? needs retrieval?), parsed robustly.
* ``prune`` / ``self_verify`` - per-node verdicts of the recursive pattern's tree (embedding rules; the model).
* ``reflection`` - Self-RAG's critique, prompted: supported by the passages (when there are any) and useful?
* ``budget`` - stop when steps, LLM calls or tokens reach a budget (from the run's ledger).
* ``no_progress`` - stop when the answer stopped changing between rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from modular_rag.answers import (
    DATA_RULE,
    JUDGE_PROMPT,
    SUPPORTED_QUESTION,
    ask_model_yes_no,
    evidence_of,
    format_evidence,
    parse_yes_no,
)
from modular_rag.costs import ZERO, llm
from modular_rag.errors import JudgeError
from modular_rag.providers import Providers
from modular_rag.registry import Operator, OperatorParams, Port, operator
from modular_rag.state import Verdict, step_of
from modular_rag.text import token_f1
from modular_rag.trace import totals

__all__ = ["verdict", "ask_yes_no", "CRITERIA"]


def verdict(
    judge: str, decision: Literal["stop", "continue"], reason: str, state: Mapping[str, Any], score: float | None = None
) -> dict[str, Any]:
    """The update a judge returns: one verdict for the state's current step."""
    v = Verdict(judge=judge, decision=decision, reason=reason, step=step_of(state))
    if score is not None:
        v["score"] = round(float(score), 6)
    return {"verdicts": [v]}


class TokenConfidenceParams(OperatorParams):
    tau: float = Field(0.4, gt=0.0, lt=1.0, description="minimum token probability to accept without retrieval")
    target: Literal["draft", "answer"] = Field("draft", description="judge the tentative draft or the answer")


@operator("orchestration", "scheduling", "token_confidence", port=Port.JUDGE, cost=lambda params, ctx: ZERO)
def token_confidence(params: TokenConfidenceParams, providers: Providers) -> Operator:
    """FLARE's gate: continue (retrieve) when any generated token's probability is below tau, else stop."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        if params.target == "draft":
            logprobs = list((state.get("draft") or {}).get("logprobs") or [])
            lowest = math.exp(min(logprobs)) if logprobs else None
        else:
            lowest = (state.get("answer") or {}).get("confidence")
        if lowest is None:
            raise JudgeError(
                f"token_confidence judge: the {params.target} carries no token log-probabilities; use a model that "
                "returns them (the local llama-server, or an OpenAI-compatible endpoint with logprobs: true) and "
                "a generator that asks for them, or another judge (llm_judge, no_progress, budget)"
            )
        if lowest < params.tau:
            return verdict("token_confidence", "continue", "low_confidence", state, lowest)
        return verdict("token_confidence", "stop", "confident", state, lowest)

    return run


CRITERIA: dict[str, tuple[str, Literal["yes", "no"]]] = {
    "supported": (SUPPORTED_QUESTION, "no"),
    "complete": ("Does the answer fully answer the question?", "no"),
    "useful": ("Is the answer useful for the question?", "no"),
    "needs_retrieval": ("Does answering the question need facts from documents (not general knowledge)?", "yes"),
}
"""Built-in yes/no questions and the answer that means ``continue``."""


class LLMJudgeParams(OperatorParams):
    criterion: Literal["supported", "complete", "useful", "needs_retrieval", "custom"] = Field(
        "supported", description="which yes/no question to ask"
    )
    question: str = Field("", description="the yes/no question when criterion is custom")
    continue_on: Literal["yes", "no"] | None = Field(None, description="reply that means continue (custom criterion)")
    on_unclear: Literal["stop", "continue"] = Field("stop", description="decision when the reply is neither yes nor no")
    max_tokens: int = Field(4, gt=0, le=64)


def _answer_text(state: Mapping[str, Any]) -> str:
    return str((state.get("answer") or {}).get("text") or (state.get("draft") or {}).get("text") or "")


def ask_yes_no(
    providers: Providers, state: Mapping[str, Any], ask: str, *, passages: bool, max_tokens: int = 4
) -> tuple[str | None, float | None]:
    """Ask the model a yes/no question about the state's question and answer (with the evidence as delimited data
    when ``passages``): ``(yes | no | None, P(yes) from the first token's alternatives, or None)``."""
    evidence = evidence_of(state) if passages else []
    context = f"{format_evidence(evidence)}\n{DATA_RULE}\n\n" if evidence else ""
    answer = _answer_text(state)
    prompt = JUDGE_PROMPT.format(
        context=context, query=state.get("query", ""), answer=f"Answer: {answer}" if answer else "", ask=ask
    )
    return ask_model_yes_no(providers, prompt, max_tokens=max_tokens)


def _judge_cost(params: LLMJudgeParams, ctx: Any) -> Any:
    # "supported" with no passages is not asked (nothing to support)
    return llm((0 if params.criterion == "supported" and ctx.evidence.lo == 0 else 1, 1))


@operator("orchestration", "scheduling", "llm_judge", port=Port.JUDGE, needs_llm=True, cost=_judge_cost)
def llm_judge(params: LLMJudgeParams, providers: Providers) -> Operator:
    """A prompted yes/no judge (supported / complete / useful / needs retrieval, or a custom question), read from the
    reply's first-token probabilities when available, else from its text; unclear replies follow on_unclear.
    ``supported`` with no passages is not asked: it stops (accepts) with reason ``supported:no_passages``."""
    if params.criterion == "custom":
        if not params.question or params.continue_on is None:
            raise JudgeError("llm_judge: criterion 'custom' needs both question and continue_on (yes or no)")
        ask, continue_on = params.question, params.continue_on
    else:
        ask, default = CRITERIA[params.criterion]
        continue_on = params.continue_on or default

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        if params.criterion == "supported" and not evidence_of(state):
            return verdict("llm_judge", "stop", "supported:no_passages", state)
        reply, p_yes = ask_yes_no(
            providers, state, ask, max_tokens=params.max_tokens, passages=params.criterion != "needs_retrieval"
        )
        if reply is None:
            return verdict("llm_judge", params.on_unclear, "unclear", state)
        decision: Literal["stop", "continue"] = "continue" if reply == continue_on else "stop"
        return verdict("llm_judge", decision, f"{params.criterion}:{reply}", state, p_yes)

    return run


class ReflectionParams(OperatorParams):
    supported: bool = Field(
        True, description="ask whether the answer is supported by the passages (IsSup); skipped when there are none"
    )
    useful: bool = Field(True, description="ask whether the answer is useful for the question (IsUse)")
    on_unclear: Literal["stop", "continue"] = Field("stop", description="decision when a reply is neither yes nor no")
    max_tokens: int = Field(4, gt=0, le=64)

    @model_validator(mode="after")
    def _asks_something(self) -> ReflectionParams:
        if not (self.supported or self.useful):
            raise ValueError("reflection needs supported or useful (or both) set to true")
        return self


def _reflection_cost(params: ReflectionParams, ctx: Any) -> Any:
    sup = int(params.supported)
    return llm((int(params.useful) + (sup if ctx.evidence.lo > 0 else 0), int(params.useful) + sup))


@operator("orchestration", "scheduling", "reflection", port=Port.JUDGE, needs_llm=True, cost=_reflection_cost)
def reflection(params: ReflectionParams, providers: Providers) -> Operator:
    """Self-RAG-style reflection, prompted: is the answer supported by the passages (IsSup, asked only when there
    are passages) and useful for the question (IsUse)? One verdict: continue (retrieve again) when either says no,
    stop (accept) when every question asked says yes."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        asked: list[tuple[str, str | None, float | None]] = []
        parts: list[str] = []
        if params.supported:
            if evidence_of(state):
                reply, p = ask_yes_no(
                    providers, state, CRITERIA["supported"][0], passages=True, max_tokens=params.max_tokens
                )
                asked.append(("supported", reply, p))
            else:
                parts.append("supported:no_passages")
        if params.useful:
            reply, p = ask_yes_no(providers, state, CRITERIA["useful"][0], passages=False, max_tokens=params.max_tokens)
            asked.append(("useful", reply, p))
        parts += [f"{name}:{reply or 'unclear'}" for name, reply, _ in asked]
        decisions = [
            params.on_unclear if reply is None else ("continue" if reply == "no" else "stop") for _, reply, _ in asked
        ]
        decision: Literal["stop", "continue"] = "continue" if "continue" in decisions else "stop"
        scores = [p for _, _, p in asked if p is not None]
        return verdict("reflection", decision, ",".join(parts), state, min(scores) if scores else None)

    return run


class BudgetParams(OperatorParams):
    max_steps: int | None = Field(None, gt=0, le=1000, description="stop at this loop step")
    max_llm_calls: int | None = Field(None, gt=0, description="stop when the run has made this many LLM calls")
    max_tokens: int | None = Field(None, gt=0, description="stop when prompt + completion tokens reach this")


@operator("orchestration", "scheduling", "budget", port=Port.JUDGE, cost=lambda params, ctx: ZERO)
def budget(params: BudgetParams, providers: Providers) -> Operator:
    """Stop when the loop step, the run's LLM calls or its tokens (from the ledger) reach a budget; else continue."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        spent = totals(state.get("ledger"))
        step = step_of(state)
        if params.max_steps is not None and step >= params.max_steps:
            return verdict("budget", "stop", "max_steps", state, step)
        if params.max_llm_calls is not None and spent["llm_calls"] >= params.max_llm_calls:
            return verdict("budget", "stop", "max_llm_calls", state, spent["llm_calls"])
        used = spent["prompt_tokens"] + spent["completion_tokens"]
        if params.max_tokens is not None and used >= params.max_tokens:
            return verdict("budget", "stop", "max_tokens", state, used)
        return verdict("budget", "continue", "within_budget", state)

    return run


class NoProgressParams(OperatorParams):
    threshold: float = Field(
        0.9, gt=0.0, le=1.0, description="token F1 between the last two answers that counts as unchanged"
    )


@operator("orchestration", "scheduling", "no_progress", port=Port.JUDGE, cost=lambda params, ctx: ZERO)
def no_progress(params: NoProgressParams, providers: Providers) -> Operator:
    """Stop when the answer stopped changing: token F1 of the last two rounds' answers >= threshold."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        rounds = list(state.get("rounds") or [])
        if len(rounds) < 2:
            return verdict("no_progress", "continue", "first_round", state)
        similarity = token_f1(rounds[-1]["answer"], rounds[-2]["answer"])
        if similarity >= params.threshold:
            return verdict("no_progress", "stop", "no_progress", state, similarity)
        return verdict("no_progress", "continue", "progress", state, similarity)

    return run


class PruneParams(OperatorParams):
    min_relevance: float = Field(
        0.25, ge=-1.0, le=1.0, description="drop a node whose question's cosine with the root question is below this"
    )
    max_similarity: float = Field(
        0.95, ge=0.0, le=1.0, description="drop a node whose question is this close to an earlier node's (duplicate)"
    )
    drop_unanswered: bool = Field(True, description="drop a node whose answer is a refusal")


@operator("orchestration", "scheduling", "prune", port=Port.JUDGE, cost=lambda params, ctx: ZERO)
def prune(params: PruneParams, providers: Providers) -> Operator:
    """Tree pruning judge: for each node of the newest level, ``stop`` (drop) when its question is irrelevant to the
    root question, duplicates an earlier node's, or its answer is a refusal; else ``continue`` (keep)."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        tree = list(state.get("tree") or [])
        level = max((n["depth"] for n in tree), default=0)
        newest = [n for n in tree if n["depth"] == level]
        earlier = [n for n in tree if n["depth"] < level]
        if not newest:
            return {"verdicts": []}
        root = providers.encoder.encode_query(str(state.get("query", "")))
        vectors = providers.encoder.encode([n["question"] for n in earlier + newest])
        out: list[Verdict] = []
        kept: list[int] = list(range(len(earlier)))
        for i, node in enumerate(newest, start=len(earlier)):
            relevance = float(vectors[i] @ root)
            duplicate = max((float(vectors[i] @ vectors[j]) for j in kept), default=0.0)
            decision: Literal["stop", "continue"]
            if node["depth"] > 0 and relevance < params.min_relevance:
                decision, reason = "stop", "irrelevant"
            elif node["depth"] > 0 and duplicate >= params.max_similarity:
                decision, reason = "stop", "duplicate"
            elif params.drop_unanswered and node.get("refused") and node["depth"] > 0:
                decision, reason = "stop", "unanswered"
            else:
                decision, reason = "continue", "kept"
                kept.append(i)
            out.append(
                Verdict(
                    judge="prune",
                    decision=decision,
                    reason=reason,
                    step=level,
                    target=node["node_id"],
                    score=round(relevance, 4),
                )
            )
        return {"verdicts": out}

    return run


class SelfVerifyParams(OperatorParams):
    on_unclear: Literal["stop", "continue"] = Field(
        "continue", description="decision when the reply is neither yes nor no (continue = keep the node)"
    )
    max_tokens: int = Field(4, gt=0, le=64)


SELF_VERIFY_PROMPT = (
    "{passages}Ambiguous question: {root}\nOne interpretation of it: {question}\nThe answer found for it: {answer}\n"
    "Is this interpretation a reasonable reading of the ambiguous question, with an answer the passages support? "
    "Reply with yes or no."
)


@operator(
    "orchestration", "scheduling", "self_verify", port=Port.JUDGE, needs_llm=True, cost=lambda params, ctx: llm((0, 1))
)
def self_verify(params: SelfVerifyParams, providers: Providers) -> Operator:
    """Tree of Clarifications' pruning by self-verification: each node of the newest level below the root is kept
    (``continue``) when the model says its interpretation is a reasonable reading of the question with an answer its
    own passages support, else dropped (``stop``). One call per node (its cost is per node); unanswered nodes and
    nodes an earlier judge dropped are not asked."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        from operators.fusion import pack_of

        tree = list(state.get("tree") or [])
        level = max((n["depth"] for n in tree), default=0)
        dropped = {v.get("target") for v in state.get("verdicts") or [] if v["decision"] == "stop" and v.get("target")}
        out: list[Verdict] = []
        for node in tree:
            if node["depth"] != level or level == 0 or node["node_id"] in dropped:
                continue
            if node.get("refused") or not node.get("answer"):
                out.append(
                    Verdict(
                        judge="self_verify", decision="stop", reason="unanswered", step=level, target=node["node_id"]
                    )
                )
                continue
            pack = pack_of(node)
            passages = f"{format_evidence(pack)}\n{DATA_RULE}\n\n" if pack else ""
            prompt = SELF_VERIFY_PROMPT.format(
                passages=passages, root=state.get("query", ""), question=node["question"], answer=node["answer"]
            )
            completion = providers.llm.complete(prompt, max_tokens=params.max_tokens, logprobs=True, top_logprobs=10)
            first = next((t for t in completion.tokens or () if t.token.strip()), None)
            reply, p_yes = parse_yes_no(completion.text, first.top if first is not None else ())
            decision: Literal["stop", "continue"] = (
                params.on_unclear if reply is None else "continue" if reply == "yes" else "stop"
            )
            v = Verdict(
                judge="self_verify",
                decision=decision,
                reason=f"verified:{reply or 'unclear'}",
                step=level,
                target=node["node_id"],
            )
            if p_yes is not None:
                v["score"] = round(float(p_yes), 6)
            out.append(v)
        return {"verdicts": out}

    return run
