"""The compiled graph's frame, shared by every pattern: the empty flow graph with its input and output schemas,
the most supersteps a run can take (from which the recursion limit follows), and, on threads, the ``begin`` step
that starts every new question clean and the ``reply`` step that adds the turn to the conversation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langgraph.graph import END, START, StateGraph

from modular_rag.errors import ConfigError
from modular_rag.state import FlowInput, RAGState, fresh_question, pending_question

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

__all__ = ["BEGIN", "REPLY", "supersteps", "output_schema", "state_graph", "compile_graph"]


BEGIN = "begin"
"""The step a flow on threads starts every new question with (see :meth:`FlowBuilder.compile`)."""


REPLY = "reply"
"""The step a flow on threads ends every run with: the turn is added to ``messages``."""


def _begin(state: RAGState) -> dict[str, Any]:
    """Clear the previous question's state; a new human message is the question (``query``)."""
    update = fresh_question(state)
    question = pending_question(state)
    if question is not None and question != state.get("query"):
        update["query"] = question
    return update


def _reply(state: RAGState) -> dict[str, Any]:
    """Add the turn to the conversation: the question, unless the caller sent it as a message, and the answer as an
    ``AIMessage`` whose ``additional_kwargs["citations"]`` name each reference's chunk and title."""
    from langchain_core.messages import AIMessage, HumanMessage

    answer = state.get("answer")
    if not answer:
        return {}
    titles = {e["ref"]: e["metadata"].get("title") for e in state.get("evidence") or []}
    citations = [
        {"ref": c["ref"], "chunk_id": c["chunk_id"], "title": titles.get(c["ref"])}
        for c in answer.get("citations") or []
    ]
    turn = [] if pending_question(state) is not None else [HumanMessage(str(state.get("query", "")))]
    return {"messages": [*turn, AIMessage(answer["text"], additional_kwargs={"citations": citations})]}


def supersteps(graph: StateGraph, loop_bound: int = 1) -> int:
    """The most supersteps a run of ``graph`` can take when its loop runs at most ``loop_bound`` times, as
    LangGraph's ``recursion_limit`` counts them: the step that writes the input, the longest path from START to END
    without the loop's back edge, and the longest cycle through it once more for each further round. A fan-out
    (``Send``) to parallel branches is one superstep, as LangGraph runs them.

    Args:
        graph: The graph, with every edge added (conditional edges with their path maps).
        loop_bound: How many times the pattern's loop body runs at most (1: no loop).
    """
    succ: dict[str, list[str]] = {}
    for a, b in sorted(graph.edges):
        succ.setdefault(a, []).append(b)
    for starts, b in sorted(graph.waiting_edges):
        for a in starts:
            succ.setdefault(a, []).append(b)
    for source, branches in graph.branches.items():
        for spec in branches.values():
            succ.setdefault(source, []).extend((spec.ends or {}).values())
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}  # 1: on the DFS path, 2: done

    def visit(node: str) -> None:
        state[node] = 1
        for nxt in succ.get(node, []):
            if state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                visit(nxt)
        state[node] = 2

    visit(START)
    forward = {a: [b for b in bs if (a, b) not in back] for a, bs in succ.items()}
    memo: dict[tuple[str, str], float] = {}

    def longest(node: str, target: str) -> float:
        """Nodes on the longest forward path from ``node`` to ``target`` (both counted; START and END are not)."""
        if node == target:
            return 0.0 if node in (START, END) else 1.0
        key = (node, target)
        if key not in memo:
            best = max((longest(n, target) for n in forward.get(node, [])), default=float("-inf"))
            memo[key] = best + (0.0 if node in (START, END) else 1.0)
        return memo[key]

    steps = 1 + longest(START, END)
    cycle = max((longest(v, u) for u, v in back), default=0.0)
    return int(steps + max(loop_bound - 1, 0) * cycle)


def output_schema(schema: type[Any] | None) -> type[Any]:
    """The output schema a build asked for, or the whole state (see :attr:`BuildOptions.output_schema`)."""
    if schema is None:
        return RAGState
    keys = set(getattr(schema, "__annotations__", {}))
    unknown = sorted(keys - set(RAGState.__annotations__))
    if not keys or unknown:
        raise ConfigError(
            "output_schema",
            f"{getattr(schema, '__name__', schema)!r} must be a TypedDict of state keys"
            f"{'; unknown: ' + ', '.join(unknown) if unknown else ''}; state keys: "
            f"{', '.join(RAGState.__annotations__)}",
        )
    return schema


def state_graph(output_schema: type[Any]) -> StateGraph:
    """An empty flow graph: it carries :class:`RAGState`, takes :class:`FlowInput` and returns ``output_schema``."""
    return StateGraph(RAGState, input_schema=FlowInput, output_schema=output_schema)


def compile_graph(graph: StateGraph, checkpointer: Any, name: str, threaded: bool) -> CompiledStateGraph:
    """Compile ``graph``; on threads, route START through :data:`BEGIN` and every way to END through
    :data:`REPLY` (their edges and branches move there)."""
    if threaded:
        for edge in [e for e in graph.edges if START in e or END in e]:
            graph.edges.discard(edge)
            graph.edges.add((BEGIN if edge[0] == START else edge[0], REPLY if edge[1] == END else edge[1]))
        if START in graph.branches:
            graph.branches[BEGIN] = graph.branches.pop(START)
        for branches in graph.branches.values():
            for key, spec in branches.items():
                if spec.ends is not None and END in spec.ends.values():
                    ends = {k: REPLY if v == END else v for k, v in spec.ends.items()}
                    branches[key] = spec._replace(ends=ends)
        graph.add_node(BEGIN, _begin)
        graph.add_node(REPLY, _reply)
        graph.add_edge(START, BEGIN)
        graph.add_edge(REPLY, END)
    return graph.compile(checkpointer=checkpointer, name=name)
