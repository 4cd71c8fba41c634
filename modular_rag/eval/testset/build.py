"""Make a labelled test set from a folder of documents: question makers write candidates, checks drop the bad ones,
kinds are balanced, and the set is written as a BEIR folder that ``eval``, ``recommend``, ``tune`` and
``train-router`` read unchanged.

The folder holds ``corpus.jsonl`` (the passages), a dev split (``queries.jsonl``, ``qrels.tsv``) and a training
split (``train_queries.jsonl``, ``train_qrels.tsv``), drawn per kind from the same candidates: ``tune`` searches on
the training split (divided into fit/val) and reports on dev, ``train-router --split train`` trains on it, ``eval``
and ``recommend`` read dev. Unanswerable questions (no gold passage, so no retrieval score) go to
``unanswerable.jsonl``; ``report.md`` and ``testset.json`` say what was made and dropped.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from modular_rag.config import ProvidersConfig
from modular_rag.errors import ConfigError
from modular_rag.questions import Passage, PassageSet, Question, Span

__all__ = [
    "MakerSpec",
    "CheckSpec",
    "TestsetConfig",
    "TestsetResult",
    "make_testset",
    "load_testset_config",
    "hold_out",
    "DEFAULT_MAKERS",
    "DEFAULT_CHECKS",
]

DEFAULT_MAKERS = ("inverse_cloze", "fact_question", "bridge", "manual_question")
"""The LLM-free makers a test set uses unless told otherwise."""
DEFAULT_CHECKS = ("answer_in_passage", "not_verbatim", "dedup")
"""The checks every question passes unless told otherwise (add ``closed_book`` with an LLM maker)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MakerSpec(_Strict):
    """A question maker, its parameters and its share of the set."""

    name: str = Field(..., min_length=1, description="a registered question maker (port question)")
    params: dict[str, Any] = Field(default_factory=dict)
    share: float | Literal["corpus"] = Field(
        1.0,
        description="its share of the questions, relative to the other "
        "makers'; corpus: the share of the whole set the maker reads from the "
        "corpus (bridge: the share of passages that link to another by its "
        "title), the others sharing the rest",
    )

    @field_validator("share")
    @classmethod
    def _positive(cls, value: float | str) -> float | str:
        if not isinstance(value, str) and value <= 0:
            raise ValueError(f"must be > 0 or 'corpus' (got {value})")
        return value


class CheckSpec(_Strict):
    """A question check and its parameters."""

    name: str = Field(..., min_length=1, description="a registered question check (port check)")
    params: dict[str, Any] = Field(default_factory=dict)


DEFAULT_SHARES: dict[str, float | str] = {"bridge": "corpus", "manual_question": "corpus"}
"""Makers whose default share is not 1: bridge questions take the share of passages that link to another by its
title (none in a corpus without such links), a manual's questions the share of passages that define an option or a
setting (none in a corpus of articles)."""


def default_spec(name: str) -> MakerSpec:
    """A maker with its default parameters and share (:data:`DEFAULT_SHARES`)."""
    return MakerSpec(**_spec(name, "makers"))


def _spec(value: Any, key: str) -> Any:
    """A maker or check given by name or as a dict; a maker without a share gets its default share."""
    spec = {"name": value} if isinstance(value, str) else value
    if key == "makers" and isinstance(spec, dict) and "share" not in spec and spec.get("name") in DEFAULT_SHARES:
        spec = {**spec, "share": DEFAULT_SHARES[spec["name"]]}
    return spec


class TestsetConfig(_Strict):
    """How a test set is made (YAML or a dict; ``modular-rag testset --config``)."""

    __test__ = False  # not a pytest class

    makers: list[MakerSpec] = Field(default_factory=lambda: [default_spec(n) for n in DEFAULT_MAKERS], min_length=1)
    checks: list[CheckSpec] = Field(default_factory=lambda: [CheckSpec(name=n) for n in DEFAULT_CHECKS])
    providers: ProvidersConfig = Field(default_factory=ProvidersConfig, description="the model of an LLM maker")
    size: int = Field(200, gt=0, description="questions in the set (training and dev splits together)")
    train_share: float = Field(0.5, ge=0.0, lt=1.0, description="share of each kind's questions in the train split")
    seed: int = Field(0, description="seeds every draw")
    oversample: float = Field(3.0, ge=1.0, description="candidates made per question wanted (checks drop some)")
    max_chars: int = Field(2000, ge=200, description="longer documents are split into passages of this size")

    def __init__(self, **data: Any) -> None:
        for key in ("makers", "checks"):
            if isinstance(data.get(key), list):
                data[key] = [_spec(v, key) for v in data[key]]
        super().__init__(**data)


def load_testset_config(source: str | os.PathLike[str] | dict[str, Any] | TestsetConfig | None) -> TestsetConfig:
    """A test-set config from a YAML file, a dict, or itself (``None``: the defaults).

    Raises:
        ConfigError: If the file is missing or a value is invalid (the message names the key).
    """
    from pydantic import ValidationError

    from modular_rag.validation import format_validation_error

    if isinstance(source, TestsetConfig):
        return source
    data: Any = source or {}
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise ConfigError("--config", f"{path} is not a file")
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return TestsetConfig(**data)
    except ValidationError as exc:
        raise format_validation_error(exc, "", dict(data)) from None


@dataclass
class TestsetResult:
    """What :func:`make_testset` wrote and measured."""

    __test__ = False

    folder: Path
    passages: int
    counts: dict[str, dict[str, int]]
    """Per kind: ``candidates``, ``dropped: <check>`` (one key per check that dropped some), ``kept``, ``train``,
    ``dev``."""
    answer_types: dict[str, int]
    covered: int
    unanswerable: int
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """A short summary (what ``modular-rag testset`` prints)."""
        dev = sum(c.get("dev", 0) for c in self.counts.values())
        train = sum(c.get("train", 0) for c in self.counts.values())
        out = [
            f"test set: {train + dev} questions ({train} train, {dev} dev) from {self.passages} passages "
            f"({self.covered} gold) -> {self.folder}"
        ]
        for kind, c in self.counts.items():
            dropped = ", ".join(f"{k[9:]} {v}" for k, v in c.items() if k.startswith("dropped: ") and v)
            out.append(
                f"  {kind:<14} {c.get('kept', 0):>4} kept of {c.get('candidates', 0):>4} candidates"
                + (f" (dropped: {dropped})" if dropped else "")
            )
        if self.unanswerable:
            out.append(f"  unanswerable   {self.unanswerable} in unanswerable.jsonl")
        out.extend(f"  note: {n}" for n in self.notes)
        out.append(f"report: {self.folder / 'report.md'}")
        return out


def _build(port: Any, spec: MakerSpec | CheckSpec, path: str, providers: Any) -> Callable[..., Any]:
    from modular_rag.registry import get_operator
    from modular_rag.validation import validate_params

    info = get_operator(port, spec.name)
    built: Callable[..., Any] = info.factory(validate_params(info.params, spec.params, f"{path}.params"), providers)
    return built


def _quotas(specs: Sequence[MakerSpec], size: int, fixed: dict[int, float] | None = None) -> list[int]:
    """Questions per maker: ``fixed`` (maker -> share of the whole set, read from the corpus) first, the rest by
    the others' relative shares."""
    fixed = fixed or {}
    if fixed and len(fixed) == len(specs) or sum(fixed.values()) > 1.0:  # no other maker to take the rest, or
        # shares read from the corpus that overlap: each keeps its proportion of the whole set
        fixed = {k: v / sum(fixed.values()) for k, v in fixed.items()}
    rest = max(0.0, 1.0 - sum(fixed.values()))
    total = sum(float(s.share) for k, s in enumerate(specs) if k not in fixed) or 1.0
    raw = [size * (fixed[k] if k in fixed else rest * float(s.share) / total) for k, s in enumerate(specs)]
    quotas = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - quotas[i], reverse=True)[: size - sum(quotas)]:
        quotas[i] += 1
    return quotas


def make_testset(
    docs: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    out: str | os.PathLike[str],
    config: str | os.PathLike[str] | dict[str, Any] | TestsetConfig | None = None,
    *,
    size: int | None = None,
    makers: Sequence[str] | None = None,
    seed: int | None = None,
    providers: Any = None,
    sample: int = 3,
) -> TestsetResult:
    """Make a labelled test set from documents and write it as a BEIR folder.

    Args:
        docs: Files and folders of documents (any format ``modular-rag index`` reads), or a BEIR folder.
        out: The folder to write (created; its files are replaced).
        config: A :class:`TestsetConfig`, its dict or YAML file (default: the LLM-free makers and the checks).
        size: Overrides ``config.size``.
        makers: Maker names overriding ``config.makers`` (each with its default parameters, equal shares).
        seed: Overrides ``config.seed``.
        providers: The :class:`~modular_rag.providers.Providers` an LLM maker or check uses (default: built from
            ``config.providers``, lazily).
        sample: Questions per kind shown in ``report.md``.

    Returns:
        What was written: counts per kind and check, answer types, passages covered.

    Raises:
        ConfigError: If a maker or check is unknown (the message lists the valid names) or its params are invalid.
        DatasetError: If the documents cannot be read.
    """
    from modular_rag.eval.testset.corpus import question_row, read_passages, write_corpus, write_questions
    from modular_rag.eval.testset.report import write_report
    from modular_rag.providers import Providers
    from modular_rag.registry import Port

    cfg = load_testset_config(config)
    update: dict[str, Any] = {k: v for k, v in (("size", size), ("seed", seed)) if v is not None}
    if makers:
        update["makers"] = [default_spec(n) for n in makers]
    cfg = cfg.model_copy(update=update)
    env = providers or Providers(cfg.providers)
    built = [_build(Port.QUESTION, s, f"makers.{i}", env) for i, s in enumerate(cfg.makers)]
    checks = [(s.name, _build(Port.CHECK, s, f"checks.{i}", env)) for i, s in enumerate(cfg.checks)]
    paths = [docs] if isinstance(docs, str | os.PathLike) else list(docs)
    passages, link, notes = read_passages(paths, max_chars=cfg.max_chars)

    fixed: dict[int, float] = {}
    for k, (spec, maker) in enumerate(zip(cfg.makers, built, strict=True)):
        if spec.share == "corpus":
            if not callable(getattr(maker, "corpus_share", None)):
                raise ConfigError(
                    f"makers.{k}.share",
                    f"{spec.name} cannot read its share from the corpus; give a number (makers that can: bridge, "
                    "manual_question)",
                )
            fixed[k] = float(maker.corpus_share(passages))  # type: ignore[attr-defined]
            notes.append(f"{spec.name} takes {fixed[k]:.0%} of the set, its share read from the corpus")
    quotas = _quotas(cfg.makers, cfg.size, fixed)
    made: list[tuple[int, Question]] = []
    for m, (spec, maker, quota) in enumerate(zip(cfg.makers, built, quotas, strict=True)):
        rng = random.Random(f"{cfg.seed}:{m}:{spec.name}")
        made.extend((m, q) for q in maker(passages, math.ceil(quota * cfg.oversample), rng))
    counts: dict[str, Counter[str]] = {}
    for _, q in made:
        counts.setdefault(q.kind, Counter())["candidates"] += 1
    alive = list(range(len(made)))
    for name, check in checks:
        verdicts = check([made[i][1] for i in alive], passages)
        for i, v in zip(alive, verdicts, strict=True):
            if not v.keep:
                counts[made[i][1].kind][f"dropped: {name}"] += 1
        alive = [i for i, v in zip(alive, verdicts, strict=True) if v.keep]
    chosen, unanswerable = _balance([made[i] for i in alive], quotas, notes)
    passages, chosen, refused = hold_out(passages, chosen)
    for q in refused:
        counts[q.kind]["dropped: held_out"] += 1
    if refused:
        notes.append(
            f"{len(refused)} held-out sentences were kept in their passage (another question's evidence, or "
            "too little text left): those questions were dropped"
        )
    if any(isinstance(q.meta.get("held_out"), dict) for q in chosen):
        link = None  # the set's corpus lacks the held-out sentences: it is written, not linked
    rng = random.Random(f"{cfg.seed}:split")
    splits: dict[str, list[Question]] = {"train": [], "dev": []}
    for kind in dict.fromkeys(q.kind for q in chosen):
        group = [q for q in chosen if q.kind == kind]
        rng.shuffle(group)
        cut = round(len(group) * cfg.train_share)
        splits["train"].extend(group[:cut])
        splits["dev"].extend(group[cut:])
        counts[kind].update(kept=len(group), train=cut, dev=len(group) - cut)
    for q in unanswerable:
        counts[q.kind]["kept"] += 1
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    write_corpus(folder, passages, link)
    rows: dict[str, list[dict[str, Any]]] = {}
    for split, questions in splits.items():
        rows[split] = [question_row(f"{split}-{n:05d}-{q.kind}", q, passages) for n, q in enumerate(questions)]
        write_questions(folder, split, rows[split])
    with open(folder / "unanswerable.jsonl", "w", encoding="utf-8") as fh:
        for n, q in enumerate(unanswerable):
            fh.write(json.dumps(question_row(f"unanswerable-{n:05d}", q, passages), ensure_ascii=False) + "\n")
    gold = {g for q in chosen for g in q.gold}
    types = dict(Counter(q.answer_type for q in chosen))
    result = TestsetResult(
        folder, len(passages), {k: dict(v) for k, v in counts.items()}, types, len(gold), len(unanswerable), notes
    )
    (folder / "testset.json").write_text(
        json.dumps(
            {
                "sources": [str(p) for p in paths],
                "config": cfg.model_dump(mode="json", exclude={"providers"}),
                "passages": len(passages),
                "counts": result.counts,
                "answer_types": result.answer_types,
                "gold_passages": len(gold),
                "unanswerable": len(unanswerable),
                "notes": notes,
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    write_report(folder / "report.md", result, cfg, passages, rows, sample=sample)
    return result


def _balance(
    kept: list[tuple[int, Question]], quotas: list[int], notes: list[str]
) -> tuple[list[Question], list[Question]]:
    """Each maker's quota from its kept candidates (in the order it made them); a maker short of its quota leaves
    the rest to the others, in turn. Unanswerable questions are set apart and do not count towards the quotas."""
    unanswerable = [q for _, q in kept if not q.gold]
    pools = [[q for m, q in kept if m == k and q.gold] for k in range(len(quotas))]
    taken = [min(len(p), quotas[k]) for k, p in enumerate(pools)]
    short = sum(quotas) - sum(taken)
    if short > 0:
        notes.append(f"{short} questions short of the makers' quotas were taken from the makers with more")
    while short > 0:
        grew = False
        for k, pool in enumerate(pools):
            if short > 0 and taken[k] < len(pool):
                taken[k] += 1
                short -= 1
                grew = True
        if not grew:
            notes.append(f"the set is {short} questions smaller than asked: the makers had no more that passed")
            break
    return [q for k, pool in enumerate(pools) for q in pool[: taken[k]]], unanswerable


def hold_out(
    passages: PassageSet, questions: Sequence[Question], min_words: int = 5
) -> tuple[PassageSet, list[Question], list[Question]]:
    """Cut the sentences of held-out questions (``meta["held_out"]`` true, their evidence the sentence) out of their
    passages, as the inverse cloze task does (Lee et al. 2019): the set's corpus no longer holds a copy of the query.

    A cut is refused when another question's evidence lies in the sentence, or when fewer than ``min_words`` words
    of the passage would be left; a refused question is dropped. Evidence spans after a cut are shifted.

    Returns:
        The passages with the cuts made, the questions kept (each held-out one with no evidence span and
        ``meta["held_out"]`` = ``{"doc", "at", "text"}``: where the sentence was cut and what it said), and the
        questions dropped.
    """
    held = [q for q in questions if q.meta.get("held_out") is True and len(q.evidence) == 1]
    if not held:
        return passages, list(questions), []
    blocked: dict[str, list[Span]] = {}
    for q in questions:
        if q.meta.get("held_out") is not True:
            for span in q.evidence:
                blocked.setdefault(span.doc, []).append(span)
    cuts: dict[str, set[tuple[int, int]]] = {}
    refused: list[int] = []
    for q in held:
        span = q.evidence[0]
        text = passages[passages.position[span.doc]].text
        taken = cuts.get(span.doc, set()) | {(span.start, span.end)}
        left = len(_cut(text, sorted(taken))[0].split())
        if left < min_words or any(b.start < span.end and b.end > span.start for b in blocked.get(span.doc, [])):
            refused.append(id(q))
        else:
            cuts[span.doc] = taken
    out: list[Passage] = []
    shifts: dict[str, Callable[[int], int]] = {}
    for p in passages.passages:
        if p.id in cuts:
            text, shift = _cut(p.text, sorted(cuts[p.id]))
            out.append(Passage(p.id, p.title, text, doc=p.doc))
            shifts[p.id] = shift
        else:
            out.append(p)
    kept: list[Question] = []
    for q in questions:
        if id(q) in refused:
            continue
        if q.meta.get("held_out") is True and len(q.evidence) == 1:
            span = q.evidence[0]
            meta = {
                **q.meta,
                "held_out": {
                    "doc": span.doc,
                    "at": shifts[span.doc](span.start),
                    "text": passages[passages.position[span.doc]].text[span.start : span.end],
                },
            }
            kept.append(replace(q, evidence=(), meta=meta))
        else:
            kept.append(
                replace(
                    q,
                    evidence=tuple(
                        Span(s.doc, shifts[s.doc](s.start), shifts[s.doc](s.end)) if s.doc in shifts else s
                        for s in q.evidence
                    ),
                )
            )
    return PassageSet(out), kept, [q for q in questions if id(q) in refused]


def _cut(text: str, spans: Sequence[tuple[int, int]]) -> tuple[str, Callable[[int], int]]:
    """``text`` without the (sorted, non-overlapping) ``spans`` and the white space after each (before it at the
    end of the text), and the map of an offset outside them to its place in the result."""
    pieces: list[tuple[int, int]] = []  # (start, end) of each removed range in the original text
    for s, e in spans:
        end = e
        while end < len(text) and text[end].isspace():
            end += 1
        start = s
        if end == len(text):
            while start > 0 and text[start - 1].isspace():
                start -= 1
        if pieces and start < pieces[-1][1]:
            start = pieces[-1][1]
        if start < end:
            pieces.append((start, end))
    result, at = [], 0
    for s, e in pieces:
        result.append(text[at:s])
        at = e
    result.append(text[at:])

    def shift(offset: int) -> int:
        return offset - sum(min(e, max(offset, s)) - s for s, e in pieces)

    return "".join(result), shift
