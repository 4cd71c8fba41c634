"""Generation module: answers written only from the evidence, with numbered citations.

Retrieved text is always put in the prompt as delimited data, with an instruction not to follow instructions
inside it. Citations come from the ``[n]`` markers the model writes; answer sentences the model left uncited are
attributed to the evidence entry they overlap most (when the overlap passes a threshold), and such citations are
marked ``method: attributed`` so they are never mistaken for the model's own.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from modular_rag.answers import (
    DATA_RULE,
    JUDGE_PROMPT,
    SUPPORTED_QUESTION,
    ask_model_yes_no,
    format_evidence,
    instruction_flags,
    make_answer,
    trim_loops,
)
from modular_rag.attribution import (
    ClaimVerdict,
    ScoredSentence,
    SentenceScorer,
    SentenceWeights,
    best_span,
    check_claims,
    lead_of,
    named_words,
    question_cues,
)
from modular_rag.costs import ZERO, Cost, CostContext, llm
from modular_rag.providers import Providers
from modular_rag.registry import Operator, OperatorParams, Port, operator
from modular_rag.state import REFUSAL, Answer, Citation, Evidence, evidence_of

__all__ = ["check_answer", "judge_claims", "extractive_answer", "quoted_sentence", "unknown_names"]


class CheckParams(OperatorParams):
    """How an answer is checked against what it cites (:func:`check_answer`)."""

    support_threshold: float = Field(
        0.6, ge=0.0, le=1.0, description="share of a sentence's new content words one cited sentence must contain"
    )
    semantic_threshold: float | None = Field(
        0.8, ge=-1.0, le=1.0, description="or an embedding cosine this close to one cited sentence (null: words only)"
    )
    judge: Literal["rules", "llm"] = Field(
        "rules",
        description="rules: the model-free attribution check (modular_rag.attribution.claims: relations, "
        "not bags of words); llm: then also ask the chat model, per answer sentence the rules support, "
        "whether the sentences it cites support it (one call each, at most judge_max_sentences; "
        "a quoted, extractive answer is not asked)",
    )
    judge_max_sentences: int = Field(
        4,
        gt=0,
        le=32,
        description="judge: llm asks about at most this many sentences "
        "of an answer (the rules' verdict stands for the "
        "rest)",
    )


def _judge_cost(params: CheckParams) -> Cost:
    return llm((0, params.judge_max_sentences)) if params.judge == "llm" else ZERO


class CitedAnswerParams(CheckParams):
    mode: Literal["llm", "extractive", "checked"] = Field(
        "llm",
        description="llm: the model answers; extractive: quote the best span or sentence of the evidence, no "
        "LLM call; checked: the model answers, and an answer the attribution check does not fully "
        "support is replaced by the extractive one",
    )
    extract: Literal["typed", "span", "sentence"] = Field(
        "typed",
        description="what the extractive answer quotes: span (the part of the best sentence the question "
        "does not say), sentence, or typed (the span when the question asks for a quantity, date "
        "or name, else the sentence)",
    )
    quotes: int = Field(
        1,
        ge=1,
        le=5,
        description="extractive: sentences an answer quotes: the best, then up to quotes - 1 others that score "
        "within quote_margin of it, each with its citation (when sentences compete, the reader sees both); an "
        "answer span is quoted alone",
    )
    quote_margin: float = Field(0.8, gt=0.0, le=1.0, description="see quotes: a share of the best sentence's score")
    max_tokens: int = Field(256, gt=0, le=32768, description="completion cap")
    instructions: str = Field("", description="extra instructions appended to the system prompt")
    unsupported: Literal["refuse", "mark"] = Field(
        "refuse",
        description="an answer none of whose sentences is supported: refuse, or keep it marked "
        "(answer.supported 0, answer.unsupported)",
    )
    min_relevance: float | None = Field(
        1.4,
        description="refuse, without calling the model, when no evidence sentence answers the question: the "
        "best sentence scores below this (SentenceWeights scale) and none is within min_cosine of "
        "the question (null: never)",
    )
    min_cosine: float = Field(
        0.45,
        ge=-1.0,
        le=1.0,
        description="see min_relevance: a sentence this close to the question (embedding cosine) is an answer",
    )
    weights: SentenceWeights = Field(default_factory=SentenceWeights, description="how evidence sentences are scored")
    follow_bridges: bool = Field(
        True,
        description="extractive: when the best sentence names another passage's title "
        "(a bridge), answer from that passage (multi-hop)",
    )
    refuse_unknown_names: bool = Field(
        True,
        description="refuse, without quoting, a question that names something no indexed chunk mentions (a "
        "product, a tool: 'Overleaf', 'graphql'; see modular_rag.attribution.cues.named_words)",
    )
    max_evidence: int = Field(8, gt=0, le=100, description="evidence entries used when no context builder ran")
    without_evidence: Literal["refuse", "answer"] = Field(
        "refuse", description="with no evidence: refuse without calling the model, or answer from the model alone"
    )
    logprobs: bool = Field(False, description="ask for token log-probabilities; sets answer.confidence (min token p)")

    @model_validator(mode="after")
    def _judged_answers_are_written(self) -> CitedAnswerParams:
        if self.judge == "llm" and self.mode == "extractive":
            raise ValueError(
                "judge: llm judges the model's answers; mode extractive quotes the evidence and asks no "
                "model (use mode checked or llm, or judge: rules)"
            )
        return self


SYSTEM = (
    "You answer the user's question using only the numbered passages. Cite every fact with the number of the "
    "passage it comes from in square brackets, like [1]. Keep the answer short. If the passages do not contain "
    f"the answer, reply exactly: {REFUSAL} {DATA_RULE}"
)


def _answer_cost(params: CitedAnswerParams, ctx: CostContext) -> Cost:
    if params.mode == "extractive":
        return ZERO
    may_skip = (params.without_evidence == "refuse" and ctx.evidence.lo == 0) or params.min_relevance is not None
    return llm((0 if may_skip else 1, 1)) + _judge_cost(params)


def judge_claims(
    providers: Providers,
    question: str,
    verdicts: Sequence[ClaimVerdict],
    evidence: Sequence[Evidence],
    *,
    max_sentences: int = 4,
) -> list[ClaimVerdict]:
    """The judge on top of the rules: for each answer sentence the rules support (the first ``max_sentences``), ask
    the chat model whether the cited sentences that carry it (:attr:`ClaimVerdict.evidence`) support it, with the
    ``llm_judge``'s question (:data:`SUPPORTED_QUESTION`); a "no" makes the sentence unsupported, an unclear reply
    leaves the rules' verdict. One LLM call per sentence asked."""
    from modular_rag.trace import note

    by_ref = {e["ref"]: e for e in evidence}
    out: list[ClaimVerdict] = []
    asked = 0
    for v in verdicts:
        if not v.supported or asked >= max_sentences:
            out.append(v)
            continue
        carried = v.evidence or tuple((ref, by_ref[ref]["text"]) for ref in v.supported_by)
        passages = [
            Evidence(
                ref=ref,
                chunk_id=by_ref[ref]["chunk_id"],
                text=text,
                score=by_ref[ref]["score"],
                metadata={"title": by_ref[ref]["metadata"].get("title", "")},
            )
            for ref, text in carried
        ]
        prompt = JUDGE_PROMPT.format(
            context=f"{format_evidence(passages)}\n{DATA_RULE}\n\n",
            query=question,
            answer=f"Answer: {v.sentence}",
            ask=SUPPORTED_QUESTION,
        )
        reply, p_yes = ask_model_yes_no(providers, prompt)
        asked += 1
        if reply == "no":
            p = f" (P(yes) {p_yes:.2f})" if p_yes is not None else ""
            out.append(
                dataclasses.replace(
                    v,
                    supported=False,
                    supported_by=(),
                    evidence=(),
                    reason=f"judge: the model says the cited sentences do not support it{p}",
                )
            )
        else:
            if reply is None:
                note(f"judge: unclear reply about {v.sentence[:60]!r}; the rules' verdict stands")
            out.append(v)
    return out


def check_answer(
    answer: Answer,
    question: str,
    evidence: Sequence[Evidence],
    providers: Providers | None = None,
    *,
    support_threshold: float = 0.6,
    semantic_threshold: float | None = 0.8,
    judge: Literal["rules", "llm"] = "rules",
    judge_max_sentences: int = 4,
) -> Answer:
    """The attribution check of an answer (:func:`~modular_rag.attribution.claims.check_claims`): each sentence
    against the entries it cites, then, with ``judge="llm"``, the chat model on each sentence the rules support
    (:func:`judge_claims`; not for an extractive answer, a quote). Returns the answer with a verdict on every
    citation, citations added for uncited sentences an entry supports (``attributed``), ``supported`` (the share of
    supported sentences), ``unsupported`` (the others) and ``flags`` when an entry it cites reads as an instruction
    to a model (:func:`~modular_rag.answers.instruction_flags`; the trace notes every such entry). A refusal is
    returned as it is.

    Raises:
        ValueError: If ``judge`` is ``llm`` and no ``providers`` are given (the judge is their chat model).
    """
    from modular_rag.trace import note

    if answer.get("refused"):
        return answer
    verdicts = check_claims(
        str(answer["text"]),
        question,
        evidence,
        lexical_threshold=support_threshold,
        semantic_threshold=semantic_threshold,
        providers=providers,
    )
    if judge == "llm" and answer.get("source") != "extractive":
        if providers is None:
            raise ValueError("check_answer: judge='llm' needs the providers whose chat model judges (or judge='rules')")
        verdicts = judge_claims(providers, question, verdicts, evidence, max_sentences=judge_max_sentences)
    by_ref = {e["ref"]: e for e in evidence}
    citations = {c["ref"]: Citation(**c) for c in answer.get("citations") or [] if c["ref"] in by_ref}
    for v in verdicts:
        if v.attributed and v.supported:
            for ref in v.supported_by:
                citations.setdefault(ref, Citation(ref=ref, chunk_id=by_ref[ref]["chunk_id"], method="attributed"))
    for ref, c in citations.items():
        backing = [v for v in verdicts if ref in v.supported_by]
        citing = [v for v in verdicts if ref in v.refs]
        c["verdict"] = "supported" if backing else "unsupported"
        if not backing:
            c["reason"] = citing[0].reason if citing else "no sentence of the answer cites it"
    out = Answer(**{**answer, "citations": sorted(citations.values(), key=lambda c: c["ref"])})
    out["supported"] = round(sum(v.supported for v in verdicts) / len(verdicts), 4) if verdicts else 0.0
    out["unsupported"] = [v.sentence for v in verdicts if not v.supported]
    flags, notes = instruction_flags(out, evidence)
    for line in notes:
        note(f"flag: {line}")
    if flags:
        out["flags"] = flags
    return out


def _check(
    providers: Providers, params: CheckParams, answer: Answer, question: str, evidence: Sequence[Evidence]
) -> Answer:
    """:func:`check_answer` as an operator's params say."""
    return check_answer(
        answer,
        question,
        evidence,
        providers,
        support_threshold=params.support_threshold,
        semantic_threshold=params.semantic_threshold,
        judge=params.judge,
        judge_max_sentences=params.judge_max_sentences,
    )


def _with_marker(text: str, ref: int) -> str:
    """``text`` with ``[ref]`` before its final punctuation (or at its end)."""
    text = text.strip()
    if text[-1:] in ".!?":
        return f"{text[:-1].rstrip()} [{ref}]{text[-1]}"
    return f"{text} [{ref}]"


def extractive_answer(
    question: str,
    best: ScoredSentence,
    evidence: Sequence[Evidence],
    extract: Literal["typed", "span", "sentence"] = "typed",
    also: Sequence[ScoredSentence] = (),
) -> Answer:
    """An answer quoting the best-scored evidence sentence (or its answer span), citing the entry it comes from, led
    by what the sentence is about when it does not say (:func:`~modular_rag.attribution.lead_of`: the term its
    paragraph defines, or a heading that names a setting, function or option): ``Coalesce: Accepts a list of ...``.
    A question about a tool (a default, an option's name, a how-to) gets the whole sentence; ``also`` (sentences
    that score nearly as well) follow it, each led and cited the same way, unless the answer is a span."""
    cues = question_cues(question)
    factoid = cues.expects in ("number", "date", "person", "place") and not cues.asks & {"default", "name", "how"}
    use_span = extract == "span" or (extract == "typed" and factoid)
    quoted = [best] if use_span else [best, *(s for s in also if s.sentence != best.sentence)]
    parts: list[str] = []
    citations: dict[int, Citation] = {}
    for s in quoted:
        text = best_span(question, s.sentence) if use_span else s.sentence
        lead = lead_of(s)
        if lead and not use_span:
            text = f"{lead}: {text}"
        parts.append(_with_marker(text, s.ref))
        chunk = next(e["chunk_id"] for e in evidence if e["ref"] == s.ref)
        citations.setdefault(s.ref, Citation(ref=s.ref, chunk_id=chunk, method="quoted"))
    return Answer(
        text=" ".join(parts),
        citations=list(citations.values()),
        refused=False,
        source="extractive",
        quote=best.sentence,
    )


def _quotable(
    scorer: SentenceScorer,
    question: str,
    evidence: Sequence[Evidence],
    scored: Sequence[ScoredSentence],
    *,
    follow_bridges: bool,
) -> ScoredSentence:
    """The sentence an extractive answer quotes from ``scored`` (non-empty, best first): the best one, or the
    sentence across the bridge it names (:meth:`~modular_rag.attribution.SentenceScorer.bridge`)."""
    across = scorer.bridge(question, scored[0], evidence) if follow_bridges else None
    return across if across is not None else scored[0]


def quoted_sentence(
    providers: Providers,
    question: str,
    evidence: Sequence[Evidence],
    *,
    weights: SentenceWeights | None = None,
    follow_bridges: bool = True,
) -> str | None:
    """The evidence sentence ``cited_answer``'s extractive mode would quote for the question (the best-scored one,
    or across the bridge it names), whether or not an answer quoted it; ``None`` when the evidence has no sentence.

    Args:
        providers: The flow's providers (the embedder scores sentences; the link table finds bridges).
        question: The question.
        evidence: The evidence pack.
        weights: How sentences are scored (the generator's ``weights``; default :class:`SentenceWeights`).
        follow_bridges: Quote across a bridge, as the generator's ``follow_bridges``.
    """
    scorer = SentenceScorer(providers, weights or SentenceWeights())
    scored = scorer.score(question, evidence)
    return _quotable(scorer, question, evidence, scored, follow_bridges=follow_bridges).sentence if scored else None


def unknown_names(providers: Providers, question: str) -> list[str]:
    """The words of a question that name something (:func:`~modular_rag.attribution.cues.named_words`; the
    embedder's vocabulary tells names in a lower-case question) and that no indexed chunk mentions: a question about
    them cannot be answered from this index. Empty when the index has no term statistics to tell."""
    from modular_rag.errors import MissingDependencyError
    from modular_rag.text import Analyzer

    try:
        tokenizer = getattr(providers.encoder, "tokenizer", None)
    except MissingDependencyError:
        tokenizer = None
    pieces = None
    if tokenizer is not None and hasattr(tokenizer, "encode"):

        def pieces(word: str) -> int:
            found = tokenizer.encode(word.lower(), add_special_tokens=False)
            return len(getattr(found, "tokens", found))

    names = named_words(question, pieces)
    if not names or providers.index.catalog.stats()[0] == 0:  # no term statistics: a store the kit did not fill
        return []
    analyzer = Analyzer()
    terms = {name: analyzer(name) for name in names}
    unseen = providers.index.unseen(sorted({t for ts in terms.values() for t in ts}))
    return [name for name, ts in terms.items() if ts and all(t in unseen for t in ts)]


def _answers(scored: Sequence[ScoredSentence], params: CitedAnswerParams) -> bool:
    """Whether some evidence sentence answers the question (see ``min_relevance``): the rule was fitted on SQuAD and
    NQ-open questions against their own corpus and against another's (benchmarks/README.md)."""
    if not scored or params.min_relevance is None:
        return bool(scored) or params.min_relevance is None
    return scored[0].score >= params.min_relevance or max(s.cosine for s in scored) >= params.min_cosine


def _refusal(why: str, **extra: Any) -> Answer:
    from modular_rag.trace import note

    note(f"refused: {why}")
    return Answer(text=REFUSAL, citations=[], refused=True, reason=why, **extra)  # type: ignore[typeddict-item]


def _verdict_note(answer: Answer) -> str:
    parts = [
        f"[{c['ref']}] {c.get('verdict', '?')}" + (f" ({c['reason']})" if c.get("reason") else "")
        for c in answer.get("citations") or []
    ]
    share = answer.get("supported")
    head = f"attribution: {share:.0%} of sentences supported" if share is not None else "attribution: not checked"
    return head + (f"; {', '.join(parts)}" if parts else "; no citations")


@operator("generation", "generator", "cited_answer", port=Port.GENERATE, needs_llm=True, cost=_answer_cost)
def cited_answer(params: CitedAnswerParams, providers: Providers) -> Operator:
    """Answer only from the evidence, citing it with numbered references ([1], [2]), each citation checked against
    the passage it names; refuse when the evidence is empty or answers nothing (min_relevance), and when no sentence
    of the answer is supported (or mark it). Modes: llm, extractive (no LLM call: quote the best span or sentence),
    checked (the model's answer, replaced by the extractive one when not fully supported)."""
    from modular_rag.trace import note

    system = SYSTEM + (f" {params.instructions}" if params.instructions else "")
    scorer = SentenceScorer(providers, params.weights)
    check = functools.partial(_check, providers, params)

    def _best(scored: list[ScoredSentence], query: str, evidence: list[Evidence]) -> ScoredSentence:
        """The sentence to quote: the best-scored one, or across the bridge it names (``follow_bridges``)."""
        best = _quotable(scorer, query, evidence, scored, follow_bridges=params.follow_bridges)
        if best is not scored[0]:
            note(f"bridge: the best sentence names [{best.ref}]; answering from it")
        return best

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        query = str(state.get("query", ""))
        evidence = evidence_of(state, params.max_evidence)
        if not evidence and params.without_evidence == "refuse":
            return {"answer": _refusal("no evidence")}
        unknown = unknown_names(providers, query) if params.refuse_unknown_names and evidence else []
        if unknown:
            return {"answer": _refusal(f"no indexed document mentions {', '.join(map(repr, unknown))}")}
        scored = (
            scorer.score(query, evidence)
            if evidence and (params.mode != "llm" or params.min_relevance is not None)
            else []
        )
        if scorer.lexical_only and params.min_relevance is not None:
            note("no embedder: the answerability check (min_relevance) is skipped")
        elif evidence and params.min_relevance is not None and not _answers(scored, params):
            top = f"{scored[0].score:.2f}" if scored else "none"
            closest = f"{max(s.cosine for s in scored):.2f}" if scored else "none"
            return {
                "answer": _refusal(
                    f"no evidence sentence answers the question (the best scores {top} < "
                    f"min_relevance {params.min_relevance}, the closest is at cosine {closest} < "
                    f"min_cosine {params.min_cosine})"
                )
            }
        best = _best(scored, query, evidence) if scored else None
        also = [s for s in scored if s is not best and s.score >= params.quote_margin * scored[0].score]
        also = also[: params.quotes - 1]
        if params.mode == "extractive":
            if best is None:
                return {"answer": _refusal("the evidence has no sentence to quote")}
            answer = check(extractive_answer(query, best, evidence, params.extract, also), query, evidence)
            note("extractive: " + _verdict_note(answer))
            return {"answer": answer}
        if evidence:
            prompt = f"{format_evidence(evidence)}\n\nQuestion: {query}\nAnswer:"
            completion = providers.llm.complete(
                prompt, system=system, max_tokens=params.max_tokens, logprobs=params.logprobs
            )
        else:
            prompt = f"Question: {query}\nAnswer briefly.\nAnswer:"
            completion = providers.llm.complete(prompt, max_tokens=params.max_tokens, logprobs=params.logprobs)
        answer = make_answer(completion.text, evidence, attribute_threshold=None)
        answer["source"] = "model"
        if completion.tokens:
            answer["confidence"] = round(min(math.exp(t.logprob) for t in completion.tokens), 6)
        if not evidence or answer["refused"]:
            return {"answer": answer}
        answer = check(answer, query, evidence)
        note(_verdict_note(answer))
        if params.mode == "checked" and answer.get("supported", 0.0) < 1.0 and best is not None:
            fallback = check(extractive_answer(query, best, evidence, params.extract, also), query, evidence)
            note(
                f"the model's answer is not fully supported: replaced by the extractive answer "
                f"({_verdict_note(fallback)})"
            )
            return {"answer": {**fallback, "unsupported": answer.get("unsupported", [])}}
        if not answer.get("supported"):
            if params.unsupported == "refuse":
                return {
                    "answer": _refusal(
                        "no sentence of the answer is supported by what it cites",
                        unsupported=answer.get("unsupported", []),
                        supported=0.0,
                    )
                }
            note("marked: no sentence of the answer is supported by what it cites")
            answer["reason"] = "no sentence of the answer is supported by what it cites"
        return {"answer": answer}

    return run


class DraftParams(OperatorParams):
    max_tokens: int = Field(48, gt=0, le=512, description="tokens generated for the tentative sentence")


DRAFT_PROMPT = "{passages}Question: {query}\nAnswer in a few sentences.{so_far}"


def _first_sentence(tokens: Sequence[Any], text: str) -> tuple[str, list[str], list[float], bool]:
    """Cut a completion at its first sentence end; returns (sentence, tokens, logprobs, more text followed)."""
    match = re.search(r"[.!?](\s|$)|\n", text)
    end = match.end() if match else len(text)
    kept_tokens: list[str] = []
    kept_lp: list[float] = []
    length = 0
    for tok in tokens:
        if length >= end:
            break
        kept_tokens.append(tok.token)
        kept_lp.append(tok.logprob)
        length += len(tok.token)
    return text[:end].strip(), kept_tokens, kept_lp, bool(text[end:].strip())


@operator(
    "generation", "generator", "draft_sentence", port=Port.GENERATE, needs_llm=True, cost=lambda params, ctx: llm(1)
)
def draft_sentence(params: DraftParams, providers: Providers) -> Operator:
    """FLARE's look-ahead: the next sentence of the answer, with its token log-probabilities, continuing the answer
    accepted so far (by prefill when the model allows it); ``done`` when the model ends the answer."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        evidence = evidence_of(state)
        so_far = (state.get("answer") or {}).get("text", "")
        passages = f"{format_evidence(evidence)}\n{DATA_RULE}\n\n" if evidence else ""
        if providers.llm.prefill and so_far:
            prompt: Any = [
                ("human", DRAFT_PROMPT.format(passages=passages, query=state.get("query", ""), so_far="")),
                ("ai", so_far + " "),
            ]
        else:
            tail = f"\nAnswer so far: {so_far}\nContinue with the next sentence only." if so_far else ""
            prompt = DRAFT_PROMPT.format(passages=passages, query=state.get("query", ""), so_far=tail)
        completion = providers.llm.complete(prompt, max_tokens=params.max_tokens, logprobs=True)
        text = completion.text
        if providers.llm.prefill and so_far and text.startswith(so_far):
            text = text[len(so_far) :]
        tokens = completion.tokens or ()
        sentence, toks, lps, more = _first_sentence(tokens, text.lstrip())
        ended = completion.meta.get("finish") == "stop" and not more
        return {"draft": {"text": trim_loops(sentence), "tokens": toks, "logprobs": lps, "done": ended or not sentence}}

    return run


class VerifyParams(CheckParams):
    pass


def _checked(providers: Providers, state: Mapping[str, Any], params: CheckParams) -> Answer:
    return _check(providers, params, Answer(**state["answer"]), str(state.get("query", "")), evidence_of(state))  # type: ignore[typeddict-item]


@operator("generation", "verification", "verify", port=Port.VERIFY, cost=lambda params, ctx: _judge_cost(params))
def verify(params: VerifyParams, providers: Providers) -> Operator:
    """Answer verification by the attribution check: every sentence against the sentences it cites (the subject
    with its value, negation, comparisons, numbers with units; modular_rag.attribution.claims), and with judge: llm
    the chat model on each sentence the rules support; verdicts on the citations, unsupported sentences in
    answer.unsupported, their share in answer.supported."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        answer = dict(state.get("answer") or {})
        if not answer or answer.get("refused"):
            return {"answer": answer} if answer else {}
        return {"answer": _checked(providers, state, params)}

    return run


class AbstainParams(VerifyParams):
    min_supported: float = Field(0.5, ge=0.0, le=1.0, description="refuse when fewer of the sentences are supported")
    ask_model: bool = Field(False, description="also ask the model whether the passages contain the answer")


@operator(
    "generation",
    "verification",
    "abstain",
    port=Port.VERIFY,
    cost=lambda params, ctx: llm((0, 1 if params.ask_model else 0)) + _judge_cost(params),
)
def abstain(params: AbstainParams, providers: Providers) -> Operator:
    """Refusal when the evidence does not contain the answer: replaces an answer whose share of sentences the
    attribution check supports is below min_supported (or that the model says the passages do not contain) by a
    refusal."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        from modular_rag.trace import note

        answer = dict(state.get("answer") or {})
        evidence = evidence_of(state)
        if not answer or answer.get("refused"):
            return {"answer": answer} if answer else {}
        checked = _checked(providers, state, params)
        share, unsupported = checked.get("supported", 0.0), checked.get("unsupported", [])
        contains = True
        if params.ask_model and evidence:
            prompt = (
                f"{format_evidence(evidence)}\n{DATA_RULE}\n\nQuestion: {state.get('query', '')}\n"
                "Do the passages contain the answer to the question? Reply with yes or no."
            )
            reply, _ = ask_model_yes_no(providers, prompt, max_tokens=3)
            contains = reply != "no"
        if share < params.min_supported or not contains:
            note(f"refused: {share:.0%} of sentences supported; model says passages contain it: {contains}")
            return {"answer": Answer(text=REFUSAL, citations=[], refused=True, unsupported=unsupported)}
        return {"answer": checked}

    return run
