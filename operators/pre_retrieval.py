"""Pre-retrieval module: query expansion, transformation and construction.

Operators read ``query`` and write ``queries`` (what the retriever searches with), and may write ``filter`` (a
Chroma ``where`` filter) or ``query_embedding``. Model output is cleaned and checked: an empty or runaway rewrite
falls back to the original query rather than searching with garbage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from modular_rag.providers import Providers
from modular_rag.registry import Operator, Port, operator
from operators.generation import clean_completion

__all__ = ["first_line", "usable_rewrite"]


class _P(BaseModel):
    model_config = ConfigDict(extra="forbid")


def first_line(text: str) -> str:
    """The first non-empty line of a completion, without list markers, labels or quotes."""
    for line in clean_completion(text).splitlines():
        line = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line)
        line = re.sub(r"^(search query|query|rewritten query|question)\s*[:\-]\s*", "", line, flags=re.IGNORECASE)
        line = line.strip().strip('"').strip("'").strip()
        if line:
            return line
    return ""


def usable_rewrite(rewrite: str, original: str, max_ratio: float = 4.0) -> bool:
    """Whether a model's rewrite is worth searching with: non-empty, not a runaway, not a refusal."""
    if not rewrite or len(rewrite) > max(60, max_ratio * len(original)):
        return False
    return not re.search(r"\b(sorry|as an ai|i cannot|i can't)\b", rewrite, re.IGNORECASE)


class RewriteParams(_P):
    keep_original: bool = Field(True, description="search with the original query as well as the rewrite")
    max_tokens: int = Field(48, gt=0, le=1024)


REWRITE_PROMPT = (
    "Rewrite the question below as one short search-engine query that keeps every name, code and number. "
    "Reply with the query only.\n\nQuestion: {query}\nQuery:"
)


@operator("pre_retrieval", "query_transformation", "rewrite", port=Port.QUERY, needs_llm=True)
def rewrite(params: RewriteParams, env: Providers) -> Operator:
    """LLM query rewrite (Rewrite-Retrieve-Read): a concise search query; falls back to the original if unusable."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        completion = env.llm.complete(REWRITE_PROMPT.format(query=query), max_tokens=params.max_tokens)
        new = first_line(completion.text)
        if not usable_rewrite(new, query) or new.lower() == query.lower():
            return {"queries": [query]}
        return {"queries": [query, new] if params.keep_original else [new]}

    return run
