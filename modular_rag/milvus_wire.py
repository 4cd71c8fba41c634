"""What :class:`~modular_rag.milvus.MilvusStore` sends to Milvus and reads back: the kit's collection schema
(:func:`collection_schema`), the requests and ranker of a hybrid search (:func:`hybrid_request`), search results as
hits (:func:`hits`), the release a server's version names (:func:`release`) and the gRPC status a failure carries
(:func:`grpc_status`), chunks as rows in batches a request takes (:func:`row_batches`). No connection and no state:
the store holds those."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from modular_rag.errors import MissingDependencyError, ProviderError
from modular_rag.milvus_terms import META_FIELD
from modular_rag.state import Hit

__all__ = [
    "BATCH_ROWS",
    "ID",
    "MAX_ID",
    "MAX_TEXT",
    "META",
    "OUTPUT",
    "SPARSE",
    "TEXT",
    "VECTOR",
    "collection_schema",
    "grpc_status",
    "hits",
    "hybrid_request",
    "pymilvus_module",
    "release",
    "row_batches",
]

ID, TEXT, META, VECTOR, SPARSE = "id", "text", META_FIELD, "vector", "sparse"
"""The fields of the kit's collections: chunk id (primary key), text, metadata JSON, vector, BM25 output."""
OUTPUT = [TEXT, META]
MAX_ID = 512
MAX_TEXT = 65_535  # bytes: Milvus's VARCHAR limit
BATCH_ROWS, _BATCH_BYTES = 1000, 16 * 1024 * 1024  # rows of one request, and about its most bytes


def pymilvus_module() -> Any:
    """The ``pymilvus`` module.

    Raises:
        MissingDependencyError: If it is not installed (naming the extra).
    """
    try:
        import pymilvus
    except ImportError as exc:
        raise MissingDependencyError(
            "vectorstore 'milvus' needs pymilvus (and milvus-lite for a local server): "
            "pip install 'modular-rag[milvus]'"
        ) from exc
    return pymilvus


class _NoMvccWarning(logging.Filter):
    """Milvus Lite returns no MVCC timestamp to query iterators; pymilvus then warns on every dump that it uses the
    client's clock instead, which is harmless for a full read. Only that one message is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "mvccTs" not in record.getMessage()


logging.getLogger("pymilvus.client.iterator.query_iterator").addFilter(_NoMvccWarning())


def collection_schema(
    pymilvus: Any, dim: int, analyzer: Mapping[str, Any], *, bm25: bool, k1: float, b: float
) -> tuple[Any, Any]:
    """The schema and index parameters of a kit collection of ``dim``-dim vectors; with ``bm25`` (a Milvus that
    has the BM25 function) the text field is analysed and a BM25 function fills a sparse field indexed for BM25,
    else (a Milvus before 2.5: neither analyzers nor sparse vectors) the text is a plain field."""
    schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(ID, pymilvus.DataType.VARCHAR, is_primary=True, max_length=MAX_ID)
    index = pymilvus.MilvusClient.prepare_index_params()
    index.add_index(field_name=VECTOR, index_type="AUTOINDEX", metric_type="COSINE")
    if bm25:
        schema.add_field(
            TEXT, pymilvus.DataType.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True, analyzer_params=dict(analyzer)
        )
    else:
        schema.add_field(TEXT, pymilvus.DataType.VARCHAR, max_length=MAX_TEXT)
    schema.add_field(META, pymilvus.DataType.JSON)
    schema.add_field(VECTOR, pymilvus.DataType.FLOAT_VECTOR, dim=dim)
    if bm25:
        schema.add_field(SPARSE, pymilvus.DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            pymilvus.Function(
                name="bm25",
                function_type=pymilvus.FunctionType.BM25,
                input_field_names=[TEXT],
                output_field_names=[SPARSE],
            )
        )
        index.add_index(
            field_name=SPARSE,
            index_type="SPARSE_INVERTED_INDEX",
            metric_type="BM25",
            params={"bm25_k1": k1, "bm25_b": b},
        )
    return schema, index


def hybrid_request(
    pymilvus: Any,
    vector: list[float],
    query: str,
    *,
    limit: int,
    expr: str,
    dense_params: Mapping[str, Any],
    fusion: str,
    weights: Sequence[float],
    rrf_k: int,
) -> tuple[list[Any], Any]:
    """The searches (dense, and BM25 unless the query is blank) and the ranker of one ``hybrid_search``: Milvus's
    RRFRanker for ``rrf``, its WeightedRanker (normalised scores) for ``weighted``."""
    reqs = [
        pymilvus.AnnSearchRequest(data=[vector], anns_field=VECTOR, param=dict(dense_params), limit=limit, expr=expr)
    ]
    if query.strip():  # BM25 of an empty query finds nothing; Milvus wants a text, so the channel is left out
        reqs.append(
            pymilvus.AnnSearchRequest(
                data=[query], anns_field=SPARSE, param={"metric_type": "BM25"}, limit=limit, expr=expr
            )
        )
    if fusion == "rrf":
        return reqs, pymilvus.RRFRanker(rrf_k)
    return reqs, pymilvus.WeightedRanker(*weights[: len(reqs)], norm_score=True)


def row_batches(
    ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], vectors: np.ndarray
) -> Iterator[list[dict[str, Any]]]:
    """The chunks as rows of the kit's collection (metadata without its None values), in batches of at most
    ``BATCH_ROWS`` rows and about 16 MB.

    Raises:
        ProviderError: If a chunk does not fit a row (id over 512 or text over 65,535 UTF-8 bytes).
    """
    rows: list[dict[str, Any]] = []
    size = 0
    for cid, text, meta, vec in zip(ids, texts, metadatas, vectors, strict=True):
        n = len(text.encode("utf-8"))
        if n > MAX_TEXT or len(cid.encode("utf-8")) > MAX_ID:
            raise ProviderError(
                f"chunk {cid[:80]!r} does not fit a Milvus row (text {n} bytes, at most "
                f"{MAX_TEXT}; id at most {MAX_ID}): use a smaller chunk size"
            )
        rows.append({ID: cid, TEXT: text, META: {k: v for k, v in meta.items() if v is not None}, VECTOR: vec.tolist()})
        size += n + 4 * len(vec)
        if len(rows) >= BATCH_ROWS or size >= _BATCH_BYTES:
            yield rows
            rows, size = [], 0
    if rows:
        yield rows


def release(version: str) -> tuple[int, int] | None:
    """The (major, minor) release a server's version string names (``v2.3.5-lite`` -> ``(2, 3)``), or None."""
    found = re.search(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def grpc_status(exc: BaseException) -> str | None:
    """The gRPC status name an error carries (``DEADLINE_EXCEEDED``), from the error or what it wraps."""
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "code", None)
        if callable(code):
            try:
                status = code()
            except Exception:  # a code() that needs arguments is not gRPC's
                pass
            else:
                return str(getattr(status, "name", status))
        seen = seen.__cause__ or seen.__context__
    return None


def hits(res: Any, channel: str, *, absolute: bool = False) -> list[Hit]:
    """Milvus search results (one query) as hits. Milvus Lite reports BM25 scores negated (smaller is better in its
    engine) where Milvus reports them positive; ``absolute`` gives both the same sign."""
    out: list[Hit] = []
    for h in res[0] if res else []:
        entity = h.get("entity") or {}
        score = float(h.get("distance", 0.0))
        out.append(
            Hit(
                chunk_id=str(h.get("id")),
                text=str(entity.get(TEXT) or ""),
                score=abs(score) if absolute else score,
                channel=channel,
                metadata=dict(entity.get(META) or {}),
            )
        )
    return out
