"""Branching pattern: fan out in parallel with LangGraph ``Send``, then fuse.

* ``mode: queries`` (pre-retrieval branching, multi-query): ``expand`` writes N queries; each is retrieved in its
  own branch; ``fuse`` merges the ranked lists (``rrf`` or ``weighted``); one generation follows.
* ``mode: documents`` (post-retrieval branching, REPLUG): one retrieval, then one branch per retrieved document, in
  parallel; ``fuse`` combines them (``replug``: weighted by the softmax of query-document embedding similarities;
  at the token level, one next-token distribution per document and step, when the model allows it, else a weighted
  vote over one answer per document; or ``llm_fusion`` over per-document answers).
* ``mode: passages`` (multi-hop, no LLM by default): one retrieval, then one branch per first-hop passage, in
  parallel, each following its passage as the ``hop`` slot's operator says (``links``: the chunks the passage links
  to; ``evidence``: a search with the question and the passage); ``fuse`` (``pairs``) ranks every passage by the pair
  it makes with a branch's passage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END, START
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import Unpack

from modular_rag.builder import (
    BuildOptions,
    FlowBuilder,
    FlowSource,
    trace_and_ledger,
)
from modular_rag.costs import ZERO, Cost, CostContext, Span, context_for, llm_continues, slot_cost, total
from modular_rag.errors import ConfigError
from modular_rag.registry import Port, SlotSpec, get_operator, register_pattern
from modular_rag.resolve import ResolvedFlow
from modular_rag.state import Branch, Evidence, RAGState, queries_of
from modular_rag.validation import moved_to_slot

__all__ = [
    "build_branching",
    "BranchingParams",
    "SLOTS",
    "EXPAND",
    "RETRIEVE",
    "HOP",
    "BRANCH",
    "FUSE",
    "RERANK",
    "CONTEXT",
    "GENERATE",
]

EXPAND, RETRIEVE, HOP, BRANCH, FUSE = "expand", "retrieve", "hop", "branch", "fuse"
RERANK, CONTEXT, GENERATE = "rerank", "context", "generate"

SLOTS = {
    EXPAND: SlotSpec(Port.QUERY, default="multi_query", chain=True, doc="queries mode: writes the branch queries"),
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False, doc="per branch (queries) or once"),
    HOP: SlotSpec(Port.HOP, default="links", optional=False, doc="passages mode: how a branch follows its passage"),
    RERANK: SlotSpec(Port.REFINE, chain=True),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget", doc="queries mode"),
    GENERATE: SlotSpec(Port.GENERATE, default="cited_answer", doc="once, or per document (required there)"),
    FUSE: SlotSpec(Port.FUSE, default=None, optional=False, doc="rrf / weighted (queries); replug / llm_fusion"),
}
_DEFAULT_FUSE = {"queries": "rrf", "documents": "replug", "passages": "pairs"}
_FUSE_MAKES = {"queries": "candidates", "documents": "answer", "passages": "candidates"}


class BranchingParams(BaseModel):
    """Which branching, and how many branches."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["queries", "documents", "passages"] = Field(
        "queries",
        description="queries: pre-retrieval branching (multi-query); documents: post-retrieval (REPLUG); "
        "passages: one multi-hop branch per first-hop passage",
    )
    branches: int = Field(
        4, ge=1, le=16, description="queries fanned out, top documents generated from, or first-hop passages followed"
    )

    @model_validator(mode="before")
    @classmethod
    def _hop_is_a_slot(cls, data: Any) -> Any:
        """``hop_with`` and ``passage_words`` were params before the hop became a slot: refused, naming the line."""
        old = [key for key in ("hop_with", "passage_words") if isinstance(data, Mapping) and key in data]
        if not old:
            return data
        name = data.get("hop_with", "links")
        words = {"passage_words": data["passage_words"]} if name == "evidence" and "passage_words" in data else {}
        raise moved_to_slot(old, HOP, {"name": name, "params": words} if words else name, Port.HOP)


def _check_fuse(flow: FlowBuilder, mode: str) -> None:
    for spec in flow.config.slot(FUSE):
        if spec.object is not None or not spec.active or ":" in spec.name:
            continue
        info = get_operator(Port.FUSE, spec.name)
        if _FUSE_MAKES[mode] not in info.tags:
            fits = [m for m, tag in _FUSE_MAKES.items() if tag in info.tags]
            raise ConfigError(
                f"operators.{FUSE}.name",
                f"{spec.name!r} fuses {'/'.join(sorted(info.tags))}; mode "
                f"{mode!r} needs a {_FUSE_MAKES[mode]} fusion (it fits mode {', '.join(fits)})",
            )


def _answers_itself(flow: ResolvedFlow[BranchingParams], prefill: bool) -> bool:
    """Documents mode: whether the fusion writes the answer from the documents itself (REPLUG's token-level
    ensemble with a model that continues partial answers), so the branches only carry their document."""
    return flow.answers_itself(FUSE, prefill=prefill, default=_DEFAULT_FUSE["documents"])


def cost(flow: ResolvedFlow[BranchingParams]) -> Cost:
    """queries: expansion + N parallel retrievals + fusion + one generation; documents: one retrieval + N
    generations + fusion."""
    params = flow.params
    ctx = context_for(flow)
    fuse_default = _DEFAULT_FUSE[params.mode]
    if params.mode == "passages":
        head = total(flow, [RETRIEVE, RERANK], ctx)
        n = Span(min(params.branches, ctx.candidates.lo), min(params.branches, ctx.candidates.hi))
        one = CostContext(
            prefill=ctx.prefill,
            search=total(flow, [RETRIEVE], CostContext(prefill=ctx.prefill)),
            hop="follow",
            candidates=Span(1, 1),
        )
        per_branch = total(flow, [HOP], one)
        fuse = slot_cost(flow, FUSE, ctx, default=fuse_default)
        return head + per_branch * n + fuse + total(flow, [CONTEXT, GENERATE], ctx)
    if params.mode == "queries":
        expand = total(flow, [EXPAND], ctx)
        n = Span(min(params.branches, ctx.queries.lo), min(params.branches, ctx.queries.hi))
        per_branch = total(flow, [RETRIEVE], CostContext(prefill=ctx.prefill))
        fuse = slot_cost(flow, FUSE, ctx, default=fuse_default)
        return expand + per_branch * n + fuse + total(flow, [RERANK, CONTEXT, GENERATE], ctx)
    head = total(flow, [RETRIEVE, RERANK], ctx)
    n = Span(min(params.branches, ctx.candidates.lo), min(params.branches, ctx.candidates.hi))
    one_document = CostContext(evidence=Span(1, 1), prefill=ctx.prefill)
    per_doc = ZERO if _answers_itself(flow, ctx.prefill) else total(flow, [GENERATE], one_document)
    ctx.candidates = n
    return head + per_doc * n + slot_cost(flow, FUSE, ctx, default=fuse_default)


def _passages(flow: FlowBuilder[BranchingParams]) -> CompiledStateGraph:
    """mode: passages: retrieve once; one branch per first-hop passage follows it as the hop slot says (its links,
    or a search with the question and the passage); the fusion ranks every passage by the pair it makes with a
    branch's passage."""
    params = flow.params
    hop = flow.hop(HOP, flow.runner([RETRIEVE], label=BRANCH + "[{branch}]"), node=BRANCH)
    if hop.follow is None:
        raise ConfigError(
            f"operators.{HOP}.name",
            f"{hop.name!r} does not start from passages; mode 'passages' "
            "needs a hop that follows a passage (its Hop has follow), such as links or evidence",
        )
    follow_one = hop.follow

    async def follow(state: Mapping[str, Any]) -> dict[str, Any]:
        update = await follow_one(state)
        branch = update["branches"][0]
        return {"branches": [{**branch, "branch": state["branch"]}], **trace_and_ledger(update)}

    def fan_out(state: RAGState) -> list[Send] | Literal["fuse"]:
        hits = list(state.get("candidates") or [])[: params.branches]
        if not hits:
            return "fuse"
        return [
            Send(BRANCH, {"query": state["query"], "branch": i, "candidates": [h], "filter": state.get("filter")})
            for i, h in enumerate(hits)
        ]

    head = flow.chain([RETRIEVE, RERANK], end=None)
    flow.add_step(BRANCH, follow, operator=f"hop:{hop.name}")  # a search it waits on is awaited
    flow.branch(head[-1], fan_out, [BRANCH, FUSE])
    flow.add_slot(FUSE, default=_DEFAULT_FUSE[params.mode])
    flow.edge(BRANCH, FUSE)
    flow.chain([CONTEXT, GENERATE], start=FUSE)
    return flow.compile()


@register_pattern("branching", slots=SLOTS, params=BranchingParams, cost=cost)
def build_branching(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the branching flow (multi-query fan-out or per-document REPLUG fan-out, fused).

    Args:
        config: A flow config with ``pattern: branching``.
        **options: ``checkpointer``, ``providers``, ``threads``, ``output_schema``: see
            :class:`~modular_rag.builder.BuildOptions`.

    Returns:
        The compiled graph. Cost: queries mode = expand calls + N retrievals (in parallel) + 1 generation; documents
        mode = 1 retrieval + N generations (in parallel) + the fusion's calls.

    Example:
        >>> flow = build_branching({"pattern": "branching", "params": {"mode": "documents", "branches": 3},
        ...                         "providers": {"vectorstore": {"in_memory": True}}})
        >>> sorted(flow.get_graph().nodes)
        ['__end__', '__start__', 'branch', 'fuse', 'retrieve']
    """
    flow = FlowBuilder[BranchingParams](config, "branching", **options)
    params = flow.params
    _check_fuse(flow, params.mode)
    if params.mode == "queries":
        per_branch = flow.runner([RETRIEVE], label=BRANCH + "[{branch}]")

        async def branch(state: Mapping[str, Any]) -> dict[str, Any]:
            update = await per_branch.acall(state)
            hits = update.pop("candidates", [])
            item = Branch(branch=state["branch"], query=state["query"], weight=1.0, candidates=hits)
            return {"branches": [item], **trace_and_ledger(update)}

        def fan_out(state: RAGState) -> list[Send]:
            queries = queries_of(state)[: params.branches]
            return [
                Send(BRANCH, {"query": q, "branch": i, "filter": state.get("filter")}) for i, q in enumerate(queries)
            ]

        head = flow.chain([EXPAND], end=None)
        flow.add_node(BRANCH, branch)  # async runs await each branch's search on the loop
        flow.branch(head[-1] if head else START, fan_out, [BRANCH])
        flow.add_slot(FUSE, default=_DEFAULT_FUSE[params.mode])
        flow.edge(BRANCH, FUSE)
        flow.chain([RERANK, CONTEXT, GENERATE], start=FUSE)
        return flow.compile()

    if params.mode == "passages":
        return _passages(flow)

    # the token-level ensemble is the answer: its branches only carry their document, nothing is generated there
    per_document = (
        None
        if _answers_itself(flow.resolved, llm_continues(flow.env.config.llm))
        else flow.runner([GENERATE], label=BRANCH + "[{branch}]")
    )

    async def generate_one(state: Mapping[str, Any]) -> dict[str, Any]:
        hit = state["candidates"][0]
        item = Branch(branch=state["branch"], query=state["query"], weight=float(hit["score"]), candidates=[hit])
        if per_document is None:
            return {"branches": [item]}
        update = await per_document.acall(state)
        answered = {"answer": update["answer"]} if "answer" in update else {}  # none when it failed (on_error: skip)
        return {"branches": [{**item, **answered}], **trace_and_ledger(update)}

    def per_doc(state: RAGState) -> list[Send] | Literal["fuse"]:
        hits = list(state.get("candidates") or [])[: params.branches]
        if not hits:
            return "fuse"  # nothing retrieved: the fusion refuses
        # each document keeps the number the fused answer gives it, so a branch's citation points at its document
        return [
            Send(
                BRANCH,
                {
                    "query": state["query"],
                    "branch": i,
                    "candidates": [h],
                    "evidence": [
                        Evidence(
                            ref=i + 1, chunk_id=h["chunk_id"], text=h["text"], score=h["score"], metadata=h["metadata"]
                        )
                    ],
                },
            )
            for i, h in enumerate(hits)
        ]

    head = flow.chain([RETRIEVE, RERANK], end=None)
    flow.add_node(BRANCH, generate_one)  # async runs await each document's generation on the loop
    flow.branch(head[-1], per_doc, [BRANCH, FUSE])
    flow.add_slot(FUSE, default=_DEFAULT_FUSE[params.mode])
    flow.edge(BRANCH, FUSE)
    flow.edge(FUSE, END)
    return flow.compile()
