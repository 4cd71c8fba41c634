"""The sentence-transformers Trainer as the fine-tune drives it: the planned batches as its batch sampler, its
arguments, a callback with the progress bar and the divergence check, the per-epoch losses from its log, and the
model it starts from."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modular_rag.errors import ConfigError

if TYPE_CHECKING:
    from modular_rag.finetune import FinetuneSettings

__all__ = [
    "PlannedBatches",
    "training_arguments",
    "planned_trainer",
    "loss_watch",
    "no_library_bars",
    "epoch_losses",
    "load_model",
    "last_checkpoint",
]


class PlannedBatches:
    """The Trainer's batch sampler: the planned batches as rows of the training set, every epoch's in one pass."""

    def __init__(self, batches: list[list[int]], batch_size: int) -> None:
        self.batches = batches
        self.batch_size = batch_size  # accelerate reads it from a custom batch sampler

    def __iter__(self) -> Iterator[list[int]]:
        return (list(batch) for batch in self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        """Called by the Trainer at each pass; the plan already holds every epoch."""


def training_arguments(
    out: Path, cfg: FinetuneSettings, steps: int, *, save_steps: int | None, keep_checkpoints: bool, cuda: bool
) -> Any:
    """The Trainer's arguments: the settings' schedule, one pass over the plan, a log line and a loss every step."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments(
        output_dir=str(out),
        num_train_epochs=1,  # one pass over the plan, which holds every epoch's batches
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=int(steps * cfg.warmup_ratio),
        weight_decay=0.01,
        max_grad_norm=1.0,
        seed=cfg.seed,
        fp16=cuda,
        dataloader_pin_memory=cuda,
        logging_steps=1,  # every step's loss: the per-epoch means and the divergence check read them
        logging_nan_inf_filter=False,
        save_strategy="steps",
        save_steps=save_steps or max(1, math.ceil(steps / 10)),
        save_total_limit=None if keep_checkpoints else 1,
        report_to="none",
        disable_tqdm=True,  # the progress bar is the watch callback's
    )


def planned_trainer(sampler: PlannedBatches, watch: Any, **kwargs: Any) -> Any:
    """A ``SentenceTransformerTrainer`` whose training data loader takes its batches from ``sampler``."""
    from sentence_transformers import SentenceTransformerTrainer
    from transformers import PrinterCallback

    class PlannedTrainer(SentenceTransformerTrainer):
        def get_batch_sampler(self, *args: Any, **kw: Any) -> Any:  # the one the data loader asks for its batches
            return sampler

    trainer = PlannedTrainer(callbacks=[watch], **kwargs)
    trainer.remove_callback(PrinterCallback)  # what disable_tqdm puts in its place prints every log to stdout
    return trainer


def loss_watch(progress: bool) -> Any:
    """A Trainer callback: a progress bar with the loss, and a clear error when the loss stops being finite."""
    from transformers import TrainerCallback

    class Watch(TrainerCallback):
        bar: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if progress:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=state.max_steps, initial=state.global_step, desc="finetune", unit="step", leave=False
                )

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.bar is not None:
                self.bar.update(1)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            loss = (logs or {}).get("loss")
            if loss is None:
                return
            if not math.isfinite(loss):
                raise ConfigError("--learning-rate", f"training diverged (loss {loss}); lower the learning rate")
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{loss:.3f}")

        def close(self) -> None:
            if self.bar is not None:
                self.bar.close()

    return Watch()


@contextlib.contextmanager
def no_library_bars() -> Iterator[None]:
    """Hide transformers' own progress bars (loading weights, writing every checkpoint's shards) while training."""
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def epoch_losses(history: Sequence[Mapping[str, Any]], batches_per_epoch: Sequence[int]) -> list[float]:
    """Mean loss of each planned epoch, from the Trainer's per-step log (kept across a resume in its checkpoints)."""
    per_step = {int(entry["step"]): float(entry["loss"]) for entry in history if "loss" in entry}
    means, first = [], 1
    for count in batches_per_epoch:
        values = [per_step[s] for s in range(first, first + count) if s in per_step]
        means.append(sum(values) / max(1, len(values)))
        first += count
    return means


def load_model(base: Path) -> Any:
    """The sentence-transformers model in the local folder ``base`` (the fine-tune's starting point)."""
    from modular_rag.providers import SentenceEncoder

    return SentenceEncoder(base).model  # offline, local folder only; ProviderError when it cannot load


CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"  # the Trainer writes it last into a checkpoint: its presence marks one complete


def last_checkpoint(out: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` folder a run left in ``out``, or ``None``. A checkpoint the run was
    killed while writing is passed over (the one before it is still there)."""
    folder = Path(out)
    if not folder.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := CHECKPOINT.match(p.name)) and p.is_dir()]
    return next((p for _, p in sorted(found, reverse=True) if (p / TRAINER_STATE).is_file()), None)
