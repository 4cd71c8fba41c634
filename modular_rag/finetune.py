"""Contrastive fine-tuning of a sentence-transformers embedder on a BEIR split's relevance judgements.

Each (query, relevant document) pair of the split's qrels is one training example, with ``hard_negatives``
documents that the kit's BM25 ranks high for the query but that are not judged relevant to it. The loss is
sentence-transformers' ``MultipleNegativesRankingLoss`` (InfoNCE): for each query, its positive must score
above every other document in the batch (the other queries' positives and everyone's hard negatives).

Batches never hold a document twice, nor a document that is relevant to another query of the batch, so no
example is pushed away from a document judged relevant to it. Given the seed, the pairs, the negatives, the batch
order and the weight initialisation are fixed: two runs on the same machine give the same model.

    modular-rag finetune --dataset path/to/scifact --split train --out .modular_rag/models/scifact

The output folder is a sentence-transformers model that ``embeddings: {name: sentence_transformers, path: OUT}``
loads; ``finetune.json`` beside the weights records the settings and what the run did.
"""

from __future__ import annotations

import json
import math
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

__all__ = [
    "FinetuneSettings",
    "TrainingExample",
    "FinetuneReport",
    "document_text",
    "training_examples",
    "plan_batches",
    "finetune",
]


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

    def lines(self) -> list[str]:
        """A human-readable summary (what ``modular-rag finetune`` prints)."""
        s = self.settings
        out = [
            f"pairs: {self.pairs} from {self.queries} {self.split} queries "
            f"({s['hard_negatives']} BM25 hard negatives each)",
            f"steps: {self.steps} ({s['epochs']} epochs, batch {s['batch_size']}, max {s['max_seq_length']} tokens)",
            f"training: {self.seconds:.1f}s; mean loss per epoch: " + ", ".join(f"{x:.4f}" for x in self.losses),
            f"saved: {self.out}",
        ]
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
                TrainingExample(query.id, query.text, positive, docs[positive], tuple(chosen),
                                tuple(docs[n] for n in chosen))
            )  # fmt: skip
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


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} is a file; give a folder for the model")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError("--out", f"{out} exists and is not empty; choose a new folder or pass --overwrite")
        shutil.rmtree(out)


def _load_model(base: Path) -> Any:
    from modular_rag.providers import SentenceEncoder

    return SentenceEncoder(base).model  # offline, local folder only; ProviderError when it cannot load


def finetune(
    dataset_dir: str | Path,
    out: str | Path,
    *,
    split: str = "train",
    base: str | Path | None = None,
    settings: FinetuneSettings | Mapping[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> FinetuneReport:
    """Fine-tune an embedder on a BEIR split with in-batch and BM25 hard negatives, and save it.

    Args:
        dataset_dir: A BEIR folder (``corpus.jsonl`` and the split's queries and qrels).
        out: Where the sentence-transformers folder is written.
        split: ``train`` reads ``train_queries.jsonl`` / ``train_qrels.tsv``; ``dev`` the plain files.
        base: The model to start from (default: the bundled all-MiniLM-L6-v2).
        settings: A :class:`FinetuneSettings` or a mapping of its fields.
        overwrite: Replace a non-empty ``out`` folder.
        progress: Show a progress bar over the steps.
        log: Receives one line per stage.

    Returns:
        What the run did; also written to ``out/finetune.json``.

    Raises:
        ConfigError: If a setting is out of range, or ``out`` is taken (the path names the option).
        DatasetError: If a dataset file is missing or malformed, or no judgement names a corpus document.
        ProviderError: If the base model cannot be loaded.
        MissingDependencyError: If torch / sentence-transformers are not installed.
    """
    from modular_rag.config import validate_params
    from modular_rag.providers import minilm_path

    if isinstance(settings, FinetuneSettings):
        cfg = settings
    else:
        cfg = cast(FinetuneSettings, validate_params(FinetuneSettings, settings or {}, ""))
    base_path = Path(base) if base is not None else minilm_path()
    if not base_path.is_dir():
        raise ConfigError("--base", f"{base_path} is not a folder; give a local sentence-transformers model folder")
    out_path = Path(out)
    _check_out(out_path, overwrite)
    dataset = load_beir(dataset_dir, split=split)
    say = log or (lambda _line: None)
    try:
        import torch

        try:  # sentence-transformers >= 5.2 moved the losses; older releases keep them here
            from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        except ImportError:
            from sentence_transformers.losses import MultipleNegativesRankingLoss  # type: ignore[no-redef]
    except ImportError as exc:
        raise MissingDependencyError(
            "fine-tuning needs torch and sentence-transformers: pip install torch==2.13.0 'modular-rag[local]'"
        ) from exc

    examples, skipped, filled = training_examples(dataset, cfg)
    say(f"{len(examples)} pairs from {len({e.query_id for e in examples})} {split} queries; mining done")
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = _load_model(base_path)
    inference_length = model.max_seq_length  # restored before saving: the training length is a cost knob
    model.max_seq_length = cfg.max_seq_length
    loss_fn = MultipleNegativesRankingLoss(model, scale=cfg.scale)
    rng = random.Random(cfg.seed)
    plans = [plan_batches(examples, dataset.qrels, cfg.batch_size, rng) for _ in range(cfg.epochs)]
    total = sum(len(p) for p in plans)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.01)
    warmup = int(total * cfg.warmup_ratio)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="finetune", unit="step", leave=False)
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    try:
        for epoch_batches in plans:
            epoch_loss = 0.0
            for batch in epoch_batches:
                columns = [[e.query for e in batch], [e.positive for e in batch]]
                columns += [[e.negatives[j] for e in batch] for j in range(cfg.hard_negatives)]
                features = [model.preprocess(col) for col in columns]
                loss = loss_fn(features, torch.zeros(len(batch)))
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                value = float(loss.detach())
                if not math.isfinite(value):
                    raise ConfigError("--learning-rate", f"training diverged (loss {value}); lower the learning rate")
                epoch_loss += value
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{value:.3f}")
            losses.append(epoch_loss / max(1, len(epoch_batches)))
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    model.eval()
    model.max_seq_length = inference_length
    out_path.mkdir(parents=True, exist_ok=True)
    model.save(str(out_path))
    report = FinetuneReport(
        out=str(out_path), base=str(base_path), dataset=str(dataset.root), split=split, pairs=len(examples),
        queries=len({e.query_id for e in examples}), steps=total, seconds=round(seconds, 1),
        losses=[round(x, 5) for x in losses], settings=cfg.model_dump(), skipped_qrels=skipped, bm25_filled=filled,
        batches_per_epoch=[len(p) for p in plans],
    )  # fmt: skip
    (out_path / "finetune.json").write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    return report
