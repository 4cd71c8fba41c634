"""Recursive pattern (Tree of Clarifications): grow a tree of clarifying or sub-questions breadth-first, answer
every node with retrieval, prune, and compose the final answer from the tree.

Level 0 is the question itself. Each level, ``clarify`` proposes up to ``branching`` children for every kept node of
the previous level; the children are retrieved and answered in parallel (``Send``); ``prune`` drops irrelevant,
duplicate or unanswered nodes. Growth stops at ``max_depth`` or ``max_nodes``; ``fuse`` composes the answer from the
kept nodes, citing their evidence.

With ``expand: hop`` (no LLM by default) a node's children are what the ``hop`` slot's operator leads to from the
node's best passages (``links``: the chunks they link to); ``fuse`` (``pairs``) ranks every passage of the tree, and
the answer is generated once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END, START
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import Unpack

from modular_rag.builder import BuildOptions, FlowBuilder, FlowSource, together, trace_and_ledger
from modular_rag.costs import Cost, CostContext, Span, context_for, slot_cost, total
from modular_rag.errors import ConfigError
from modular_rag.registry import Port, SlotSpec, register_pattern
from modular_rag.resolve import ResolvedFlow
from modular_rag.state import Hit, RAGState, TreeNode, evidence_of, pack_of, step_of

__all__ = ["build_recursive", "RecursiveParams", "SLOTS", "EXPAND", "NODE", "PRUNE", "FUSE", "HOP"]

EXPAND, NODE, PRUNE, FUSE, HOP = "expand", "node", "prune", "fuse", "hop"
CLARIFY, RETRIEVE, RERANK, CONTEXT, GENERATE = "clarify", "retrieve", "rerank", "context", "generate"

SLOTS = {
    CLARIFY: SlotSpec(
        Port.QUERY,
        default="decompose",
        default_params={"mode": "clarify"},
        optional=False,
        doc="proposes a node's children (its queries)",
    ),
    RETRIEVE: SlotSpec(Port.RETRIEVE, default="hybrid", optional=False, doc="per node (hop: the root's)"),
    HOP: SlotSpec(Port.HOP, default="links", optional=False, doc="expand: hop: what a node's passages lead to"),
    RERANK: SlotSpec(Port.REFINE, chain=True, doc="per node"),
    CONTEXT: SlotSpec(Port.CONTEXT, default="budget", doc="per node"),
    GENERATE: SlotSpec(Port.GENERATE, default="cited_answer", doc="per node (clarify); once, after fuse (hop)"),
    PRUNE: SlotSpec(Port.JUDGE, default="prune", chain=True, doc="drops nodes (verdicts with a target)"),
    FUSE: SlotSpec(
        Port.FUSE,
        default="llm_fusion",
        optional=False,
        doc="composes the answer from the tree (hop: pairs ranks its passages)",
    ),
}


class RecursiveParams(BaseModel):
    """Tree bounds."""

    model_config = ConfigDict(extra="forbid")

    expand: Literal["clarify", "hop"] = Field(
        "clarify",
        description="clarify: children are interpretations written from the node's passages (Tree of "
        "Clarifications); hop: children are what the hop slot's operator leads to from the "
        "node's passages (links: the chunks they name, no LLM)",
    )
    branching: int = Field(2, ge=1, le=6, description="B: children proposed per node (hop: passages followed)")
    max_depth: int = Field(2, ge=1, le=5, description="levels below the question")
    max_nodes: int = Field(7, ge=2, le=64, description="nodes in the whole tree, the question included")

    @field_validator("expand", mode="before")
    @classmethod
    def _hop_is_a_slot(cls, value: Any) -> Any:
        if value == "links":
            raise ValueError(
                "'links' is spelled 'hop' now: the children are what the hop slot's operator leads to "
                "from a node's passages, and its default is links; write params: {expand: hop}"
            )
        return value


def _kept(state: Mapping[str, Any], depth: int) -> list[TreeNode]:
    dropped = {v.get("target") for v in state.get("verdicts") or [] if v["decision"] == "stop" and v.get("target")}
    return [n for n in state.get("tree") or [] if n["depth"] == depth and n["node_id"] not in dropped]


def cost(flow: ResolvedFlow[RecursiveParams]) -> Cost:
    """Every node retrieves and answers; every expanded node costs a clarify call; pruning judges each node below the
    root (``self_verify``: one call per node); one fusion. Nodes: 1 to min(max_nodes, 1 + B + ... + B^max_depth)."""
    params = flow.params
    ctx = context_for(flow)
    if params.expand == "hop":  # the root retrieves; each expanded node follows its best passages once
        parents = min(params.max_nodes - 1, sum(params.branching**d for d in range(params.max_depth)))
        head = total(flow, [RETRIEVE, RERANK], CostContext(prefill=ctx.prefill))
        follow = total(
            flow,
            [HOP],
            CostContext(
                prefill=ctx.prefill,
                hop="follow",
                candidates=Span(0, params.branching),
                search=total(flow, [RETRIEVE], CostContext(prefill=ctx.prefill)),
            ),
        )
        fuse = slot_cost(flow, FUSE, ctx, default="pairs")
        return head + follow * Span(1, parents) + fuse + total(flow, [CONTEXT, GENERATE], ctx)
    reach = min(params.max_nodes, sum(params.branching**d for d in range(params.max_depth + 1)))
    parents = min(reach, sum(params.branching**d for d in range(params.max_depth)))
    per_node = total(flow, [RETRIEVE, RERANK, CONTEXT, GENERATE], CostContext(prefill=ctx.prefill))
    clarify = total(flow, [CLARIFY], CostContext(prefill=ctx.prefill))
    prune = total(flow, [PRUNE], CostContext(prefill=ctx.prefill))  # per node judged (the root is not)
    return (
        per_node * Span(1, reach) + clarify * Span(0, parents) + prune * Span(0, reach - 1) + slot_cost(flow, FUSE, ctx)
    )


def _hops(flow: FlowBuilder[RecursiveParams]) -> CompiledStateGraph:
    """expand: hop: the root retrieves; a node's children are what the hop slot's operator leads to from its best
    ``branching`` passages (links: the chunks they name, one link-table lookup per node, no LLM); ``fuse``
    (``pairs``) ranks every passage of the tree by the pair it makes with the passage that led to it; context and
    generate then answer once from that ranking."""
    params = flow.params
    root_search = flow.runner([RETRIEVE, RERANK], label=NODE + "[{branch}]")
    hop = flow.hop(HOP, flow.runner([RETRIEVE], label=EXPAND), node=EXPAND)
    if hop.follow is None:
        raise ConfigError(
            f"operators.{HOP}.name",
            f"{hop.name!r} does not start from passages; expand 'hop' needs a "
            "hop that follows a passage (its Hop has follow), such as links or evidence",
        )
    follow = hop.follow

    async def expand(state: Mapping[str, Any]) -> dict[str, Any]:
        tree = list(state.get("tree") or [])
        if not tree:
            return {"frontier": [{"node_id": "n0", "parent": None, "depth": 0, "question": state["query"]}], "step": 0}
        depth = step_of(state)
        room = params.max_nodes - len(tree)
        seen = {n["chunk_ids"][0] for n in tree if n.get("source") and n["chunk_ids"]}  # children already grown
        frontier: list[dict[str, Any]] = []
        runs: list[dict[str, Any]] = []
        for parent in _kept(state, depth):
            sources = list(parent.get("evidence") or [])[: params.branching]
            if room > 0:
                runs.append(
                    await follow({"query": state["query"], "candidates": sources, "filter": state.get("filter")})
                )
            for branch in runs[-1]["branches"] if room > 0 else ():
                source = branch["candidates"][0]["chunk_id"]
                for hit in branch["candidates"][1:]:
                    if room <= 0 or hit["chunk_id"] in seen:
                        continue
                    seen.add(hit["chunk_id"])
                    frontier.append(
                        {
                            "node_id": f"n{len(tree) + len(frontier)}",
                            "parent": parent["node_id"],
                            "depth": depth + 1,
                            "question": str(hit["metadata"].get("title") or ""),
                            "hit": hit,
                            "source": source,
                        }
                    )
                    room -= 1
        return {"frontier": frontier, "step": depth + 1, **trace_and_ledger(*runs)}

    def fan_out(state: RAGState) -> list[Send] | Literal["fuse"]:
        frontier = list(state.get("frontier") or [])
        if not frontier:
            return "fuse"
        return [
            Send(NODE, {"query": state["query"], "branch": i, "frontier": [f], "filter": state.get("filter")})
            for i, f in enumerate(frontier)
        ]

    async def node(state: Mapping[str, Any]) -> dict[str, Any]:
        spec = state["frontier"][0]
        if "hit" in spec:  # a child: the chunk its parent's passage names
            item = TreeNode(
                node_id=spec["node_id"],
                parent=spec["parent"],
                depth=spec["depth"],
                question=spec["question"],
                answer="",
                chunk_ids=[spec["hit"]["chunk_id"]],
                evidence=[spec["hit"]],
                source=spec["source"],
            )
            return {"tree": [item]}
        update = await root_search.acall(state)
        hits = list(update.get("candidates") or [])
        item = TreeNode(
            node_id=spec["node_id"],
            parent=None,
            depth=0,
            question=spec["question"],
            answer="",
            chunk_ids=[h["chunk_id"] for h in hits],
            evidence=hits[: params.branching],
        )
        return {"tree": [item], **trace_and_ledger(update)}

    def grow(state: RAGState) -> Literal["expand", "fuse"]:
        depth = step_of(state)
        full = len(state.get("tree") or []) >= params.max_nodes
        return "fuse" if depth >= params.max_depth or full or not _kept(state, depth) else "expand"

    flow.add_step(EXPAND, expand, operator=f"hop:{hop.name}")  # the searches a follow waits on: awaited
    flow.add_node(NODE, node)
    flow.edge(START, EXPAND)
    flow.branch(EXPAND, fan_out, [NODE, FUSE])
    tail = flow.optional(PRUNE, after=NODE, default="none")
    flow.add_slot(FUSE, default="pairs")
    flow.branch(tail, grow, {"expand": EXPAND, "fuse": FUSE})
    flow.chain([CONTEXT, GENERATE], start=FUSE)
    return flow.compile(loop_bound=params.max_depth + 1)  # a round per level of the tree


@register_pattern("recursive", slots=SLOTS, params=RecursiveParams, cost=cost)
def build_recursive(
    config: FlowSource,
    **options: Unpack[BuildOptions],
) -> CompiledStateGraph:
    """Build the recursive flow: expand -> node (parallel) -> prune, per level, then fuse.

    Args:
        config: A flow config with ``pattern: recursive``.
        **options: ``checkpointer``, ``providers``, ``threads``, ``output_schema``: see
            :class:`~modular_rag.builder.BuildOptions`.

    Returns:
        The compiled graph. Cost: per node one retrieval set and one generation; per expanded node one clarify
        call; one fusion call; at most ``max_nodes`` nodes.

    Example:
        >>> flow = build_recursive({"pattern": "recursive", "params": {"max_depth": 1, "max_nodes": 3},
        ...                         "providers": {"vectorstore": {"in_memory": True}}})
        >>> sorted(flow.get_graph().nodes)
        ['__end__', '__start__', 'expand', 'fuse', 'node', 'prune']
    """
    flow = FlowBuilder[RecursiveParams](config, "recursive", **options)
    params = flow.params
    if params.expand == "hop":
        return _hops(flow)
    clarify = flow.runner([CLARIFY], label=EXPAND)
    answer_node = flow.runner([RETRIEVE, RERANK, CONTEXT, GENERATE], label=NODE + "[{branch}]")

    async def expand(state: Mapping[str, Any]) -> dict[str, Any]:
        tree = list(state.get("tree") or [])
        if not tree:  # level 0: the question itself
            root = {"node_id": "n0", "parent": None, "depth": 0, "question": state["query"]}
            return {"frontier": [root], "step": 0}
        depth = step_of(state)
        room = params.max_nodes - len(tree)
        frontier: list[dict[str, Any]] = []
        runs: list[dict[str, Any]] = []
        parents = _kept(state, depth)
        while parents and room > 0:
            # the parents clarified together (awaited at once in async runs): as many as the room left surely takes,
            # each adding at most `branching` children, so none is asked that a one-by-one walk would not ask
            size = math.ceil(room / params.branching)
            wave, parents = parents[:size], parents[size:]
            # retrieval-augmented clarification: the children are written from the passages the parent retrieved
            updates = await together(
                [functools.partial(clarify.acall, {"query": p["question"], "evidence": pack_of(p)}) for p in wave]
            )
            for parent, update in zip(wave, updates, strict=True):
                runs.append(update)
                for question in update.get("queries", [])[: min(params.branching, room)]:
                    frontier.append(
                        {
                            "node_id": f"n{len(tree) + len(frontier)}",
                            "parent": parent["node_id"],
                            "depth": depth + 1,
                            "question": question,
                        }
                    )
                    room -= 1
        return {"frontier": frontier, "step": depth + 1, **trace_and_ledger(*runs)}

    def fan_out(state: RAGState) -> list[Send] | Literal["fuse"]:
        frontier = list(state.get("frontier") or [])
        if not frontier:
            return "fuse"
        return [
            Send(NODE, {"query": f["question"], "branch": i, "frontier": [f], "filter": state.get("filter")})
            for i, f in enumerate(frontier)
        ]

    async def node(state: Mapping[str, Any]) -> dict[str, Any]:
        spec = state["frontier"][0]
        update = await answer_node.acall(state)
        answer = update.get("answer") or {}
        pack = sorted(evidence_of(update), key=lambda e: e["ref"])  # what the node's answer cites, by [n]
        item = TreeNode(
            node_id=spec["node_id"],
            parent=spec["parent"],
            depth=spec["depth"],
            question=spec["question"],
            answer=answer.get("text", ""),
            chunk_ids=[h["chunk_id"] for h in update.get("candidates", [])],
            evidence=[
                Hit(
                    chunk_id=e["chunk_id"], text=e["text"], score=e["score"], channel="evidence", metadata=e["metadata"]
                )
                for e in pack
            ],
            citations=list(answer.get("citations") or []),
            refused=bool(answer.get("refused")),
        )
        return {"tree": [item], **trace_and_ledger(update)}

    def grow(state: RAGState) -> Literal["expand", "fuse"]:
        depth = step_of(state)
        full = len(state.get("tree") or []) >= params.max_nodes
        return "fuse" if depth >= params.max_depth or full or not _kept(state, depth) else "expand"

    flow.add_node(EXPAND, expand)  # async runs await a level's clarifications together, on the loop
    flow.add_node(NODE, node)  # ... and each node's retrieval and answer
    flow.edge(START, EXPAND)
    flow.branch(EXPAND, fan_out, [NODE, FUSE])
    tail = flow.optional(PRUNE, after=NODE)
    flow.add_slot(FUSE)
    flow.branch(tail, grow, {"expand": EXPAND, "fuse": FUSE})
    flow.edge(FUSE, END)
    return flow.compile(loop_bound=params.max_depth + 1)  # a round per level of the tree
