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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from modular_rag.config import ProvidersConfig
from modular_rag.errors import ConfigError
from modular_rag.questions import Question

__all__ = ["MakerSpec", "CheckSpec", "TestsetConfig", "TestsetResult", "make_testset", "load_testset_config",
           "DEFAULT_MAKERS", "DEFAULT_CHECKS"]  # fmt: skip

DEFAULT_MAKERS = ("inverse_cloze", "fact_question", "bridge")
"""The LLM-free makers a test set uses unless told otherwise."""
DEFAULT_CHECKS = ("answer_in_passage", "not_verbatim", "dedup")
"""The checks every question passes unless told otherwise (add ``closed_book`` with an LLM maker)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MakerSpec(_Strict):
    """A question maker, its parameters and its share of the set."""

    name: str = Field(..., min_length=1, description="a registered question maker (port question)")
    params: dict[str, Any] = Field(default_factory=dict)
    share: float = Field(1.0, gt=0, description="its share of the questions, relative to the other makers'")


class CheckSpec(_Strict):
    """A question check and its parameters."""

    name: str = Field(..., min_length=1, description="a registered question check (port check)")
    params: dict[str, Any] = Field(default_factory=dict)


def _spec(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class TestsetConfig(_Strict):
    """How a test set is made (YAML or a dict; ``modular-rag testset --config``)."""

    __test__ = False  # not a pytest class

    makers: list[MakerSpec] = Field(default_factory=lambda: [MakerSpec(name=n) for n in DEFAULT_MAKERS], min_length=1)
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
                data[key] = [_spec(v) for v in data[key]]
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
        out = [f"test set: {train + dev} questions ({train} train, {dev} dev) from {self.passages} passages "
               f"({self.covered} gold) -> {self.folder}"]  # fmt: skip
        for kind, c in self.counts.items():
            dropped = ", ".join(f"{k[9:]} {v}" for k, v in c.items() if k.startswith("dropped: ") and v)
            out.append(f"  {kind:<14} {c.get('kept', 0):>4} kept of {c.get('candidates', 0):>4} candidates"
                       + (f" (dropped: {dropped})" if dropped else ""))  # fmt: skip
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


def _quotas(specs: Sequence[MakerSpec], size: int) -> list[int]:
    total = sum(s.share for s in specs)
    raw = [size * s.share / total for s in specs]
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
        update["makers"] = [MakerSpec(name=n) for n in makers]
    cfg = cfg.model_copy(update=update)
    env = providers or Providers(cfg.providers)
    built = [_build(Port.QUESTION, s, f"makers.{i}", env) for i, s in enumerate(cfg.makers)]
    checks = [(s.name, _build(Port.CHECK, s, f"checks.{i}", env)) for i, s in enumerate(cfg.checks)]
    paths = [docs] if isinstance(docs, str | os.PathLike) else list(docs)
    passages, link, notes = read_passages(paths, max_chars=cfg.max_chars)

    quotas = _quotas(cfg.makers, cfg.size)
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
    result = TestsetResult(folder, len(passages), {k: dict(v) for k, v in counts.items()}, types, len(gold),
                           len(unanswerable), notes)  # fmt: skip
    (folder / "testset.json").write_text(json.dumps({
        "sources": [str(p) for p in paths], "config": cfg.model_dump(mode="json", exclude={"providers"}),
        "passages": len(passages), "counts": result.counts, "answer_types": result.answer_types,
        "gold_passages": len(gold), "unanswerable": len(unanswerable), "notes": notes}, indent=1), encoding="utf-8")
    write_report(folder / "report.md", result, cfg, passages, rows, sample=sample)
    return result


def _balance(kept: list[tuple[int, Question]], quotas: list[int],
             notes: list[str]) -> tuple[list[Question], list[Question]]:  # fmt: skip
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
