"""Retrieval module: dense (Chroma / any vector store), sparse (BM25) and hybrid retrievers, and ``given`` (the
candidates a shared retrieval already found).

Each reads ``queries`` (or ``query``), an optional Chroma ``where`` filter from state (``filter``) and/or from
its params, and writes ``candidates``. Several queries (multi-query, step-back) are retrieved one by one and
merged by reciprocal rank fusion. The candidate pool per channel (``pool``) is separate from the final ``k``.
With a Milvus store, BM25 runs in Milvus, and so does the hybrid's fusion when Milvus has it (``rrf`` with equal
weights, ``weighted``): one ``hybrid_search`` call per query, noted in the trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from modular_rag.costs import Cost, CostContext, Span, retrievals
from modular_rag.errors import ProviderError
from modular_rag.ingest import chunk_id
from modular_rag.milvus import MilvusStore
from modular_rag.multihop import HopParams, hop
from modular_rag.providers import Providers
from modular_rag.registry import Operator, OperatorParams, Port, operator, register_adapter
from modular_rag.state import Hit, queries_of
from modular_rag.trace import note, record
from operators.fusion import fuse

__all__ = ["queries_of", "where_of", "DenseParams", "BM25Params", "HybridParams", "GivenParams"]


def where_of(state: Mapping[str, Any], static: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The metadata filter: the state's ``filter`` and the operator's own, combined with ``$and``."""
    parts = [dict(f) for f in (state.get("filter"), static) if f]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}


class DenseParams(OperatorParams):
    k: int = Field(10, gt=0, le=1000, description="hits returned")
    filter: dict[str, Any] | None = Field(None, description="a Chroma where filter applied to every query")


class BM25Params(DenseParams):
    pass


class HybridParams(DenseParams):
    pool: int = Field(
        50,
        gt=0,
        le=5000,
        description="candidates taken from each channel before fusion (k can be up to 2 x pool: their union)",
    )
    fusion: Literal["rrf", "convex", "weighted"] = Field(
        "rrf", description="rrf: reciprocal rank; convex: min-max normalised scores; weighted: z-scored scores"
    )
    weights: tuple[float, float] = Field((1.0, 1.0), description="(dense, sparse) weights")
    rrf_k: int = Field(60, gt=0, description="RRF rank constant")

    @model_validator(mode="after")
    def _pool_covers_k(self) -> HybridParams:
        if 2 * self.pool < self.k:
            raise ValueError(
                f"k ({self.k}) can be at most 2 x pool ({2 * self.pool}): the union of the two channels' pools"
            )
        if min(self.weights) < 0 or sum(self.weights) <= 0:
            raise ValueError(f"weights must be >= 0 and not both 0 (got {self.weights})")
        return self


def needs_listing(providers: Providers, feature: str) -> None:
    """At build time: refuse ``feature`` on a LangChain vector store whose chunks the kit cannot list (see
    :meth:`~modular_rag.index.KnowledgeIndex.require_listing`); the kit's own stores are never opened for it."""
    from modular_rag.config import ChromaConfig, MilvusConfig

    if not isinstance(providers.config.vectorstore, ChromaConfig | MilvusConfig):
        providers.index.require_listing(feature)


def _multi(lists: list[list[Hit]], k: int) -> list[Hit]:
    return fuse(lists, "rrf", k=k, channel=lists[0][0]["channel"] if lists and lists[0] else "rrf")


def _retrieval_cost(channels: int) -> Any:
    def cost(params: DenseParams, ctx: CostContext) -> Cost:
        n = Span(1, 1) if ctx.query_embedding and channels == 1 else ctx.queries
        ctx.candidates = Span(1, params.k)
        return retrievals(n * channels)

    return cost


@operator("retrieval", "dense", "dense", port=Port.RETRIEVE, cost=_retrieval_cost(1))
def dense(params: DenseParams, providers: Providers) -> Operator:
    """Dense retrieval: cosine similarity of embeddings in the vector store (uses ``query_embedding`` if set)."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        where = where_of(state, params.filter)
        queries = queries_of(state)
        vector = state.get("query_embedding")
        if vector is not None:
            vec = np.asarray(vector, dtype=np.float32)
            hits = providers.index.search_dense(queries[0], params.k, where, vector=vec)
        else:
            hits = _multi([providers.index.search_dense(q, params.k, where) for q in queries], params.k)
        return {"candidates": hits}

    return run


@operator("retrieval", "sparse", "bm25", port=Port.RETRIEVE, cost=_retrieval_cost(1))
def bm25(params: BM25Params, providers: Providers) -> Operator:
    """BM25 over the sparse index (case folding, stop words, Snowball stemming)."""
    needs_listing(providers, "bm25 retrieval")

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        where = where_of(state, params.filter)
        lists = [providers.index.search_sparse(q, params.k, where) for q in queries_of(state)]
        return {"candidates": _multi(lists, params.k)}

    return run


@operator("retrieval", "hybrid", "hybrid", port=Port.RETRIEVE, cost=_retrieval_cost(2))
def hybrid(params: HybridParams, providers: Providers) -> Operator:
    """Dense + BM25, each taking ``pool`` candidates, fused by RRF, convex or weighted score fusion to ``k``.

    With a Milvus store that runs the fusion (``rrf`` with equal weights; ``weighted``, Milvus's WeightedRanker over
    its own score normalisation), both channels and the fusion are one Milvus call per query."""
    needs_listing(providers, "hybrid retrieval (its BM25 channel)")

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        where = where_of(state, params.filter)
        vector = state.get("query_embedding")
        queries = queries_of(state)
        store = providers.index.dense
        embedded: list[np.ndarray | None] = [None] * len(queries)  # None: the search embeds the query
        if vector is not None:
            embedded[0] = np.asarray(vector, dtype=np.float32)
        both = store if isinstance(store, MilvusStore) and providers.index.bm25_in_store else None  # both rank there
        milvus = both if both is not None and both.fuses(params.fusion, params.weights) else None
        if both is not None:
            note(
                f"hybrid: one Milvus hybrid_search per query (dense + BM25 and {params.fusion} fusion server-side)"
                if milvus
                else f"hybrid: dense and BM25 searched in Milvus, {params.fusion} fusion with weights "
                f"{params.weights} in the kit (Milvus has no such ranker)"
            )
        elif isinstance(store, MilvusStore):
            note(
                f"hybrid: dense searched in Milvus, BM25 over the kit's postings (bm25: {store.bm25}), "
                f"{params.fusion} fusion in the kit"
            )
        per_query = []
        for q, vec in zip(queries, embedded, strict=True):
            if milvus is not None:
                k = params.k if len(queries) == 1 else None
                per_query.append(_milvus_hybrid(milvus, providers, q, vec, where, params, k))
                continue
            dense_hits = providers.index.search_dense(q, params.pool, where, vector=vec, fill=False)
            sparse_hits = providers.index.search_sparse(q, params.pool, where, fill=False)
            per_query.append(
                fuse(
                    [dense_hits, sparse_hits],
                    params.fusion,
                    k=params.pool,
                    weights=params.weights,
                    rrf_k=params.rrf_k,
                    channel="hybrid",
                )
            )
        hits = per_query[0][: params.k] if len(per_query) == 1 else fuse(per_query, "rrf", k=params.k, channel="hybrid")
        return {"candidates": providers.index.fill(hits)}  # texts read for the hits kept, not for both pools

    return run


def _milvus_hybrid(
    store: MilvusStore,
    providers: Providers,
    query: str,
    vector: np.ndarray | None,
    where: dict[str, Any] | None,
    params: HybridParams,
    k: int | None,
) -> list[Hit]:
    """One Milvus ``hybrid_search``: ``pool`` candidates per channel fused to ``k`` (``pool`` when ``None``). Counted as
    two retrievals, one per channel, as the kit's own hybrid is."""
    if vector is None:
        if providers.index.encoder is None:
            raise ProviderError("hybrid retrieval needs an embeddings provider")
        vector = providers.index.encoder.encode_query(query)
    record(retrievals=2)
    return store.search_hybrid(
        vector,
        query,
        k or params.pool,
        pool=params.pool,
        fusion=params.fusion,
        weights=params.weights,
        rrf_k=params.rrf_k,
        where=where,
    )


def _langchain_retriever(obj: Any, providers: Providers) -> Operator:
    """A LangChain ``BaseRetriever`` in a retrieval slot: ``invoke(query)`` per query, documents become hits."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        lists = []
        for q in queries_of(state):
            record(retrievals=1)
            docs = obj.invoke(q)
            lists.append(
                [
                    Hit(
                        chunk_id=d.id or d.metadata.get("chunk_id") or chunk_id("retriever", d.page_content),
                        text=d.page_content,
                        score=float(d.metadata.get("score", 1.0 / (rank + 1))),
                        channel=type(obj).__name__,
                        metadata=dict(d.metadata),
                    )
                    for rank, d in enumerate(docs)
                ]
            )
        return {"candidates": lists[0] if len(lists) == 1 else fuse(lists, "rrf", channel=type(obj).__name__)}

    return run


def _register_retriever_adapter() -> None:
    from langchain_core.retrievers import BaseRetriever

    register_adapter(BaseRetriever, Port.RETRIEVE)(_langchain_retriever)


_register_retriever_adapter()


class GivenParams(OperatorParams):
    k: int = Field(10, gt=0, le=1000, description="the first k of the candidates already retrieved")


@operator(
    "retrieval", "shared", "given", port=Port.RETRIEVE, tags=("no_search",), cost=lambda params, ctx: retrievals(0)
)
def given(params: GivenParams, providers: Providers) -> Operator:
    """The candidates already in the state, cut to ``k``: a route of a conditional flow whose ``retrieve`` ran before
    the router (the router decided from that evidence; the route does not search again), or candidates the caller
    passes in. No retrieval."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        if "candidates" not in state:
            raise ProviderError(
                "retrieve: given reads the candidates already retrieved, and this run has none: give "
                "the conditional flow a retrieve operator (it runs before the router), or pass "
                "candidates in the input"
            )
        return {"candidates": list(state["candidates"])[: params.k]}

    return run


# ------------------------------------------------------------------------------------------------- multi-hop hops


def _link_hop_cost(params: HopParams, ctx: CostContext) -> Cost:
    ctx.candidates = Span(min(1, ctx.candidates.lo), params.k)
    return retrievals(1 + int(params.question_titles))


@operator("retrieval", "multi_hop", "link_hop", port=Port.REFINE, cost=_link_hop_cost)
def link_hop(params: HopParams, providers: Providers) -> Operator:
    """Document-graph hop, no LLM: add the chunks whose titles the question names, follow the titles the best
    first-hop chunks mention to the chunks they name, and rank by pairs (first chunk, the chunk it leads to)
    scored against the question (HopWeights). Two link-table lookups, counted as retrievals."""
    needs_listing(providers, "link_hop (the link table)")

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        return {"candidates": hop(providers, str(state.get("query", "")), list(state.get("candidates") or []), params)}

    return run
