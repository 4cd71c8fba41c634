"""Fine-tuning the embedder: pairs and hard negatives from qrels and BM25, batches without false negatives that the
Trainer hands to the loss as planned, a saved folder that sentence-transformers and ``build_flow`` load, the same
model twice from the same seed, a run killed after a checkpoint that resumes to the model of an uninterrupted run,
and one-line CLI errors."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modular_rag.cli import main
from modular_rag.errors import ConfigError
from modular_rag.eval.datasets import load_beir
from modular_rag.finetune import (
    RUN_FILE,
    FinetuneSettings,
    document_text,
    finetune,
    last_checkpoint,
    plan_batches,
    planned_batches,
    training_examples,
)

DOCS = {
    "d1": ("Vitamin D", "Vitamin D deficiency is linked to weak bones and rickets in children."),
    "d2": ("Statins", "Statins lower LDL cholesterol and reduce the risk of heart attacks."),
    "d3": ("Insulin", "Insulin resistance precedes type 2 diabetes in most patients."),
    "d4": ("Malaria", "Malaria is transmitted by Anopheles mosquitoes carrying Plasmodium parasites."),
    "d5": ("Aspirin", "Low-dose aspirin reduces the risk of a second heart attack."),
    "d6": ("Sleep", "Short sleep raises appetite hormones and the risk of obesity."),
    "d7": ("Smoking", "Smoking causes most cases of lung cancer worldwide."),
    "d8": ("Exercise", "Regular exercise improves insulin sensitivity in adults with diabetes."),
}
QUERIES = {
    "q1": ("Vitamin D deficiency weakens bones.", ["d1"]),
    "q2": ("Statins reduce the risk of heart attacks.", ["d2", "d5"]),
    "q3": ("Insulin resistance comes before type 2 diabetes.", ["d3"]),
    "q4": ("Mosquitoes transmit malaria parasites.", ["d4"]),
    "q5": ("Lack of sleep is linked to obesity.", ["d6"]),
    "q6": ("Smoking causes lung cancer.", ["d7"]),
    "q7": ("Exercise helps people with diabetes.", ["d8", "d3"]),
}


def write_beir(root: Path, split: str = "train") -> Path:
    """A tiny BEIR folder: the corpus and one split's queries and qrels."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for doc_id, (title, text) in DOCS.items():
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    prefix = "" if split == "dev" else f"{split}_"
    with open(root / f"{prefix}queries.jsonl", "w", encoding="utf-8") as fh:
        for qid, (text, _) in QUERIES.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with open(root / f"{prefix}qrels.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, (_, relevant) in QUERIES.items():
            for doc_id in relevant:
                fh.write(f"{qid}\t{doc_id}\t1\n")
    return root


FAST = {"epochs": 1, "batch_size": 4, "hard_negatives": 1, "negative_depth": 3, "max_seq_length": 32, "seed": 7}
TWO_EPOCHS = {**FAST, "epochs": 2}  # 9 steps: the second epoch's batches follow the first's in one Trainer pass
REPO = Path(__file__).resolve().parents[1]

# Runs `modular-rag finetune ARGS` and SIGKILLs it right after the Trainer has written the checkpoint at step STEP:
# nothing of the run gets to clean up, as when the machine or the user kills it.
KILLED_AFTER_CHECKPOINT = """
import os, signal, sys
from transformers import Trainer
save = Trainer._save_checkpoint
def save_then_die(self, model, trial):
    save(self, model, trial)
    if self.state.global_step >= int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
Trainer._save_checkpoint = save_then_die
from modular_rag.cli import main
sys.exit(main(["finetune", *sys.argv[2:]]))
"""


@contextlib.contextmanager
def loss_inputs() -> Iterator[list[list[Any]]]:
    """Record the token ids of every batch the loss receives (one tensor per column), then let the loss run."""
    try:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss as Loss
    except ImportError:
        from sentence_transformers.losses import MultipleNegativesRankingLoss as Loss  # type: ignore[no-redef]
    seen: list[list[Any]] = []
    forward = Loss.forward

    def recording(self: Any, sentence_features: Any, labels: Any) -> Any:
        seen.append([f["input_ids"].detach().cpu().clone() for f in sentence_features])
        return forward(self, sentence_features, labels)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Loss, "forward", recording)
        yield seen


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from modular_rag.providers import minilm_path

    return AutoTokenizer.from_pretrained(str(minilm_path()))


def seen_texts(seen: list[list[Any]]) -> list[list[list[str]]]:
    """Per step, per column, the texts the loss got (its token ids decoded)."""
    tokenizer = _tokenizer()
    return [[tokenizer.batch_decode(ids, skip_special_tokens=True) for ids in columns] for columns in seen]


def planned_texts(root: Path, settings: dict[str, Any]) -> list[list[list[str]]]:
    """Per step, per column (queries, positives, negatives), the texts the plan puts in that step's batch, as the
    model reads them (tokenized at the training length and decoded)."""
    dataset = load_beir(root, split="train")
    cfg = FinetuneSettings(**settings)
    examples, _, _ = training_examples(dataset, cfg)
    tokenizer = _tokenizer()

    def read(texts: list[str]) -> list[str]:
        ids = tokenizer(texts, truncation=True, max_length=cfg.max_seq_length)["input_ids"]
        return tokenizer.batch_decode(ids, skip_special_tokens=True)

    return [
        [
            read([e.query for e in batch]),
            read([e.positive for e in batch]),
            *[read([e.negatives[j] for e in batch]) for j in range(cfg.hard_negatives)],
        ]
        for epoch in planned_batches(examples, dataset.qrels, cfg)
        for batch in epoch
    ]


# ------------------------------------------------------------------------------------------------------------- unit


@pytest.mark.unit
def test_examples_pair_each_judgement_with_bm25_negatives_that_are_not_relevant(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"), split="train")
    examples, skipped, _ = training_examples(dataset, FinetuneSettings(hard_negatives=2, negative_depth=4))
    assert skipped == 0
    assert sorted((e.query_id, e.positive_id) for e in examples) == sorted(
        (qid, d) for qid, (_, rel) in QUERIES.items() for d in rel
    )
    for ex in examples:
        relevant = set(QUERIES[ex.query_id][1])
        assert len(ex.negative_ids) == 2 and not relevant & set(ex.negative_ids), ex
        assert ex.positive == document_text(*DOCS[ex.positive_id])
    q2 = next(e for e in examples if e.query_id == "q2")
    assert "d5" not in q2.negative_ids  # judged relevant to q2, so never its negative


@pytest.mark.unit
def test_batches_hold_no_document_twice_and_no_document_relevant_to_another_query(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"), split="train")
    examples, _, _ = training_examples(dataset, FinetuneSettings(hard_negatives=1, negative_depth=3))
    batches = plan_batches(examples, dataset.qrels, 4, random.Random(0))
    assert sorted(map(id, (e for b in batches for e in b))) == sorted(map(id, examples))
    for batch in batches:
        docs = [d for e in batch for d in (e.positive_id, *e.negative_ids)]
        assert len(docs) == len(set(docs)), batch
        for ex in batch:
            others = {d for o in batch if o is not ex for d in (o.positive_id, *o.negative_ids)}
            assert not set(QUERIES[ex.query_id][1]) & others, batch


@pytest.mark.unit
def test_document_text_matches_the_document_chunker() -> None:
    assert document_text("Title", "  Body text. ") == "Title\nBody text."
    assert document_text("", "Body") == "Body"
    assert document_text("Body", "Body starts with its title") == "Body starts with its title"


@pytest.mark.unit
def test_cli_missing_dataset_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["finetune", "--dataset", str(tmp_path / "nowhere"), "--out", str(tmp_path / "model"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and "corpus.jsonl is missing" in err
    assert not (tmp_path / "model").exists()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "0"], "--epochs: Input should be greater than or equal to 1"),
        (["--batch-size", "1"], "--batch-size: Input should be greater than or equal to 2"),
        (["--hard-negatives", "5", "--negative-depth", "2"], "negative_depth (2) must be >= hard_negatives (5)"),
        (["--split", "dev"], "queries.jsonl is missing"),
    ],
)
def test_cli_bad_settings_exit_2_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    root = write_beir(tmp_path / "tiny")
    assert main(["finetune", "--dataset", str(root), "--out", str(tmp_path / "m"), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.unit
def test_cli_refuses_to_overwrite_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["finetune", "--dataset", str(write_beir(tmp_path / "tiny")), "--out", str(out), "--quiet"]) == 2
    assert "--out:" in capsys.readouterr().err and (out / "keep.txt").exists()


@pytest.mark.unit
def test_last_checkpoint_passes_over_one_killed_while_it_was_written(tmp_path: Path) -> None:
    assert last_checkpoint(tmp_path / "nowhere") is None
    for step in (2, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-12").mkdir()  # the Trainer writes trainer_state.json last: this one is incomplete
    (tmp_path / "checkpoint-9.bak").mkdir()
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # by step number, not by name


@pytest.mark.unit
@pytest.mark.parametrize(
    ("prepare", "args", "message"),
    [
        (None, ["--resume"], "--resume: {out} holds no checkpoint of an interrupted run; start without --resume"),
        (None, ["--resume", "--overwrite"], "--resume: continues the run in --out; it cannot be combined"),
        (
            "checkpoint-3",
            [],
            "--out: {out} exists and is not empty; it holds an interrupted run (checkpoint-3): "
            "pass --resume to continue it or --overwrite",
        ),
        ("finetune.json", ["--resume"], "--resume: {out} holds a finished model (finetune.json)"),
        (None, ["--save-steps", "0"], "--save-steps: must be >= 1 (got 0)"),
    ],
)
def test_cli_resume_errors_exit_2_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prepare: str | None, args: list[str], message: str
) -> None:
    out = tmp_path / "model"
    if prepare == "checkpoint-3":
        (out / prepare).mkdir(parents=True)
        (out / prepare / "trainer_state.json").write_text("{}")
    elif prepare:
        out.mkdir()
        (out / prepare).write_text("{}")
    root = write_beir(tmp_path / "tiny")
    assert main(["finetune", "--dataset", str(root), "--out", str(out), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(out=out) in err, err


# ------------------------------------------------------------------------------------------------------ integration

# the Trainer's packages (the finetune extra) installed; installed but failing on import is an error, not a skip
needs_finetune = pytest.mark.skipif(
    any(find_spec(name) is None for name in ("accelerate", "datasets")),
    reason="the finetune extra is not installed: pip install -e '.[finetune]'",
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny dataset and a model fine-tuned on it for one epoch (2 steps of 4 pairs)."""
    root = write_beir(tmp_path_factory.mktemp("beir") / "tiny")
    out = tmp_path_factory.mktemp("models") / "tiny-minilm"
    report = finetune(root, out, split="train", settings=FAST)
    assert report.pairs == 9 and report.steps >= 3 and report.seconds > 0
    return root, out


@pytest.mark.integration
@needs_finetune
def test_finetuned_folder_loads_with_sentence_transformers(tiny_model: tuple[Path, Path]) -> None:
    from sentence_transformers import SentenceTransformer

    from modular_rag.providers import minilm_path

    _, out = tiny_model
    model = SentenceTransformer(str(out), device="cpu")
    base = SentenceTransformer(str(minilm_path()), device="cpu")
    assert model.max_seq_length == base.max_seq_length  # the training length is not the inference length
    text = ["Statins reduce the risk of heart attacks."]
    tuned, original = model.encode(text)[0], base.encode(text)[0]
    assert tuned.shape == (384,) and not np.allclose(tuned, original)
    meta = json.loads((out / "finetune.json").read_text())
    assert meta["pairs"] == 9 and meta["settings"]["seed"] == 7


@pytest.mark.integration
@needs_finetune
def test_build_flow_retrieves_with_the_finetuned_embedder(tiny_model: tuple[Path, Path], tmp_path: Path) -> None:
    from modular_rag.builder import build_flow
    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    root, out = tiny_model
    config = load_config(
        {
            "pattern": "linear",
            "providers": {
                "embeddings": {"name": "sentence_transformers", "path": str(out)},
                "vectorstore": {"name": "chroma", "path": str(tmp_path / "index"), "collection": "tiny"},
            },
            "operators": {"retrieve": {"name": "dense", "params": {"k": 3}}, "context": "none", "generate": "none"},
        }
    )
    env = Providers(config.providers)
    summary = index_paths([root / "corpus.jsonl"], env, chunker=OperatorSpec(name="document"), progress=False)
    assert summary.index_chunks == len(DOCS)
    result = build_flow(config, providers=env).invoke({"query": "Which insects carry malaria?"})
    hits = result["candidates"]
    assert len(hits) == 3 and hits[0]["metadata"]["doc_id"] == "d4"


@pytest.mark.integration
@needs_finetune
def test_same_seed_gives_the_same_model(tiny_model: tuple[Path, Path], tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    root, first = tiny_model
    second = tmp_path / "again"
    finetune(root, second, split="train", settings=FAST)
    texts = [text for text, _ in QUERIES.values()]
    a = SentenceTransformer(str(first), device="cpu").encode(texts)
    b = SentenceTransformer(str(second), device="cpu").encode(texts)
    np.testing.assert_array_equal(a, b)


@pytest.mark.integration
@needs_finetune
def test_cli_prints_pairs_steps_and_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_beir(tmp_path / "tiny")
    args = [f"--{k.replace('_', '-')}={v}" for k, v in FAST.items()]
    assert main(["finetune", "--dataset", str(root), "--out", str(tmp_path / "m"), "--quiet", *args]) == 0
    out = capsys.readouterr().out
    assert "pairs: 9 from 7 train queries" in out and "steps: " in out and "training: " in out
    assert (tmp_path / "m" / "modules.json").exists()


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[list[Any]]]:
    """The tiny dataset, a model trained on it for two epochs without interruption (and without checkpoints), and
    the token ids of every batch its loss received."""
    root = write_beir(tmp_path_factory.mktemp("beir") / "tiny")
    out = tmp_path_factory.mktemp("models") / "whole"
    with loss_inputs() as seen:
        report = finetune(root, out, settings=TWO_EPOCHS, save_steps=1000)
    assert report.steps == len(seen) and len(report.batches_per_epoch) == 2
    return root, out, seen


@pytest.mark.integration
@needs_finetune
def test_the_loss_gets_the_planned_batches_in_order(two_epochs: tuple[Path, Path, list[list[Any]]]) -> None:
    # The Trainer samples its own batches unless told otherwise (random order, any mix): the plan's guarantee, no
    # document twice in a batch and none relevant to another query of it, holds only if the loss gets the plan.
    root, _, seen = two_epochs
    planned = planned_texts(root, TWO_EPOCHS)
    assert len(seen) == len(planned) and [len(s) for s in seen] == [3] * len(planned)  # query, positive, negative
    assert seen_texts(seen) == planned


@pytest.mark.integration
@needs_finetune
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_model(
    two_epochs: tuple[Path, Path, list[list[Any]]], tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    root, whole, _ = two_epochs
    out = tmp_path / "killed"
    args = ["--dataset", str(root), "--out", str(out), "--quiet", "--save-steps", "2"]
    args += [f"--{k.replace('_', '-')}={v}" for k, v in TWO_EPOCHS.items()]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_CHECKPOINT, "4", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert last_checkpoint(out) == out / "checkpoint-4" and not (out / "finetune.json").exists()

    with pytest.raises(ConfigError, match=r"--resume: the run in .* started with learning_rate 2e-05 \(now 0.0001\)"):
        finetune(root, out, settings={**TWO_EPOCHS, "learning_rate": 1e-4}, resume=True)
    with loss_inputs() as seen:
        report = finetune(root, out, settings=TWO_EPOCHS, resume=True, save_steps=2)

    assert report.resumed_from_step == 4 and len(seen) == report.steps - 4  # only the steps after the checkpoint
    assert seen_texts(seen) == planned_texts(root, TWO_EPOCHS)[4:]
    assert json.loads((whole / "finetune.json").read_text())["losses"] == report.losses  # every step's, both runs
    texts = [text for text, _ in QUERIES.values()] + [title for title, _ in DOCS.values()]
    a = SentenceTransformer(str(whole), device="cpu").encode(texts)
    b = SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_array_equal(a, b)
    assert not list(out.glob("checkpoint-*")) and not (out / RUN_FILE).exists()  # pruned once the model is saved
