"""`modular-rag eval` and `modular-rag recommend` on a BEIR-format folder and on the demo questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from modular_rag.cli import main
from modular_rag.errors import DatasetError
from modular_rag.eval.datasets import load_beir, load_demo

pytestmark = pytest.mark.integration


def retrieval_config(tmp_path: Path, name: str, retrieve: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "name": name,
                "operators": {"retrieve": {"name": retrieve, "params": {"k": 5}}, "generate": "none"},
            }
        )
    )
    return str(path)


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    folder = tmp_path / "mini"
    folder.mkdir()
    docs = {
        "d1": "Chain lubricant keeps a bicycle chain quiet.",
        "d2": "Tyre pressure depends on rider weight.",
        "d3": "Disc brakes stop well in the wet.",
        "d4": "A helmet should sit level on the head.",
    }
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
    )
    queries = [
        ("q1", "How do I keep my chain quiet?", ["chain lubricant"]),
        ("q2", "Which brakes work in rain?", ["disc brakes"]),
    ]
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"id": q, "text": t, "answers": a}) + "\n" for q, t, a in queries)
    )
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    return folder


def test_eval_writes_a_deterministic_report(
    beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    configs = [retrieval_config(tmp_path, "bm25", "bm25"), retrieval_config(tmp_path, "dense", "dense")]
    for out in ("r1", "r2"):
        assert (
            main(
                [
                    "eval",
                    "--dataset",
                    str(beir),
                    "--config",
                    *configs,
                    "--out",
                    str(tmp_path / out),
                    "--quality",
                    "ndcg@10",
                    "--quiet",
                ]
            )
            == 0
        )
    table = capsys.readouterr().out
    assert "bm25" in table and "nDCG@10" in table
    bm25_row = next(line for line in table.splitlines() if line.startswith("bm25"))
    assert bm25_row.split()[6:11] == ["–"] * 5  # EM, F1, contains, supported, refused: nothing was answered
    reports = [json.loads((tmp_path / out / "results.json").read_text()) for out in ("r1", "r2")]
    for report in reports:
        for row in report["results"]:
            row.pop("ms")
        for records in report["queries"].values():
            for rec in records:
                rec.pop("ms")
    assert reports[0] == reports[1]
    assert {row["config"] for row in reports[0]["results"]} == {"bm25", "dense"}
    assert reports[0]["results"][0]["ndcg@10"] == 1.0  # each query's document comes first
    assert (tmp_path / "r1" / "results.csv").read_text().startswith("config,pattern,scored,ndcg@10")
    assert (tmp_path / "r1" / "quality_cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_recommend_picks_the_best_within_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    answer = tmp_path / "answer.yaml"
    answer.write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "name": "with-llm",
                "operators": {"generate": {"name": "cited_answer", "params": {"min_relevance": None}}},
            }
        )
    )  # always one LLM call
    configs = [retrieval_config(tmp_path, "bm25", "bm25"), retrieval_config(tmp_path, "hybrid", "hybrid"), str(answer)]
    code = main(
        [
            "recommend",
            "--dataset",
            "demo",
            "--config",
            *configs,
            "--max-llm-calls",
            "0",
            "--quality",
            "recall@5",
            "--limit",
            "6",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "with-llm" in out and "over budget by its cost model" in out
    assert "recommendation: bm25" in out or "recommendation: hybrid" in out


def test_datasets_report_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="qrels.tsv is missing"):
        (tmp_path / "corpus.jsonl").write_text("")
        (tmp_path / "queries.jsonl").write_text("")
        load_beir(tmp_path)
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(DatasetError, match="qrels.tsv:2: expected query-id, corpus-id, score"):
        load_beir(tmp_path)
    demo = load_demo()
    assert len(demo.queries) == 24 and all(demo.qrels[q.id] for q in demo.queries)
    assert [q.id for q in demo.limited(4, spread=True).queries] == ["q01", "q07", "q13", "q19"]


def test_recommend_honours_a_zero_llm_budget_and_scores_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config that may call the model (checked mode: only when its answer is not supported) is not run under
    --max-llm-calls 0; the default quality on a set with gold answers is 'right' (value, citation, refusals)."""
    from modular_rag import template_path

    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    checked = yaml.safe_load(template_path("linear").read_text())
    checked["name"] = "checked"
    checked["operators"]["generate"] = {"name": "cited_answer", "params": {"mode": "checked"}}
    extractive = yaml.safe_load(template_path("linear").read_text())
    extractive["name"] = "extractive"
    paths = []
    for config in (checked, extractive):
        path = tmp_path / f"{config['name']}.yaml"
        path.write_text(yaml.safe_dump(config))
        paths.append(str(path))
    code = main(
        ["recommend", "--dataset", "demo", "--config", *paths, "--max-llm-calls", "0", "--limit", "6", "--quiet"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "quality = right" in out
    row = next(line for line in out.splitlines() if line.startswith("checked"))
    assert "over budget by its cost model" in row
    assert "recommendation: extractive (right " in out
