"""The kit's terms in Milvus's: its BM25 analysis as a Milvus analyzer (:func:`milvus_analyzer`, and what Milvus Lite
keeps of it, :func:`lite_analyzer`), and its Chroma-style ``where`` filters as Milvus boolean expressions over the
metadata JSON (:func:`where_to_expr`). Pure translation: nothing here talks to Milvus
(:class:`~modular_rag.milvus.MilvusStore` does)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from modular_rag.errors import ConfigError
from modular_rag.text import ENGLISH_STOPWORDS

__all__ = ["META_FIELD", "milvus_analyzer", "lite_analyzer", "where_to_expr"]

META_FIELD = "metadata"
"""The JSON field of a chunk's metadata in the kit's Milvus collections."""


# ---------------------------------------------------------------------------------------------------------- analyzer


def milvus_analyzer(stemmer: str = "english", stopwords: str = "english") -> dict[str, Any]:
    """Milvus ``analyzer_params`` closest to the kit's BM25 analysis (:class:`~modular_rag.text.Analyzer`):
    the standard tokenizer, lower-casing, ASCII folding, the kit's English stop words and Snowball English stemming
    (the last two as ``providers.sparse.stopwords`` / ``stemmer`` ask).

    Milvus Lite applies only the tokenizer, lower-casing and stop words; :class:`~modular_rag.milvus.MilvusStore`
    drops the other filters when it creates a collection there (and says so in its ``describe``).

    Args:
        stemmer: ``"english"`` or ``"none"``.
        stopwords: ``"english"`` or ``"none"``.
    """
    filters: list[Any] = ["lowercase", "asciifolding"]
    if stopwords == "english":
        filters.append({"type": "stop", "stop_words": sorted(ENGLISH_STOPWORDS)})
    if stemmer == "english":
        filters.append({"type": "stemmer", "language": "english"})
    return {"tokenizer": "standard", "filter": filters}


def lite_analyzer(params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The part of ``params`` Milvus Lite applies (tokenizer, lower-casing, stop words) and the filters it would
    silently ignore."""
    kept: list[Any] = []
    dropped: list[str] = []
    for f in params.get("filter") or []:
        kind = f if isinstance(f, str) else f.get("type") if isinstance(f, Mapping) else None
        if kind in ("lowercase", "stop"):
            kept.append(f)
        else:
            dropped.append(str(kind))
    out = {k: v for k, v in params.items() if k != "filter"}
    if kept:
        out["filter"] = kept
    return out, dropped


# ----------------------------------------------------------------------------------------------------------- filters

_COMPARISONS = {"$eq": "==", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_OPERATORS = (*_COMPARISONS, "$in", "$nin")


def where_to_expr(where: Mapping[str, Any], *, field: str = META_FIELD) -> str:
    """Translate a Chroma-style ``where`` filter into a Milvus boolean expression over the metadata JSON field,
    with the semantics of :func:`~modular_rag.index.matches_where`: ``{"year": {"$gte": 2020}}`` becomes
    ``metadata["year"] >= 2020``; a chunk without the key fails every comparison but ``$ne`` and ``$nin``.

    Supported: ``{key: value}`` (equality), ``$eq $ne $gt $gte $lt $lte $in $nin`` on strings, numbers and booleans,
    and ``$and`` / ``$or`` over lists of filters (several keys in one mapping are and-ed).

    Args:
        where: The filter.
        field: The JSON field holding the metadata.

    Raises:
        ConfigError: If the filter uses an operator, a value or a shape that has no translation (the message names
            the part, under ``filter``, and what is allowed).
    """
    return _clause(where, "filter", field)


def _clause(where: Any, path: str, field: str) -> str:
    if not isinstance(where, Mapping) or not where:
        raise ConfigError(path, f"a filter is a non-empty mapping such as {{'year': {{'$gte': 2020}}}} (got {where!r})")
    parts: list[str] = []
    for key, cond in where.items():
        if key in ("$and", "$or"):
            if not isinstance(cond, list | tuple) or not cond:
                raise ConfigError(f"{path}.{key}", f"takes a non-empty list of filters (got {cond!r})")
            subs = [_clause(c, f"{path}.{key}[{i}]", field) for i, c in enumerate(cond)]
            parts.append(subs[0] if len(subs) == 1 else "(" + f" {key[1:]} ".join(subs) + ")")
        elif not isinstance(key, str) or key.startswith("$"):
            raise ConfigError(path, f"unknown logical operator {key!r}; logical operators: $and, $or")
        elif isinstance(cond, Mapping):
            if not cond:
                raise ConfigError(f"{path}.{key}", f"an empty condition; operators: {', '.join(_OPERATORS)}")
            parts.extend(
                _compare(f"{field}[{json.dumps(key, ensure_ascii=False)}]", op, value, f"{path}.{key}")
                for op, value in cond.items()
            )
        else:
            parts.append(_compare(f"{field}[{json.dumps(key, ensure_ascii=False)}]", "$eq", cond, f"{path}.{key}"))
    return parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"


def _compare(ref: str, op: str, value: Any, path: str) -> str:
    if op in ("$in", "$nin"):
        if not isinstance(value, list | tuple) or not value:
            raise ConfigError(f"{path}.{op}", f"takes a non-empty list of values (got {value!r})")
        # Milvus Lite refuses `json["key"] in [...]`; equalities or-ed mean the same on every Milvus
        any_of = " or ".join(f"{ref} == {_literal(v, f'{path}.{op}')}" for v in value)
        return f"({any_of})" if op == "$in" else f"({ref} is null or not ({any_of}))"
    if op not in _COMPARISONS:
        raise ConfigError(path, f"unknown operator {op!r}; operators: {', '.join(_OPERATORS)}")
    literal = _literal(value, f"{path}.{op}")
    if op == "$ne":
        return f"({ref} is null or {ref} != {literal})"
    return f"{ref} {_COMPARISONS[op]} {literal}"


def _literal(value: Any, path: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    raise ConfigError(path, f"values are strings, finite numbers or booleans (got {value!r})")
