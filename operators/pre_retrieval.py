"""Pre-retrieval module: query expansion, transformation and construction.

Operators read ``query`` and write ``queries`` (what the retriever searches with), and may write ``filter`` (a
Chroma ``where`` filter) or ``query_embedding``. Model output is cleaned and checked: an empty or runaway rewrite
falls back to the original query rather than searching with garbage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from modular_rag.providers import Providers
from modular_rag.registry import Operator, Port, operator
from operators.generation import clean_completion

__all__ = ["first_line", "usable_rewrite", "question_lines", "MULTI_QUERY_STYLES"]


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


MULTI_QUERY_STYLES: dict[str, str] = {
    "standalone": "Rewrite the question below as one clear, standalone search query.",
    "synonyms": "Rewrite the question below using different words: synonyms and alternate terms for its key words.",
    "aspects": "Rewrite the question below as a search query that adds one or two closely related aspects.",
}
"""The three multi-query rewriting styles."""


class MultiQueryParams(_P):
    styles: list[Literal["standalone", "synonyms", "aspects"]] = Field(
        ["standalone", "synonyms", "aspects"], min_length=1, description="one rewrite (one LLM call) per style"
    )
    include_original: bool = Field(True, description="keep the original question as the first query")
    max_tokens: int = Field(48, gt=0, le=1024)


@operator("pre_retrieval", "query_expansion", "multi_query", port=Port.QUERY, needs_llm=True)
def multi_query(params: MultiQueryParams, env: Providers) -> Operator:
    """Multi-query expansion: one rewrite per style (standalone, synonyms, related aspects); unusable or duplicate
    rewrites are dropped."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        queries = [query] if params.include_original else []
        for style in params.styles:
            prompt = f"{MULTI_QUERY_STYLES[style]} Keep names, codes and numbers. Reply with the query only.\n\n" \
                     f"Question: {query}\nQuery:"  # fmt: skip
            new = first_line(env.llm.complete(prompt, max_tokens=params.max_tokens).text)
            if usable_rewrite(new, query) and new.lower() not in {q.lower() for q in queries}:
                queries.append(new)
        return {"queries": queries or [query]}

    return run


class DecomposeParams(_P):
    mode: Literal["decompose", "clarify"] = Field(
        "decompose", description="decompose: simpler sub-questions, least-to-most; clarify: disambiguations (ToC)"
    )
    max_questions: int = Field(3, ge=1, le=10, description="at most this many questions")
    include_original: bool = Field(False, description="also keep the original question")
    max_tokens: int = Field(120, gt=0, le=2048)


DECOMPOSE_PROMPTS = {
    "decompose": "Break the question below into at most {n} simpler sub-questions, ordered from the most basic to "
                 "the one that answers it (least-to-most). Write one sub-question per line, nothing else.",
    "clarify": "The question below may be ambiguous. Write at most {n} more specific versions of it, each a "
               "different interpretation. Write one question per line, nothing else.",
}  # fmt: skip


def question_lines(text: str, original: str, limit: int) -> list[str]:
    """Questions from a model's list: one per line, markers stripped, unusable and repeated ones dropped."""
    out: list[str] = []
    for line in text.splitlines():
        q = first_line(line)
        if usable_rewrite(q, original) and q.lower() != original.lower() and q.lower() not in {o.lower() for o in out}:
            out.append(q)
        if len(out) >= limit:
            break
    return out


@operator("pre_retrieval", "query_expansion", "decompose", port=Port.QUERY, needs_llm=True)
def decompose(params: DecomposeParams, env: Providers) -> Operator:
    """Sub-query decomposition (least-to-most) or clarification into specific interpretations (Tree of
    Clarifications); one LLM call, one question per line."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        instruction = DECOMPOSE_PROMPTS[params.mode].format(n=params.max_questions)
        text = env.llm.complete(f"{instruction}\n\nQuestion: {query}\n", max_tokens=params.max_tokens).text
        questions = question_lines(text, query, params.max_questions)
        return {"queries": ([query] if params.include_original else []) + questions or [query]}

    return run
