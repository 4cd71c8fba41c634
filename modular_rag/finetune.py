"""Contrastive fine-tuning of a sentence-transformers embedder on a BEIR split's relevance judgements.

Each (query, relevant document) pair of the split's qrels is one training example, with ``hard_negatives``
documents that the kit's BM25 ranks high for the query but that are not judged relevant to it. The loss is
sentence-transformers' ``MultipleNegativesRankingLoss`` (InfoNCE): for each query, its positive must score
above every other document in the batch (the other queries' positives and everyone's hard negatives).

Batches never hold a document twice, nor a document that is relevant to another query of the batch, so no
example is pushed away from a document judged relevant to it. They are planned here, every epoch's before training
starts, and sentence-transformers' ``SentenceTransformerTrainer`` runs them in that order (its batch sampler is the
plan); the Trainer brings the rest: a GPU when there is one (with fp16), AdamW with linear warm-up and decay,
gradient clipping, and checkpoints. Given the seed, the pairs, the negatives, the batch order and the dropout are
fixed: two runs on the same machine give the same model, and so does a run killed and then resumed.

    modular-rag finetune --dataset path/to/scifact --split train --out .modular_rag/models/scifact
    modular-rag finetune --dataset path/to/scifact --split train --out .modular_rag/models/scifact --resume

The output folder is a sentence-transformers model that ``embeddings: {name: sentence_transformers, path: OUT}``
loads; ``finetune.json`` beside the weights records the settings and what the run did. While the run lasts, the
folder also holds ``checkpoint-N`` folders (weights, optimiser, schedule and random states; by default one every
tenth of the run, the last kept) and ``finetune-run.json`` (what the run started with, which ``--resume`` checks);
both go when the model is saved, unless the checkpoints are asked to be kept.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from modular_rag.errors import ConfigError, DatasetError, MissingDependencyError
from modular_rag.eval.datasets import BeirDataset, load_beir
from modular_rag.finetune_trainer import (
    CHECKPOINT,
    PlannedBatches,
    epoch_losses,
    last_checkpoint,
    load_model,
    loss_watch,
    no_library_bars,
    planned_trainer,
    training_arguments,
)

__all__ = [
    "FinetuneSettings",
    "TrainingExample",
    "FinetuneReport",
    "document_text",
    "training_examples",
    "plan_batches",
    "planned_batches",
    "last_checkpoint",
    "finetune",
]

RUN_FILE = "finetune-run.json"
"""What a run started with (settings, base model, split, a digest of its plan), beside its checkpoints."""


class FinetuneSettings(BaseModel):
    """How to fine-tune. Every number is bounded; :func:`finetune` validates before loading anything."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: int = Field(1, ge=1, le=100, description="passes over the training pairs")
    batch_size: int = Field(32, ge=2, le=1024, description="pairs per step (in-batch negatives need at least 2)")
    hard_negatives: int = Field(1, ge=0, le=32, description="BM25 hard negatives per pair")
    negative_depth: int = Field(20, ge=1, le=1000, description="hard negatives are drawn from this many BM25 hits")
    max_seq_length: int = Field(256, ge=8, le=8192, description="tokens per text during training")
    learning_rate: float = Field(2e-5, gt=0.0, le=1.0, description="AdamW learning rate (linear warm-up and decay)")
    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0, description="share of the steps spent warming up")
    scale: float = Field(20.0, gt=0.0, le=1000.0, description="InfoNCE inverse temperature")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seeds negatives, batch order, dropout")

    @model_validator(mode="after")
    def _depth_covers_negatives(self) -> FinetuneSettings:
        if self.negative_depth < self.hard_negatives:
            raise ValueError(
                f"negative_depth ({self.negative_depth}) must be >= hard_negatives ({self.hard_negatives})"
            )
        return self


@dataclass(frozen=True)
class TrainingExample:
    """One (query, positive document, hard negatives) example, with ids for batching and reports."""

    query_id: str
    query: str
    positive_id: str
    positive: str
    negative_ids: tuple[str, ...]
    negatives: tuple[str, ...]


@dataclass
class FinetuneReport:
    """What a fine-tuning run did."""

    out: str
    base: str
    dataset: str
    split: str
    pairs: int
    queries: int
    steps: int
    seconds: float
    losses: list[float]
    settings: dict[str, Any]
    skipped_qrels: int = 0
    bm25_filled: int = 0
    batches_per_epoch: list[int] = field(default_factory=list)
    device: str = "cpu"
    precision: str = "fp32"
    resumed_from_step: int = 0

    def lines(self) -> list[str]:
        """A human-readable summary (what ``modular-rag finetune`` prints)."""
        s = self.settings
        out = [
            f"pairs: {self.pairs} from {self.queries} {self.split} queries "
            f"({s['hard_negatives']} BM25 hard negatives each)",
            f"steps: {self.steps} ({s['epochs']} epochs, batch {s['batch_size']}, max {s['max_seq_length']} tokens)",
            f"training: {self.seconds:.1f}s on {self.device} ({self.precision}); mean loss per epoch: "
            + ", ".join(f"{x:.4f}" for x in self.losses),
            f"saved: {self.out}",
        ]
        if self.resumed_from_step:
            out.append(f"note: resumed from the checkpoint at step {self.resumed_from_step}; the time is this run's")
        if self.skipped_qrels:
            out.append(f"note: {self.skipped_qrels} judgements name documents missing from the corpus (skipped)")
        if self.bm25_filled:
            out.append(f"note: {self.bm25_filled} pairs had too few BM25 negatives; random documents filled in")
        return out


def document_text(title: str, text: str) -> str:
    """The text a corpus row is indexed as by the ``document`` chunker: the title line, then the body."""
    body = text.strip()
    return f"{title}\n{body}" if title and not body.startswith(title) else body


def _corpus(dataset: BeirDataset) -> dict[str, str]:
    docs: dict[str, str] = {}
    for row in dataset.corpus():
        if row["text"].strip() and row["id"] not in docs:
            docs[row["id"]] = document_text(str(row.get("title") or ""), row["text"])
    if not docs:
        raise DatasetError(f"{dataset.corpus_file} has no documents with text")
    return docs


def training_examples(
    dataset: BeirDataset,
    settings: FinetuneSettings,
    *,
    documents: Mapping[str, str] | None = None,
) -> tuple[list[TrainingExample], int, int]:
    """The (query, positive, hard negatives) examples of a split, in qrels order.

    Hard negatives are BM25 hits (the kit's analyser and scorer, over the same document text the index holds)
    that are not judged relevant to the query: ``hard_negatives`` of them drawn, seeded, from the first
    ``negative_depth`` such hits. When BM25 finds fewer, random non-relevant documents fill in.

    Args:
        dataset: The split (its queries and qrels) and corpus.
        settings: Negatives count, depth and seed.
        documents: Document id -> text (default: read from the corpus).

    Returns:
        The examples, the number of judgements skipped because their document is not in the corpus, and the
        number of examples whose negatives had to be filled in.

    Raises:
        DatasetError: If no judgement of the split names a document of the corpus.
    """
    from modular_rag.sparse import PostingsBM25
    from modular_rag.text import Analyzer

    docs = dict(documents) if documents is not None else _corpus(dataset)
    ids = sorted(docs)
    rng = random.Random(settings.seed)
    analyzer = Analyzer()
    sparse = PostingsBM25.build(analyzer.many([docs[i] for i in ids])) if settings.hard_negatives else None
    examples: list[TrainingExample] = []
    skipped = filled = 0
    for query in dataset.queries:
        judged = dataset.qrels.get(query.id, {})
        positives = [d for d, score in judged.items() if score > 0]
        present = [d for d in positives if d in docs]
        skipped += len(positives) - len(present)
        if not present:
            continue
        hits: list[str] = []
        if sparse is not None:
            depth = settings.negative_depth + len(positives)
            found, _ = sparse.top_k(analyzer(query.text), depth)
            hits = [ids[p] for p in found.tolist() if ids[p] not in judged]
            hits = hits[: settings.negative_depth]
        for positive in present:
            chosen = rng.sample(hits, settings.hard_negatives) if len(hits) >= settings.hard_negatives else list(hits)
            if len(chosen) < settings.hard_negatives:
                filled += 1
                pool = [d for d in ids if d not in judged and d not in chosen]
                if len(pool) < settings.hard_negatives - len(chosen):
                    raise DatasetError(
                        f"query {query.id}: the corpus has too few documents not judged relevant to it for "
                        f"{settings.hard_negatives} hard negatives; lower --hard-negatives"
                    )
                chosen += rng.sample(pool, settings.hard_negatives - len(chosen))
            examples.append(
                TrainingExample(
                    query.id, query.text, positive, docs[positive], tuple(chosen), tuple(docs[n] for n in chosen)
                )
            )
    if not examples:
        raise DatasetError(
            f"no judgement of the {dataset.split} split names a document of {dataset.corpus_file}; "
            "check that qrels and corpus belong together"
        )
    return examples, skipped, filled


def plan_batches(
    examples: Sequence[TrainingExample],
    relevant: Mapping[str, Mapping[str, int]],
    batch_size: int,
    rng: random.Random,
) -> list[list[TrainingExample]]:
    """Shuffle the examples and pack them into batches in which no document appears twice and no document is
    relevant to another query of the batch (it would be a false negative for that query).

    An example that does not fit the batch being filled waits for the next one; every example is used once.

    Args:
        examples: The examples.
        relevant: Query id -> judged documents (scores > 0 are relevant).
        batch_size: Examples per batch (the last batch may be smaller).
        rng: Seeded random source for the shuffle.
    """
    order = list(examples)
    rng.shuffle(order)
    batches: list[list[TrainingExample]] = []
    while order:
        batch: list[TrainingExample] = []
        used_docs: set[str] = set()
        batch_relevant: set[str] = set()
        waiting: list[TrainingExample] = []
        for ex in order:
            if len(batch) == batch_size:
                waiting.append(ex)
                continue
            own = {ex.positive_id, *ex.negative_ids}
            rel = {d for d, s in relevant.get(ex.query_id, {}).items() if s > 0}
            if own & used_docs or own & batch_relevant or rel & used_docs:
                waiting.append(ex)
                continue
            batch.append(ex)
            used_docs |= own
            batch_relevant |= rel
        batches.append(batch)
        order = waiting
    return batches


def planned_batches(
    examples: Sequence[TrainingExample], relevant: Mapping[str, Mapping[str, int]], settings: FinetuneSettings
) -> list[list[list[TrainingExample]]]:
    """Every epoch's batches (:func:`plan_batches`), drawn in turn from one random source seeded with the settings'
    seed: the batches a run trains on, in order.

    Args:
        examples: The examples (:func:`training_examples`).
        relevant: Query id -> judged documents (scores > 0 are relevant).
        settings: Epochs, batch size and seed.
    """
    rng = random.Random(settings.seed)
    return [plan_batches(examples, relevant, settings.batch_size, rng) for _ in range(settings.epochs)]


def _check_out(out: Path, overwrite: bool, resume: bool) -> Path | None:
    """Make ``out`` ready for the run; the checkpoint to resume from when ``resume``."""
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} is a file; give a folder for the model")
    if resume:
        if overwrite:
            raise ConfigError("--resume", "continues the run in --out; it cannot be combined with --overwrite")
        if (out / "finetune.json").exists():
            raise ConfigError("--resume", f"{out} holds a finished model (finetune.json): there is nothing to resume")
        checkpoint = last_checkpoint(out)
        if checkpoint is None:
            raise ConfigError("--resume", f"{out} holds no checkpoint of an interrupted run; start without --resume")
        return checkpoint
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            interrupted = last_checkpoint(out)
            hint = (
                f"it holds an interrupted run ({interrupted.name}): pass --resume to continue it or --overwrite"
                if interrupted is not None
                else "choose a new folder or pass --overwrite"
            )
            raise ConfigError("--out", f"{out} exists and is not empty; {hint}")
        shutil.rmtree(out)
    return None


def _run_record(base: Path, split: str, cfg: FinetuneSettings, plans: list[list[list[TrainingExample]]]) -> dict:
    """What a run starts with; a resumed run must start with the same (the plan's digest covers the data)."""
    plan = [
        [[e.query_id, e.query, e.positive_id, e.positive, *e.negative_ids, *e.negatives] for e in batch]
        for epoch in plans
        for batch in epoch
    ]
    digest = hashlib.sha256(json.dumps(plan).encode()).hexdigest()
    return {"base": str(base.resolve()), "split": split, "settings": cfg.model_dump(), "plan": digest}


def _check_same_run(out: Path, record: dict) -> None:
    file = out / RUN_FILE
    if not file.is_file():
        raise ConfigError("--resume", f"{out} has checkpoints but no {RUN_FILE}: what the run started with is unknown")
    started = json.loads(file.read_text(encoding="utf-8"))
    changed = [
        f"{k} {v} (now {record['settings'].get(k)})"
        for k, v in started.get("settings", {}).items()
        if record["settings"].get(k) != v
    ]
    changed += [f"{k} {started.get(k)} (now {record[k]})" for k in ("base", "split") if started.get(k) != record[k]]
    if not changed and started.get("plan") != record["plan"]:
        changed.append("other training pairs (the dataset changed)")
    if changed:
        raise ConfigError(
            "--resume",
            f"the run in {out} started with "
            + "; ".join(changed)
            + ": rerun with the options it started with, or start afresh with --overwrite",
        )


def finetune(
    dataset_dir: str | Path,
    out: str | Path,
    *,
    split: str = "train",
    base: str | Path | None = None,
    settings: FinetuneSettings | Mapping[str, Any] | None = None,
    overwrite: bool = False,
    resume: bool = False,
    save_steps: int | None = None,
    keep_checkpoints: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> FinetuneReport:
    """Fine-tune an embedder on a BEIR split with in-batch and BM25 hard negatives, and save it.

    Args:
        dataset_dir: A BEIR folder (``corpus.jsonl`` and the split's queries and qrels).
        out: Where the sentence-transformers folder is written (and the checkpoints while the run lasts).
        split: ``train`` reads ``train_queries.jsonl`` / ``train_qrels.tsv``; ``dev`` the plain files.
        base: The model to start from (default: the bundled all-MiniLM-L6-v2).
        settings: A :class:`FinetuneSettings` or a mapping of its fields.
        overwrite: Replace a non-empty ``out`` folder.
        resume: Continue the interrupted run in ``out`` from its last checkpoint (same dataset, base and settings);
            the model is the one an uninterrupted run makes.
        save_steps: Save a checkpoint every this many steps (default: a tenth of the run's steps).
        keep_checkpoints: Keep every checkpoint in ``out`` (default: the last only, removed once the model is saved).
        progress: Show a progress bar over the steps.
        log: Receives one line per stage.

    Returns:
        What the run did; also written to ``out/finetune.json``.

    Raises:
        ConfigError: If a setting is out of range, ``out`` is taken, or ``resume`` finds no run to continue or one
            started otherwise (the path names the option).
        DatasetError: If a dataset file is missing or malformed, or no judgement names a corpus document.
        ProviderError: If the base model cannot be loaded.
        MissingDependencyError: If torch / sentence-transformers / accelerate / datasets are not installed.
    """
    from modular_rag.config import validate_params
    from modular_rag.providers import minilm_path

    if isinstance(settings, FinetuneSettings):
        cfg = settings
    else:
        cfg = cast(FinetuneSettings, validate_params(FinetuneSettings, settings or {}, ""))
    if save_steps is not None and save_steps < 1:
        raise ConfigError("--save-steps", f"must be >= 1 (got {save_steps})")
    base_path = Path(base) if base is not None else minilm_path()
    if not base_path.is_dir():
        raise ConfigError("--base", f"{base_path} is not a folder; give a local sentence-transformers model folder")
    out_path = Path(out)
    checkpoint = _check_out(out_path, overwrite, resume)
    dataset = load_beir(dataset_dir, split=split)
    say = log or (lambda _line: None)
    try:
        import accelerate  # noqa: F401  (the Trainer's; imported here to name the extra when it is missing)
        import datasets
        import torch

        try:  # sentence-transformers >= 5.2 moved the losses; older releases keep them here
            from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        except ImportError:
            from sentence_transformers.losses import MultipleNegativesRankingLoss  # type: ignore[no-redef]
    except ImportError as exc:
        raise MissingDependencyError(
            f"fine-tuning needs torch, sentence-transformers, accelerate and datasets ({exc}): pip install "
            "torch==2.13.0 'modular-rag[finetune]'"
        ) from exc

    examples, skipped, filled = training_examples(dataset, cfg)
    say(f"{len(examples)} pairs from {len({e.query_id for e in examples})} {split} queries; mining done")
    plans = planned_batches(examples, dataset.qrels, cfg)
    record = _run_record(base_path, split, cfg, plans)
    if checkpoint is not None:
        _check_same_run(out_path, record)
    else:
        out_path.mkdir(parents=True, exist_ok=True)
        (out_path / RUN_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")
    row = {id(e): i for i, e in enumerate(examples)}
    batches = [[row[id(e)] for e in batch] for epoch in plans for batch in epoch]
    total = len(batches)
    columns = {"query": [e.query for e in examples], "positive": [e.positive for e in examples]}
    columns |= {f"negative_{j + 1}": [e.negatives[j] for e in examples] for j in range(cfg.hard_negatives)}

    with no_library_bars():  # transformers' own bars: loading weights, writing each checkpoint
        model = load_model(base_path)
        inference_length = model.max_seq_length  # restored before saving: the training length is a cost knob
        model.max_seq_length = cfg.max_seq_length
        cuda = torch.cuda.is_available()
        args = training_arguments(
            out_path, cfg, total, save_steps=save_steps, keep_checkpoints=keep_checkpoints, cuda=cuda
        )
        watch = loss_watch(progress)
        loss = MultipleNegativesRankingLoss(model, scale=cfg.scale)
        trainer = planned_trainer(
            PlannedBatches(batches, cfg.batch_size),
            watch,
            model=model,
            args=args,
            loss=loss,
            train_dataset=datasets.Dataset.from_dict(columns),
        )
        device, precision = str(trainer.args.device), "fp16" if cuda else "fp32"
        if checkpoint is not None:
            say(f"resuming from {checkpoint.name} (step {checkpoint.name.split('-')[1]} of {total})")
        say(f"training on {device} ({precision}): {total} steps, a checkpoint every {args.save_steps} in {out_path}")
        start = time.perf_counter()
        try:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
        finally:
            watch.close()
        seconds = time.perf_counter() - start
        model.eval()
        model.max_seq_length = inference_length
        model.save(str(out_path))
    if not keep_checkpoints:
        for folder in out_path.iterdir():
            if CHECKPOINT.match(folder.name) and folder.is_dir():
                shutil.rmtree(folder)
    (out_path / RUN_FILE).unlink(missing_ok=True)
    per_epoch = [len(p) for p in plans]
    report = FinetuneReport(
        out=str(out_path),
        base=str(base_path),
        dataset=str(dataset.root),
        split=split,
        pairs=len(examples),
        queries=len({e.query_id for e in examples}),
        steps=total,
        seconds=round(seconds, 1),
        losses=[round(x, 5) for x in epoch_losses(trainer.state.log_history, per_epoch)],
        settings=cfg.model_dump(),
        skipped_qrels=skipped,
        bm25_filled=filled,
        batches_per_epoch=per_epoch,
        device=device,
        precision=precision,
        resumed_from_step=int(checkpoint.name.split("-")[1]) if checkpoint is not None else 0,
    )
    (out_path / "finetune.json").write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    return report
