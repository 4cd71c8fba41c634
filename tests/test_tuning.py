"""Tuning helpers: the holdout split shares the corpus (and so the cached index), the grid checks its values, the
tune command refuses the evaluation split, and presets carry their BM25 settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench import RETRIEVAL_PRESETS, main, retrieval_preset
from modular_rag.config import load_config
from modular_rag.errors import DatasetError
from modular_rag.eval.datasets import holdout_split, load_beir
from tests.test_finetune import QUERIES, write_beir

pytestmark = pytest.mark.unit


def test_holdout_splits_the_queries_and_shares_the_corpus(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"), split="train")
    fit, val = holdout_split(dataset, tmp_path / "held", fraction=0.3, seed=1)
    fit_ids, val_ids = {q.id for q in fit.queries}, {q.id for q in val.queries}
    assert fit_ids | val_ids == set(QUERIES) and not fit_ids & val_ids and len(val_ids) == 2
    assert all(fit.qrels[q] == dataset.qrels[q] for q in fit_ids)
    assert fit.fingerprint() == dataset.fingerprint() == val.fingerprint()  # same cached index
    again = holdout_split(dataset, tmp_path / "held", fraction=0.3, seed=1)[1]
    assert {q.id for q in again.queries} == val_ids


@pytest.mark.parametrize(("fraction", "names"), [(0.0, ("fit", "val")), (1.0, ("fit", "val")), (0.5, ("dev", "val"))])
def test_holdout_rejects_bad_fractions_and_names(tmp_path: Path, fraction: float, names: tuple[str, str]) -> None:
    dataset = load_beir(write_beir(tmp_path / "tiny"), split="train")
    with pytest.raises(DatasetError):
        holdout_split(dataset, tmp_path / "held", fraction=fraction, names=names)


def test_every_preset_is_a_valid_flow() -> None:
    for name in RETRIEVAL_PRESETS:
        assert load_config(retrieval_preset(name)).name == name


def test_datasets_benchmark_names_missing_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_beir(tmp_path / "tiny", split="dev")
    assert main(["datasets", "--root", str(tmp_path), "--datasets", "tiny,absent"]) == 2
    assert "error: --datasets: no BEIR folder (corpus.jsonl) for absent under" in capsys.readouterr().err


@pytest.mark.integration
def test_datasets_benchmark_prints_retrieval_rows_for_sets_without_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    write_beir(tmp_path / "tiny", split="dev")
    assert main(["datasets", "--root", str(tmp_path), "--datasets", "tiny", "--presets", "bm25", "--quiet"]) == 0
    table = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in table if line.startswith("tiny"))
    assert row[2] == "bm25" and 0.0 <= float(row[3]) <= 1.0


@pytest.mark.integration
def test_patterns_benchmark_measures_from_the_ledger_and_writes_evals_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the real local model: one linear run over two demo questions; the row's counts come from the ledger
    (one cited-answer call and two retrievals per question) and ``--out`` writes eval's report files."""
    import json

    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    out = tmp_path / "report"
    args = ["patterns", "--runs", "linear-checked", "--limit", "2", "--quiet", "--out", str(out)]
    assert main([*args, "--json", str(tmp_path / "p.json")]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("linear-checked"))
    assert row[1:5] == ["1.0", "(1)", "2.0", "(2)"]  # LLM calls/q (max), retrievals/q (max)
    assert {p.name for p in out.iterdir()} == {"results.json", "results.csv", "quality_cost.png"}
    summary = json.loads((out / "results.json").read_text())["results"][0]
    assert summary["config"] == "linear-checked" and summary["llm_calls"] == 1.0 and summary["errors"] == 0
