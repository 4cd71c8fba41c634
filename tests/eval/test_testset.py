"""``modular-rag testset``: a labelled BEIR folder from a folder of documents, which eval, recommend, tune and
train-router read unchanged; an LLM maker's invented answers are dropped by the attribution check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modular_rag.config import ProvidersConfig
from modular_rag.errors import ConfigError
from modular_rag.eval.datasets import load_beir
from modular_rag.eval.testset import make_testset
from modular_rag.providers import Providers
from tests.conftest import DEMO, ScriptedChat


@pytest.fixture(scope="module")
def testset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("testset")
    make_testset([DEMO], out, size=30, seed=0)
    return out


@pytest.mark.unit
def test_the_set_is_a_beir_folder_with_train_and_dev_splits(testset: Path) -> None:
    dev, train = load_beir(testset), load_beir(testset, split="train")
    assert len(dev.queries) + len(train.queries) == 30 and len(train.queries) >= 10 and len(dev.queries) >= 10
    assert not {q.id for q in dev.queries} & {q.id for q in train.queries}
    corpus = {row["id"]: row for row in dev.corpus()}
    for ds in (dev, train):
        for q in ds.queries:
            assert set(ds.qrels[q.id]) == set(q.extra["gold"]) and set(q.extra["gold"]) <= set(corpus)
            for span in q.extra["evidence"]:
                assert corpus[span["doc"]]["text"][span["start"] : span["end"]] == span["text"]
            if q.answers:
                assert any(q.answers[0].lower() in corpus[g]["text"].lower() for g in q.extra["gold"])
            assert not any(q.text.lower().rstrip("?.") in corpus[g]["text"].lower() for g in q.extra["gold"])
    kinds = {q.extra["kind"] for q in dev.queries + train.queries}
    assert {"inverse_cloze", "wh"} <= kinds
    report = (testset / "report.md").read_text(encoding="utf-8")
    for part in ("## Questions per kind", "## Answer types", "## Passage coverage", "## Sample"):
        assert part in report


@pytest.mark.unit
def test_tune_and_train_router_read_the_set_as_it_is(testset: Path, tmp_path: Path) -> None:
    from modular_rag.eval.tune.data import prepare_data, read_source

    tune_on, report = read_source(str(testset))
    assert tune_on.split == "train" and report is not None and report.split == "dev"
    data = prepare_data(str(testset), tmp_path)
    assert data.record["report_split"] == "dev" and len(data.fit.queries) + len(data.val.queries) == len(
        tune_on.queries
    )


@pytest.mark.unit
def test_the_same_seed_makes_the_same_set(testset: Path, tmp_path: Path) -> None:
    make_testset([DEMO], tmp_path, size=30, seed=0)
    for name in ("queries.jsonl", "train_queries.jsonl", "qrels.tsv"):
        assert (tmp_path / name).read_text() == (testset / name).read_text()


@pytest.mark.unit
def test_an_unknown_maker_names_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="valid names: none, .*inverse_cloze"):
        make_testset([DEMO], tmp_path, makers=["nonesuch"])
    with pytest.raises(ConfigError, match="makers.0.params"):
        make_testset([DEMO], tmp_path, {"makers": [{"name": "inverse_cloze", "params": {"drop": 2}}]})


@pytest.mark.unit
def test_llm_questions_whose_answer_is_not_in_the_passage_are_dropped(tmp_path: Path) -> None:
    def reply(prompt: str) -> str:
        if prompt.startswith("Answer in a few words"):
            return "No idea."
        if "E07" in prompt:  # a question whose answer the passage holds
            return "Question: What does error E07 mean?\nAnswer: speed sensor signal lost"
        return "Question: Who founded the company on the moon?\nAnswer: Captain Nemo"  # invented

    env = Providers(ProvidersConfig(llm=ScriptedChat.of(reply)))
    config = {
        "makers": [{"name": "llm", "params": {"kinds": ["single"]}}],
        "size": 36,
        "oversample": 1.0,
        "checks": ["answer_in_passage", "closed_book", "dedup"],
    }
    result = make_testset([DEMO], tmp_path, config, providers=env)
    rows = [
        json.loads(line)
        for name in ("queries.jsonl", "train_queries.jsonl")
        for line in (tmp_path / name).read_text().splitlines()
    ]
    assert rows and all(r["answers"] == ["speed sensor signal lost"] for r in rows)
    assert result.counts["single"]["dropped: answer_in_passage"] >= 30


@pytest.mark.unit
def test_closed_book_drops_what_the_model_answers_without_passages(tmp_path: Path) -> None:
    def reply(prompt: str) -> str:
        if prompt.startswith("Answer in a few words"):
            return "Speed sensor signal lost." if "E07" in prompt else "No idea."
        if "E07" in prompt or "E12" in prompt:
            code = "E07" if "E07" in prompt else "E12"
            return f"Question: What does error {code} mean?\nAnswer: {code}"
        return "nothing"

    env = Providers(ProvidersConfig(llm=ScriptedChat.of(reply)))
    config = {
        "makers": [{"name": "llm", "params": {"kinds": ["single"]}}],
        "size": 36,
        "oversample": 1.0,
        "checks": ["closed_book"],
    }
    result = make_testset([DEMO], tmp_path, config, providers=env)
    assert result.counts["single"].get("dropped: closed_book", 0) == 0  # the model never says the code itself

    def knows(prompt: str) -> str:
        return "It is E07." if prompt.startswith("Answer in a few words") else reply(prompt)

    env = Providers(ProvidersConfig(llm=ScriptedChat.of(knows)))
    result = make_testset([DEMO], tmp_path, config, providers=env)
    assert result.counts["single"]["dropped: closed_book"] >= 1


@pytest.mark.unit
def test_the_command_line_writes_the_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from modular_rag.cli import main

    assert (
        main(
            ["testset", str(DEMO), "--out", str(tmp_path), "--size", "12", "--kinds", "inverse_cloze", "fact_question"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "test set: 12 questions" in printed and "report:" in printed
    assert (tmp_path / "train_queries.jsonl").exists() and (tmp_path / "unanswerable.jsonl").exists()


@pytest.mark.integration
def test_eval_and_recommend_read_the_set(testset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from modular_rag.config import load_config
    from modular_rag.eval.recommend import recommend

    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path))
    configs = [
        (
            name,
            load_config(
                {
                    "pattern": "linear",
                    "operators": {
                        "retrieve": {"name": name, "params": {"k": 10}},
                        "context": "none",
                        "generate": "none",
                    },
                }
            ),
        )
        for name in ("bm25", "dense")
    ]
    rec = recommend(load_beir(testset), configs, quality="ndcg@10", progress=False)
    assert rec.best is not None and all(c.quality is not None and c.quality > 0.2 for c in rec.candidates)


@pytest.mark.unit
def test_held_out_sentences_leave_the_sets_corpus(tmp_path: Path) -> None:
    config = {
        "makers": [
            {"name": "inverse_cloze", "params": {"remove": 1.0, "drop": 0.0, "max_words": 100}},
            {"name": "fact_question"},
        ],
        "size": 24,
    }
    make_testset([DEMO], tmp_path / "held", config)
    whole_sentences = [{"name": "inverse_cloze", "params": {"remove": 0.0}}, "fact_question"]
    make_testset([DEMO], tmp_path / "kept", {**config, "makers": whole_sentences})
    held, kept = load_beir(tmp_path / "held"), load_beir(tmp_path / "kept")
    corpus = {row["id"]: row["text"] for row in held.corpus()}
    whole = {row["id"]: row["text"] for row in kept.corpus()}
    assert set(corpus) == set(whole)
    rows = held.queries + load_beir(tmp_path / "held", split="train").queries
    out = [q.extra["held_out"] for q in rows if q.extra["kind"] == "inverse_cloze"]
    assert out and all(q.extra.get("held_out") is None for q in rows if q.extra["kind"] != "inverse_cloze")
    cut = {o["doc"] for o in out}
    for o in out:  # the sentence is gone from its passage, and was there, at the place given
        assert o["text"] not in corpus[o["doc"]] and o["text"] in whole[o["doc"]]
        assert whole[o["doc"]].startswith(corpus[o["doc"]][: o["at"]])
    assert all(corpus[d] == whole[d] for d in set(corpus) - cut)  # no other passage changed
    for q in rows:  # other questions' evidence still points at its text
        for span in q.extra["evidence"]:
            assert corpus[span["doc"]][span["start"] : span["end"]] == span["text"]


@pytest.mark.unit
def test_bridge_share_read_from_the_corpus(tmp_path: Path) -> None:
    from modular_rag.eval.testset.build import MakerSpec, _quotas

    specs = [
        MakerSpec(name="inverse_cloze"),
        MakerSpec(name="fact_question", share=3.0),
        MakerSpec(name="bridge", share="corpus"),
    ]
    assert _quotas(specs, 100, {2: 0.2}) == [20, 60, 20]
    result = make_testset(
        [DEMO], tmp_path, {"makers": ["inverse_cloze", {"name": "bridge", "share": "corpus"}], "size": 20}
    )
    assert any(n.startswith("bridge takes ") and "read from the corpus" in n for n in result.notes)
    with pytest.raises(ConfigError, match="makers.0.share: inverse_cloze cannot read its share from the corpus"):
        make_testset([DEMO], tmp_path, {"makers": [{"name": "inverse_cloze", "share": "corpus"}]})
