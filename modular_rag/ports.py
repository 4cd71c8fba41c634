"""The stage contracts an operator fits (ports): the paper's modules and sub-modules, each port's contract in words,
and the state keys each port may write."""

from __future__ import annotations

from enum import Enum

__all__ = ["MODULES", "Port", "PORT_CONTRACTS", "PORT_WRITES"]

MODULES: dict[str, tuple[str, ...]] = {
    "indexing": ("loading", "chunking"),
    "pre_retrieval": ("query_expansion", "query_transformation", "query_construction"),
    "retrieval": ("sparse", "dense", "hybrid", "multi_hop", "shared"),
    "post_retrieval": ("rerank", "selection", "compression", "context"),
    "generation": ("generator", "verification"),
    "orchestration": ("routing", "scheduling", "fusion"),
    "testset": ("question_making", "question_checking"),
}
"""The paper's modules and their sub-modules, in flow order; then ``testset``, which is no part of a flow: the
question makers and checks that make a labelled test set from a corpus (:mod:`modular_rag.eval.testset`)."""


class Port(str, Enum):  # noqa: UP042 - StrEnum would change str(Port.X) from "Port.X" to its value
    """The stage contract an operator fits: what it reads from state and what it writes."""

    LOAD = "load"
    CHUNK = "chunk"
    QUERY = "query"
    RETRIEVE = "retrieve"
    REFINE = "refine"
    """Post-retrieval: candidates -> candidates (rerank, select, compress)."""
    HOP = "hop"
    """How the next round (or branch, or tree level) searches: the state one left, and the flow's search, in; the
    queries and candidates of the next out (factories return a :class:`Hop`, not a plain operator)."""
    CONTEXT = "context"
    GENERATE = "generate"
    VERIFY = "verify"
    ROUTE = "route"
    JUDGE = "judge"
    FUSE = "fuse"
    QUESTION = "question"
    """Test sets: passages -> questions with their gold passages and answers (not a flow slot)."""
    CHECK = "check"
    """Test sets: questions -> the ones to keep (not a flow slot)."""


PORT_CONTRACTS: dict[Port, str] = {
    Port.LOAD: "path -> documents",
    Port.CHUNK: "documents -> chunks",
    Port.QUERY: "query -> queries (and filter / query_embedding)",
    Port.RETRIEVE: "queries -> candidates",
    Port.REFINE: "candidates -> candidates",
    Port.HOP: "state + search -> the next round's queries and candidates",
    Port.CONTEXT: "candidates -> evidence",
    Port.GENERATE: "evidence -> answer",
    Port.VERIFY: "answer + evidence -> answer",
    Port.ROUTE: "state -> route",
    Port.JUDGE: "state -> verdicts",
    Port.FUSE: "branches -> candidates or answer",
    Port.QUESTION: "passages -> questions",
    Port.CHECK: "questions -> questions kept",
}

PORT_WRITES: dict[Port, frozenset[str]] = {
    Port.LOAD: frozenset(),
    Port.CHUNK: frozenset(),
    Port.QUERY: frozenset({"queries", "filter", "query_embedding"}),
    Port.RETRIEVE: frozenset({"candidates"}),
    Port.REFINE: frozenset({"candidates"}),
    Port.HOP: frozenset({"queries", "candidates", "branches"}),
    Port.CONTEXT: frozenset({"evidence"}),
    Port.GENERATE: frozenset({"answer", "draft"}),
    Port.VERIFY: frozenset({"answer"}),
    Port.ROUTE: frozenset({"route", "route_confidence"}),
    Port.JUDGE: frozenset({"verdicts"}),
    Port.FUSE: frozenset({"candidates", "evidence", "answer"}),
    Port.QUESTION: frozenset(),
    Port.CHECK: frozenset(),
}
"""The state keys an operator of each port may write (its half of the stage contract)."""
