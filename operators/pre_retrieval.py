"""Pre-retrieval module: query expansion, transformation and construction.

Operators read ``query`` (``condense`` also the conversation in ``messages``) and write ``queries`` (what the
retriever searches with), and may write ``filter`` (a Chroma ``where`` filter) or ``query_embedding``. Model output
is cleaned and checked: an empty or runaway rewrite falls back to the original query rather than searching with
garbage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from modular_rag.answers import clean_completion
from modular_rag.costs import Cost, CostContext, Span, llm
from modular_rag.providers import Providers
from modular_rag.registry import Operator, OperatorParams, Port, operator

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = ["first_line", "usable_rewrite", "question_lines", "validate_filter", "MULTI_QUERY_STYLES"]


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


class RewriteParams(OperatorParams):
    keep_original: bool = Field(
        False, description="also search with the original query (RRF-merged); the paper searches with the rewrite alone"
    )
    max_tokens: int = Field(48, gt=0, le=1024)


REWRITE_PROMPT = (
    "Rewrite the question below as one short search-engine query that keeps every name, code and number. "
    "Reply with the query only.\n\nQuestion: {query}\nQuery:"
)


def _rewrite_cost(params: RewriteParams, ctx: CostContext) -> Cost:
    ctx.queries = Span(1, 2 if params.keep_original else 1)
    return llm(1)


@operator("pre_retrieval", "query_transformation", "rewrite", port=Port.QUERY, needs_llm=True, cost=_rewrite_cost)
def rewrite(params: RewriteParams, providers: Providers) -> Operator:
    """LLM query rewrite (Rewrite-Retrieve-Read, prompted rather than a trained rewriter): retrieve with a concise
    search query; falls back to the original if unusable."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        completion = providers.llm.complete(REWRITE_PROMPT.format(query=query), max_tokens=params.max_tokens)
        new = first_line(completion.text)
        if not usable_rewrite(new, query) or new.lower() == query.lower():
            return {"queries": [query]}
        return {"queries": [query, new] if params.keep_original else [new]}

    return run


class CondenseParams(OperatorParams):
    max_turns: int = Field(3, ge=1, le=20, description="earlier turns (a question and its answer) the model sees")
    max_chars: int = Field(300, gt=0, description="each earlier message is cut to this many characters")
    max_tokens: int = Field(48, gt=0, le=1024)


CONDENSE_PROMPT = (
    "Conversation:\n{turns}\n\nFollow-up question: {query}\nRewrite the follow-up question as a complete question "
    "that names what it refers to. Reply with the question only.\nQuestion:"
)


def _turns(messages: Sequence[BaseMessage], max_chars: int) -> str:
    """Earlier messages as ``User: ...`` / ``Assistant: ...`` lines, [n] markers removed, each cut to ``max_chars``."""
    lines = []
    for message in messages:
        text = " ".join(re.sub(r"\s*\[\d+\]", "", message.text).split())
        text = text if len(text) <= max_chars else text[: max_chars - 3] + "..."
        lines.append(f"{'User' if message.type == 'human' else 'Assistant'}: {text}")
    return "\n".join(lines)


def _condense_cost(params: CondenseParams, ctx: CostContext) -> Cost:
    ctx.queries = Span(1, 1)
    return llm((0, 1))  # a question with no earlier turns is not sent to the model


@operator("pre_retrieval", "query_transformation", "condense", port=Port.QUERY, needs_llm=True, cost=_condense_cost)
def condense(params: CondenseParams, providers: Providers) -> Operator:
    """History-aware query condensing: a follow-up ("and the E12 one?") becomes a standalone question written from
    the last max_turns turns of ``messages`` (one LLM call), which retrieval searches with; a question with no
    earlier turns passes as it is (no call). A rewrite that is unusable, copies an earlier question or drops a code,
    number or name of the follow-up falls back to the question as asked, noted in the trace."""
    from modular_rag.state import history
    from modular_rag.text import distinctive_tokens
    from modular_rag.trace import note

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        earlier = [m for m in history(state) if m.type in ("human", "ai") and m.text.strip()]
        if not earlier:
            return {"queries": [query]}
        window = earlier[-2 * params.max_turns :]
        prompt = CONDENSE_PROMPT.format(turns=_turns(window, params.max_chars), query=query)
        text = providers.llm.complete(prompt, max_tokens=params.max_tokens).text
        new = first_line(re.sub(r"^\s*(user|assistant)\s*:\s*", "", text, flags=re.IGNORECASE))
        asked = [m.text for m in window if m.type == "human"]
        if not usable_rewrite(new, max([query, *asked], key=len)):
            why = "is unusable"
        elif new.lower() in {a.lower() for a in asked} and new.lower() != query.lower():
            why = "copies an earlier question"  # what a small model does with a follow-up it cannot resolve
        elif lost := sorted(distinctive_tokens(query) - distinctive_tokens(new)):
            why = f"drops {', '.join(lost)}"
        else:
            return {"queries": [new]}
        note(f"condense: the rewrite {new[:60]!r} {why}; searching with the question as asked")
        return {"queries": [query]}

    return run


MULTI_QUERY_STYLES: dict[str, str] = {
    "standalone": "Rewrite the question below as one clear, standalone search query.",
    "synonyms": "Rewrite the question below using different words: synonyms and alternate terms for its key words.",
    "aspects": "Rewrite the question below as a search query that adds one or two closely related aspects.",
}
"""The three multi-query rewriting styles."""


class MultiQueryParams(OperatorParams):
    styles: list[Literal["standalone", "synonyms", "aspects"]] = Field(
        ["standalone", "synonyms", "aspects"], min_length=1, description="one rewrite (one LLM call) per style"
    )
    include_original: bool = Field(True, description="keep the original question as the first query")
    max_tokens: int = Field(48, gt=0, le=1024)


def _multi_query_cost(params: MultiQueryParams, ctx: CostContext) -> Cost:
    ctx.queries = Span(1, int(params.include_original) + len(params.styles))
    return llm(len(params.styles))


@operator("pre_retrieval", "query_expansion", "multi_query", port=Port.QUERY, needs_llm=True, cost=_multi_query_cost)
def multi_query(params: MultiQueryParams, providers: Providers) -> Operator:
    """Multi-query expansion: one rewrite per style (standalone, synonyms, related aspects); unusable or duplicate
    rewrites are dropped."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        queries = [query] if params.include_original else []
        for style in params.styles:
            prompt = (
                f"{MULTI_QUERY_STYLES[style]} Keep names, codes and numbers. Reply with the query only.\n\n"
                f"Question: {query}\nQuery:"
            )
            new = first_line(providers.llm.complete(prompt, max_tokens=params.max_tokens).text)
            if usable_rewrite(new, query) and new.lower() not in {q.lower() for q in queries}:
                queries.append(new)
        return {"queries": queries or [query]}

    return run


class DecomposeParams(OperatorParams):
    mode: Literal["decompose", "clarify"] = Field(
        "decompose", description="decompose: simpler sub-questions, least-to-most; clarify: disambiguations (ToC)"
    )
    max_questions: int = Field(3, ge=1, le=10, description="at most this many questions")
    include_original: bool = Field(False, description="also keep the original question")
    with_passages: bool = Field(
        True,
        description="clarify: write the interpretations from the passages retrieved "
        "for the question (state evidence), when there are any",
    )
    max_tokens: int = Field(120, gt=0, le=2048)


DECOMPOSE_PROMPTS = {
    "decompose": "Break the question below into at most {n} simpler sub-questions, ordered from the most basic to "
    "the one that answers it (least-to-most). Write one sub-question per line, nothing else.",
    "clarify": "The question below may be ambiguous. Write at most {n} more specific versions of it, each a "
    "different interpretation. Write one question per line, nothing else.",
    "clarify_passages": "The question below may be ambiguous. Using the passages, write at most {n} more specific "
    "versions of it, each a different interpretation that the passages can answer. Write one "
    "question per line, nothing else.",
}


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


def _decompose_cost(params: DecomposeParams, ctx: CostContext) -> Cost:
    ctx.queries = Span(1, params.max_questions + int(params.include_original))
    return llm(1)


@operator("pre_retrieval", "query_expansion", "decompose", port=Port.QUERY, needs_llm=True, cost=_decompose_cost)
def decompose(params: DecomposeParams, providers: Providers) -> Operator:
    """Sub-query decomposition (least-to-most) or clarification into specific interpretations (Tree of
    Clarifications: retrieval-augmented, from the passages retrieved for the question when the state has them);
    one LLM call, one question per line."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        from modular_rag.answers import DATA_RULE, format_evidence

        query = str(state.get("query", ""))
        evidence = list(state.get("evidence") or []) if params.mode == "clarify" and params.with_passages else []
        mode = "clarify_passages" if evidence else params.mode
        instruction = DECOMPOSE_PROMPTS[mode].format(n=params.max_questions)
        passages = f"{format_evidence(evidence)}\n{DATA_RULE}\n\n" if evidence else ""
        prompt = f"{passages}{instruction}\n\nQuestion: {query}\n"
        text = providers.llm.complete(prompt, max_tokens=params.max_tokens).text
        questions = question_lines(text, query, params.max_questions)
        return {"queries": ([query] if params.include_original else []) + questions or [query]}

    return run


class HydeParams(OperatorParams):
    max_tokens: int = Field(120, gt=0, le=1024, description="length cap of the hypothetical passage")
    average_with_query: bool = Field(False, description="dense search with the mean of passage and query embeddings")
    keep_original: bool = Field(False, description="also search with the original question (RRF-merged)")


HYDE_PROMPT = (
    "Write a short passage, in the style of a manual or encyclopedia, that answers the question.\n\n"
    "Question: {query}\nPassage:"
)


def _hyde_cost(params: HydeParams, ctx: CostContext) -> Cost:
    ctx.queries = Span(1, 2 if params.keep_original else 1)
    ctx.query_embedding = params.average_with_query
    return llm(1)


@operator("pre_retrieval", "query_transformation", "hyde", port=Port.QUERY, needs_llm=True, cost=_hyde_cost)
def hyde(params: HydeParams, providers: Providers) -> Operator:
    """HyDE: retrieve with a generated hypothetical passage (answer-to-answer similarity); optionally average its
    embedding with the query's."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        import numpy as np

        from modular_rag.answers import clean_completion

        query = str(state.get("query", ""))
        passage = " ".join(
            clean_completion(
                providers.llm.complete(HYDE_PROMPT.format(query=query), max_tokens=params.max_tokens).text
            ).split()
        )
        if not passage:
            return {"queries": [query]}
        update: dict[str, Any] = {"queries": [passage, query] if params.keep_original else [passage]}
        if params.average_with_query:
            mean = (providers.encoder.encode([passage])[0] + providers.encoder.encode_query(query)) / 2.0
            update["query_embedding"] = (mean / max(float(np.linalg.norm(mean)), 1e-12)).tolist()
        return update

    return run


class StepBackParams(OperatorParams):
    max_tokens: int = Field(48, gt=0, le=1024)


STEP_BACK_PROMPT = (
    "Write a more general question about the concept or background behind the question below (a step back from its "
    "specifics). Reply with the question only.\n\nQuestion: {query}\nMore general question:"
)


def _step_back_cost(params: StepBackParams, ctx: CostContext) -> Cost:
    ctx.queries = Span(1, 2)
    return llm(1)


@operator("pre_retrieval", "query_transformation", "step_back", port=Port.QUERY, needs_llm=True, cost=_step_back_cost)
def step_back(params: StepBackParams, providers: Providers) -> Operator:
    """Step-back prompting: retrieve for an abstracted, more general question and for the original; the retriever
    merges both lists (RRF)."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        prompt = STEP_BACK_PROMPT.format(query=query)
        general = first_line(providers.llm.complete(prompt, max_tokens=params.max_tokens).text)
        if not usable_rewrite(general, query) or general.lower() == query.lower():
            return {"queries": [query]}
        return {"queries": [query, general]}

    return run


class FilterParams(OperatorParams):
    mode: Literal["rules", "llm"] = Field(
        "rules", description="rules: years and known metadata values named in the query; llm: the model proposes"
    )
    fields: list[str] | None = Field(None, description="fields that may be filtered (default: all the index has)")
    year_field: str = Field("year", description="the numeric field years in the query map to")
    max_values: int = Field(50, gt=0, description="fields with more distinct values than this are not matched")
    max_tokens: int = Field(64, gt=0, le=1024)


_YEAR = re.compile(r"\b(19\d{2}|20\d{2})\b")


def _known_values(providers: Providers, fields: list[str] | None, max_values: int) -> dict[str, set[Any]]:
    """Each metadata field's values (fields with more than ``max_values`` distinct values are left out), read from
    the catalog field by field."""
    names = [f for f in providers.index.metadata_fields() if fields is None or f in fields]
    values = {name: providers.index.catalog.field_values(name, max_values + 1) for name in names}
    return {k: v for k, v in values.items() if v and len(v) <= max_values}


def validate_filter(where: Mapping[str, Any], known: Mapping[str, set[Any]]) -> tuple[dict[str, Any], list[str]]:
    """Keep the conditions whose field the index has and whose value has a type seen there; return the kept filter
    and what was dropped (with the reason)."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for field, cond in where.items():
        if field not in known:
            dropped.append(f"{field}: not a metadata field of the index ({', '.join(sorted(known)) or 'none'})")
            continue
        value = cond.get("$eq") if isinstance(cond, Mapping) and "$eq" in cond else cond
        types = {type(v) for v in known[field]}
        if isinstance(cond, Mapping) and set(cond) - {"$eq"}:
            ops = [v for v in cond.values() if not isinstance(v, list)]
            if all(type(v) in types or (isinstance(v, int) and float in types) for v in ops):
                kept[field] = dict(cond)
            else:
                dropped.append(f"{field}: value type does not match the index")
        elif type(value) in types:
            kept[field] = value
        else:
            dropped.append(f"{field}: {value!r} is not a {'/'.join(sorted(t.__name__ for t in types))}")
    return kept, dropped


def _fields_of(where: Mapping[str, Any]) -> set[str]:
    """The metadata fields a where filter constrains."""
    fields: set[str] = set()
    for key, value in where.items():
        if key in ("$and", "$or"):
            for part in value:
                fields |= _fields_of(part)
        else:
            fields.add(key)
    return fields


FILTER_PROMPT = (
    "Metadata fields and some of their values:\n{fields}\n\nIf the question below restricts the documents to "
    'certain field values, write them as JSON like {{"field": value}}; if not, write {{}}. JSON only.\n\n'
    "Question: {query}\nJSON:"
)


@operator(
    "pre_retrieval",
    "query_construction",
    "filter_extract",
    port=Port.QUERY,
    cost=lambda params, ctx: llm(1 if params.mode == "llm" else 0),
)
def filter_extract(params: FilterParams, providers: Providers) -> Operator:
    """Metadata filter extraction into a Chroma where filter (years, sources ...), validated against the fields and
    value types the index actually has; invalid parts are dropped and noted in the trace."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        import json

        from modular_rag.trace import note

        query = str(state.get("query", ""))
        known = _known_values(providers, params.fields, params.max_values)
        proposed: dict[str, Any] = {}
        if params.mode == "rules":
            years = sorted({int(y) for y in _YEAR.findall(query)})
            if len(years) == 1:
                proposed[params.year_field] = years[0]
            lowered = f" {query.lower()} "
            for field, values in known.items():
                if field == params.year_field:
                    continue
                hits = [v for v in values if isinstance(v, str) and len(v) > 2 and f" {v.lower()} " in lowered]
                if len(hits) == 1:
                    proposed[field] = hits[0]
        else:
            listing = "\n".join(f"- {f}: {', '.join(map(str, sorted(v, key=str)[:8]))}" for f, v in known.items())
            text = (
                providers.llm.complete(FILTER_PROMPT.format(fields=listing, query=query), max_tokens=params.max_tokens)
            ).text
            match = re.search(r"\{.*\}", text, re.S)
            try:
                parsed = json.loads(match.group(0)) if match else {}
            except json.JSONDecodeError:
                parsed = {}
                note(f"model wrote no valid JSON: {text[:60]!r}")
            proposed = parsed if isinstance(parsed, dict) else {}
        existing = state.get("filter")
        constrained = _fields_of(existing) if existing else set()
        kept, dropped = validate_filter({k: v for k, v in proposed.items() if k not in constrained}, known)
        for reason in dropped:
            note(f"dropped {reason}")
        if not kept:
            return {}  # nothing to restrict: leave queries and any existing filter as they are
        where = kept if len(kept) == 1 else {"$and": [{k: v} for k, v in kept.items()]}
        return {"filter": {"$and": [existing, where]} if existing else where}

    return run
