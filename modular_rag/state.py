"""The one state schema every flow shares, and the stage contracts (ports) between operators.

The stages hand each other fixed shapes so that swapping an implementation never changes a port:

``Chunk`` (indexing) -> ``Hit`` list in ``candidates`` (retrieval, post-retrieval)
-> ``Evidence`` list in ``evidence`` (the context given to the model) -> ``Answer`` in ``answer`` (generation).

Keys that parallel branches, loops or every node write (``branches``, ``rounds``, ``tree``, ``verdicts``,
``trace``, ``ledger``) carry an append reducer, so LangGraph merges concurrent writes instead of raising
``InvalidUpdateError``; ``messages``, the conversation of a thread, carries LangGraph's ``add_messages`` (as in
``MessagesState``). State holds only data (LangChain messages are serialisable): models, clients and indexes are
bound to the operators when they are built, never stored here.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired

from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

__all__ = [
    "Chunk",
    "Hit",
    "Evidence",
    "Citation",
    "Answer",
    "Round",
    "Branch",
    "TreeNode",
    "Verdict",
    "Draft",
    "TraceEvent",
    "LedgerEntry",
    "RAGState",
    "FlowInput",
    "FlowOutput",
    "STATE_KEYS",
    "APPEND_KEYS",
    "INPUT_KEYS",
    "QUESTION_KEYS",
    "fresh_question",
    "pending_question",
    "history",
    "step_of",
    "queries_of",
    "evidence_of",
    "pack_of",
    "is_refusal",
    "REFUSAL",
    "should_stop",
    "trace_and_ledger",
]


class Chunk(TypedDict):
    """A unit of the corpus, as written to the indexes.

    ``chunk_id`` is derived from the document id and the chunk text, so re-indexing the same content adds nothing.
    """

    chunk_id: str
    text: str
    metadata: dict[str, Any]


class Hit(TypedDict):
    """A retrieved candidate: a chunk with the score and the channel (retriever) that produced it."""

    chunk_id: str
    text: str
    score: float
    channel: str
    metadata: dict[str, Any]


class Evidence(TypedDict):
    """One numbered entry of the evidence pack: the context the generator sees, cited as ``[ref]``."""

    ref: int
    chunk_id: str
    text: str
    score: float
    metadata: dict[str, Any]


class Citation(TypedDict):
    """A link from the answer to an evidence entry. ``method`` is ``model`` (the model wrote ``[ref]``),
    ``attributed`` (the kit matched an answer sentence to the evidence after generation) or ``quoted`` (an extractive
    answer quoting the entry). ``verdict`` is the attribution check's: does the entry support the sentences citing
    it (``supported``) or not (``unsupported``, with ``reason``)."""

    ref: int
    chunk_id: str
    method: Literal["model", "attributed", "quoted"]
    verdict: NotRequired[Literal["supported", "unsupported"]]
    reason: NotRequired[str]


class Answer(TypedDict):
    """The generation stage's output.

    ``supported`` is the share of the answer's sentences the attribution check found supported by what they cite;
    ``unsupported`` lists the others. ``source`` says who wrote the text: the ``model``, or the kit quoting the
    evidence (``extractive``, with the sentence it quoted in ``quote``). ``reason`` says why an answer was refused
    or marked unsupported.
    """

    text: str
    citations: list[Citation]
    refused: bool
    unsupported: NotRequired[list[str]]
    supported: NotRequired[float]
    source: NotRequired[Literal["model", "extractive"]]
    quote: NotRequired[str]
    reason: NotRequired[str]
    confidence: NotRequired[float]
    flags: NotRequired[list[str]]
    """Warnings a reader must see with the answer: a cited entry holds text that reads as an instruction to a model
    (a planted "ignore the previous instructions ..."), so the answer may repeat an attack rather than inform."""


class Round(TypedDict):
    """One round of a loop pattern (iterative, adaptive): the query used and what it produced."""

    step: int
    query: str
    answer: str
    chunk_ids: list[str]


class Branch(TypedDict):
    """The output of one parallel branch (a sub-query's retrieval, or a per-document generation)."""

    branch: int
    query: str
    weight: float
    candidates: list[Hit]
    answer: NotRequired[Answer]
    token_logprobs: NotRequired[list[float]]


class TreeNode(TypedDict):
    """A node of the recursive pattern's tree of clarifications: its question, its answer, the evidence pack it was
    answered from (``evidence``, in reference order: the answer's ``[n]`` is ``evidence[n - 1]``) and the answer's
    citations into that pack. A node grown by following a link names the chunk that mentions it (``source``)."""

    node_id: str
    parent: str | None
    depth: int
    question: str
    answer: str
    chunk_ids: list[str]
    evidence: NotRequired[list[Hit]]
    citations: NotRequired[list[Citation]]
    refused: NotRequired[bool]
    source: NotRequired[str]


class Verdict(TypedDict):
    """A judge's decision: ``stop`` or ``continue``, with a reason code (``confident``, ``budget``, ...).

    In loops, ``continue`` means "retrieve / iterate again" and ``stop`` means "accept". A pruning judge gives
    one verdict per tree node, naming it in ``target`` (``stop`` = drop the node).
    """

    judge: str
    decision: Literal["stop", "continue"]
    reason: str
    score: NotRequired[float]
    step: NotRequired[int]
    target: NotRequired[str]


class Draft(TypedDict):
    """A tentative generation with its token log-probabilities (adaptive / FLARE)."""

    text: str
    tokens: list[str]
    logprobs: list[float]
    done: bool


class TraceEvent(TypedDict):
    """What one node did: name, operator, timing, a short summary of what it read and wrote, status."""

    node: str
    operator: str
    status: Literal["ok", "skipped", "error"]
    start: float
    ms: float
    summary: str
    error: NotRequired[str]


class LedgerEntry(TypedDict):
    """Cost of one node run: LLM calls and tokens (from the model's usage metadata), retrievals, embeddings."""

    node: str
    operator: str
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    retrievals: int
    embed_calls: int
    cache_hits: int
    ms: float


class FlowInput(TypedDict, total=False):
    """What a caller sends a flow (the graph's input schema, which LangGraph Studio shows as its form): a question
    (``query``), optionally a metadata ``filter``, or chat style ``messages`` (on a thread the newest human message
    is the question); ``candidates`` already retrieved, for a flow whose ``retrieve`` is ``given`` (a conditional
    flow hands its routes the retrieval it made before the router)."""

    query: str
    filter: dict[str, Any] | None
    messages: Annotated[list[AnyMessage], add_messages]
    candidates: list[Hit]


class FlowOutput(TypedDict, total=False):
    """What the LangGraph Server graphs return from a run (their output schema, which LangGraph Studio shows): the
    question, the answer with its citations, the evidence they point into, the candidates (a retrieval-only flow's
    result), the conversation, and the run's trace and cost ledger. ``build_flow(config, output_schema=FlowOutput)``
    builds a flow that returns it; by default a flow returns its whole state.

    The working state (queries, rounds, branches, tree, verdicts, drafts, ...) stays in the thread's checkpoint:
    ``flow.get_state({"configurable": {"thread_id": ...}}).values``."""

    query: str
    answer: Answer
    evidence: list[Evidence]
    candidates: list[Hit]
    messages: Annotated[list[AnyMessage], add_messages]
    trace: Annotated[list[TraceEvent], operator.add]
    ledger: Annotated[list[LedgerEntry], operator.add]


class RAGState(TypedDict, total=False):
    """The state every pattern's graph carries. Operators return partial updates of it.

    Input is ``{"query": ...}`` (optionally ``filter``), or chat style ``{"messages": [HumanMessage(...)]}``, or
    both; on a thread the flow's first step takes the question from a new human message. Stage ports: ``queries``
    (pre-retrieval output), ``candidates`` (retrieval / post-retrieval), ``evidence`` (context building), ``answer``
    (generation).
    """

    # input
    query: str
    filter: dict[str, Any] | None
    # conversation: the thread's turns, kept across questions
    messages: Annotated[list[AnyMessage], add_messages]
    # pre-retrieval
    queries: list[str]
    query_embedding: list[float] | None
    # retrieval / post-retrieval
    candidates: list[Hit]
    evidence: list[Evidence]
    # generation
    answer: Answer
    draft: Draft
    # orchestration
    route: str
    route_confidence: float
    step: int
    branch: int
    rounds: Annotated[list[Round], operator.add]
    branches: Annotated[list[Branch], operator.add]
    tree: Annotated[list[TreeNode], operator.add]
    frontier: list[dict[str, Any]]
    verdicts: Annotated[list[Verdict], operator.add]
    # observability
    trace: Annotated[list[TraceEvent], operator.add]
    ledger: Annotated[list[LedgerEntry], operator.add]


STATE_KEYS: frozenset[str] = frozenset(RAGState.__annotations__)
"""Every key of :class:`RAGState`."""

APPEND_KEYS: frozenset[str] = frozenset({"rounds", "branches", "tree", "verdicts", "trace", "ledger"})
"""Keys with an append reducer: an update adds to them, never replaces them."""

INPUT_KEYS: frozenset[str] = frozenset({"query", "filter", "messages"})
"""Keys the caller writes: a question, its metadata filter, the conversation. On a thread (a checkpointed
conversation) a ``filter`` stays until the caller replaces it or sets it to ``None``; ``messages`` grows by a
question and its answer per turn."""

QUESTION_KEYS: frozenset[str] = STATE_KEYS - INPUT_KEYS
"""Keys that belong to one question: everything the flow derives from it (queries, candidates, answer, loop
counters, branches, tree, verdicts, trace, ledger)."""


def fresh_question(state: Mapping[str, Any]) -> dict[str, Any]:
    """The update that clears what an earlier question on the same thread left in ``state``: append keys are
    overwritten with an empty list (bypassing their reducer), the other per-question keys are set to ``None``.
    Empty for a fresh state."""
    from langgraph.types import Overwrite

    update: dict[str, Any] = {}
    for key in sorted(QUESTION_KEYS):
        if state.get(key) in (None, [], {}):
            continue
        update[key] = Overwrite([]) if key in APPEND_KEYS else None
    return update


def pending_question(state: Mapping[str, Any]) -> str | None:
    """The text of the caller's new chat message: the last message when it is a human one (not answered yet),
    else ``None``."""
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    return last.text if isinstance(last, BaseMessage) and last.type == "human" else None


def history(state: Mapping[str, Any]) -> list[BaseMessage]:
    """The conversation before the question being answered: ``messages`` without a pending question."""
    messages = list(state.get("messages") or [])
    return messages[:-1] if pending_question(state) is not None else messages


def step_of(state: Mapping[str, Any]) -> int:
    """The loop counter of a state: ``step``, 0 before the first round (or when unset)."""
    return int(state.get("step", 0) or 0)


def queries_of(state: Mapping[str, Any]) -> list[str]:
    """The queries a state retrieves with: ``queries`` when a pre-retrieval operator wrote them, else ``[query]``."""
    queries = [q for q in state.get("queries") or [] if isinstance(q, str) and q.strip()]
    return queries or [str(state.get("query", ""))]


def evidence_of(state: Mapping[str, Any], default_k: int = 5) -> list[Evidence]:
    """The evidence of a state: its evidence pack, or (when no context builder ran) its top ``default_k``
    candidates numbered as evidence."""
    evidence = state.get("evidence")
    if evidence:
        return list(evidence)
    hits: Sequence[Hit] = state.get("candidates") or []
    return [
        Evidence(ref=i + 1, chunk_id=h["chunk_id"], text=h["text"], score=h["score"], metadata=dict(h["metadata"]))
        for i, h in enumerate(hits[:default_k])
    ]


def pack_of(node: Mapping[str, Any]) -> list[Evidence]:
    """A tree node's evidence pack, numbered as its answer cites it (``evidence[n - 1]`` is ``[n]``)."""
    return [
        Evidence(
            ref=i + 1,
            chunk_id=h["chunk_id"],
            text=h["text"],
            score=float(h.get("score", 0.0)),
            metadata=dict(h["metadata"]),
        )
        for i, h in enumerate(node.get("evidence") or [])
    ]


REFUSAL = "I don't know: the provided documents do not contain the answer."
"""The answer a flow gives when its evidence does not contain one."""

_REFUSAL_RE = re.compile(
    r"\b(i (do not|don't|dont) know|(not|no) (contained|mentioned|found|information|answer) (in|about)"
    r"|do(es)? not (contain|mention|say)|cannot (answer|find)|can't (answer|find)|unable to (answer|find))\b",
    re.IGNORECASE,
)


def is_refusal(text: str) -> bool:
    """Whether an answer says the evidence does not contain the answer (or says nothing)."""
    return not text.strip() or bool(_REFUSAL_RE.search(text[:200]))


def should_stop(state: Mapping[str, Any]) -> bool:
    """Whether a judge said the loop should end now: any loop verdict (not a per-node pruning verdict, which has a
    ``target``) given at the current step says ``stop``."""
    step = step_of(state)
    return any(
        v.get("step", step) == step and v["decision"] == "stop" and not v.get("target")
        for v in state.get("verdicts") or []
    )


def trace_and_ledger(*updates: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The ``trace`` and ``ledger`` entries of operator runs, concatenated in order: what a node that ran operators
    itself (a pattern's step, a hop's searches) returns for them, next to its other keys.

    Args:
        *updates: The runs' updates, each with ``trace`` and ``ledger`` lists.

    Returns:
        ``{"trace": [...], "ledger": [...]}`` (empty lists for no updates).
    """
    return {key: [item for update in updates for item in update.get(key, [])] for key in ("trace", "ledger")}
