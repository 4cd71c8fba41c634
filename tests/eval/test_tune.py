"""`modular-rag tune` on the demo corpus: spaces, the recorded split, cost-model rejection, pruning on subsets,
the files it writes (best.yaml reproduces its val score through `eval`), and resuming after SIGINT and SIGKILL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from modular_rag.config import load_config
from modular_rag.costs import estimate
from modular_rag.errors import ConfigError, DatasetError
from modular_rag.eval.tune import TuneSettings, load_space, tune
from modular_rag.eval.tune.data import prepare_data
from modular_rag.eval.tune.records import pareto_front, rungs
from modular_rag.eval.tune.space import default_space_path

pytestmark = pytest.mark.integration

SMALL_SPACE: dict[str, Any] = {
    "objective": "ndcg@10",
    "providers": {"sparse": {"k1": {"float": [0.6, 1.8], "step": 0.6}}},
    "patterns": {
        "linear": {
            "operators": {
                "rewrite": "none",
                "retrieve": {
                    "choice": [
                        {"name": "bm25", "params": {"k": 20}},
                        {
                            "name": "hybrid",
                            "params": {
                                "k": 20,
                                "pool": {"int": [10, 30], "step": 10},
                                "fusion": {"choice": ["rrf", "convex"]},
                            },
                        },
                    ]
                },
                "context": "none",
                "generate": "none",
            }
        }
    },
}


@pytest.fixture
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One evaluation cache for the module's runs (the demo corpus is indexed once)."""
    folder = tmp_path_factory.getbasetemp() / "tune-home"
    monkeypatch.setenv("MODULAR_RAG_HOME", str(folder))
    return folder


def _states(db: Path) -> dict[int, tuple[str, float | None]]:
    """Trial number -> (state, value), read from the study file the way another process would."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "select t.number, t.state, v.value from trials t left join trial_values v on v.trial_id = t.trial_id"
        ).fetchall()
    return {int(n): (str(s), v) for n, s, v in rows}


# ------------------------------------------------------------------------------------------------------ spaces
@pytest.mark.unit
def test_a_malformed_distribution_names_its_path() -> None:
    bad = {"patterns": {"linear": {"operators": {"retrieve": {"name": "hybrid", "params": {"pool": {"int": [9]}}}}}}}
    with pytest.raises(ConfigError) as err:
        load_space(bad)
    assert "linear.operators.retrieve.params.pool" in str(err.value) and "[low, high]" in str(err.value)
    with pytest.raises(ConfigError, match="unknown pattern"):
        load_space({"patterns": {"lineal": {}}})
    with pytest.raises(ConfigError, match="objectives"):
        load_space({"objective": "accuracy", "patterns": {"linear": {}}})


@pytest.mark.unit
def test_parameters_exist_only_under_the_alternative_drawn() -> None:
    space = load_space(SMALL_SPACE)
    bm25 = space.draw(optuna.trial.FixedTrial({"linear.operators.retrieve": "bm25", "providers.sparse.k1": 1.2}))
    assert bm25.config["operators"]["retrieve"] == {"name": "bm25", "params": {"k": 20}}
    assert set(bm25.params) == {"linear.operators.retrieve", "providers.sparse.k1"}
    hybrid = space.draw(
        optuna.trial.FixedTrial(
            {
                "linear.operators.retrieve": "hybrid",
                "linear.operators.retrieve=hybrid.params.pool": 20,
                "linear.operators.retrieve=hybrid.params.fusion": "convex",
                "providers.sparse.k1": 0.6,
            }
        )
    )
    assert hybrid.config["operators"]["retrieve"]["params"] == {"k": 20, "pool": 20, "fusion": "convex"}
    assert hybrid.config["providers"]["sparse"] == {"k1": 0.6}
    assert bm25.key() != hybrid.key()


@pytest.mark.parametrize("objective", ["ndcg@10", "all@5", "f1"])
def test_every_candidate_of_the_default_spaces_is_a_valid_config_with_a_cost(objective: str) -> None:
    space = load_space(None, objective=objective)
    assert space.objective == objective and default_space_path(objective).exists()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    patterns = set()
    for _ in range(40):
        candidate = space.draw(study.ask())
        config = load_config(candidate.config)
        assert estimate(config).llm_calls.lo >= 0
        patterns.add(config.pattern)
    assert patterns == set(space.patterns)


# ------------------------------------------------------------------------------------------------------- split
def test_the_split_is_seeded_disjoint_recorded_and_reused(tmp_path: Path) -> None:
    data = prepare_data("demo", tmp_path, seed=3)
    fit, val, report = ({q.id for q in d.queries} for d in (data.fit, data.val, data.report))  # type: ignore[union-attr]
    assert fit and val and report and not (fit & val or fit & report or val & report)
    assert len(fit | val | report) == 24
    record = json.loads((tmp_path / "data" / "split.json").read_text())
    assert record["seed"] == 3 and set(record["val"]) == val and record["report_split"] == "held out"
    again = prepare_data("demo", tmp_path, seed=3)
    assert [q.id for q in again.val.queries] == [q.id for q in data.val.queries]
    with pytest.raises(DatasetError, match="other settings"):
        prepare_data("demo", tmp_path, seed=4)


def test_a_dataset_with_a_train_split_tunes_on_it_and_reports_on_dev(tmp_path: Path) -> None:
    beir = tmp_path / "beir"
    beir.mkdir()
    docs = [{"_id": f"d{i}", "title": f"T{i}", "text": f"document {i} about topic {i % 3}"} for i in range(12)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    for prefix, ids in (("train_", range(0, 10)), ("", range(10, 14))):
        (beir / f"{prefix}queries.jsonl").write_text(
            "".join(json.dumps({"_id": f"q{i}", "text": f"topic {i % 3}"}) + "\n" for i in ids)
        )
        (beir / f"{prefix}qrels.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i % 12}\t1\n" for i in ids)
        )
    data = prepare_data(str(beir), tmp_path / "run")
    assert {q.id for q in data.fit.queries} | {q.id for q in data.val.queries} == {f"q{i}" for i in range(10)}
    assert data.report is not None and {q.id for q in data.report.queries} == {f"q{i}" for i in range(10, 14)}


@pytest.mark.unit
def test_the_paired_pruner_prunes_only_what_trails_beyond_noise_on_the_same_questions() -> None:
    from modular_rag.eval.tune.pruning import SCORES, PairedPruner

    study = optuna.create_study(direction="maximize")
    best = [1.0, 0.0] * 20  # 40 questions: the best finished trial answers every other one
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={SCORES: best, "feasible": True}))
    pruner = PairedPruner()

    def running(scores: list[float]) -> Any:
        trial = optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, user_attrs={SCORES: scores})
        return trial

    # far behind on the same 30 questions: pruned
    assert pruner.prune(study, running([0.0] * 30))
    # a lucky-looking rung is no shield, an unlucky one no sentence: behind on 2 of 30 questions is noise
    assert not pruner.prune(study, running(best[:28] + [0.0, 0.0]))
    # ahead on other questions, level on average: not pruned
    assert not pruner.prune(study, running([0.0, 1.0] * 15))
    # nothing to compare with: not pruned
    assert not PairedPruner().prune(optuna.create_study(direction="maximize"), running([0.0] * 30))


@pytest.mark.unit
def test_rungs_grow_by_the_reduction_factor_and_end_at_every_question() -> None:
    assert rungs(162, min_questions=20) == [20, 60, 162]
    assert rungs(900, min_questions=20) == [100, 300, 900]
    assert rungs(12, min_questions=20) == [12]
    assert rungs(4, min_questions=2, reduction=2) == [2, 4]


# ------------------------------------------------------------------------------------------------------ search
def test_tune_writes_a_best_config_that_eval_reproduces(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    settings = TuneSettings(budget_s=300, max_trials=10, min_questions=2, confirm=3)
    result = tune("demo", out, settings, space=load_space(SMALL_SPACE))
    assert result.finished and result.best is not None
    assert sum(r.state == "complete" for r in result.rows) >= 3
    best = load_config(out / "best.yaml")
    assert best.name == "tune-best" and best.indexing.chunker.name == "recursive"
    assert best.operators["retrieve"].name == result.best.config["operators"]["retrieve"]["name"]
    # chosen by fit+val among the best few by val
    assert result.best.confirmed is not None
    # the same config scored again on the val questions gives the recorded value
    from modular_rag.eval.runner import dataset_providers, evaluate_flow

    env = dataset_providers(result.data.val, best.providers, chunker=best.indexing.chunker, progress=False)
    assert evaluate_flow(best, result.data.val, env).summary()["ndcg@10"] == pytest.approx(result.best.value)
    # every front file is a runnable config, and nothing on the front is beaten on quality and cost
    front = sorted((out / "pareto").glob("*.yaml"))
    assert front and all(load_config(p).pattern == "linear" for p in front)
    assert [r.number for r in pareto_front(result.rows)] == [r.number for r in result.front]
    table = (out / "trials.txt").read_text()
    assert "val ndcg@10" in table and "decision" in table and str(result.best.number) in table
    assert (out / "pareto.png").stat().st_size > 0
    assert "report split" in (out / "report.txt").read_text()
    data = json.loads((out / "tune.json").read_text())
    assert data["best"] == result.best.number and len(data["trials"]) == len(result.rows)


def test_the_cost_model_rejects_what_the_llm_budget_cannot_afford_before_it_runs(home: Path, tmp_path: Path) -> None:
    space = {
        "patterns": {
            "linear": {
                "operators": {
                    "rewrite": {"choice": ["none", "rewrite", "step_back"]},
                    "retrieve": {"name": "bm25", "params": {"k": 5}},
                    "context": {"name": "evidence_first", "params": {"max_chunks": 2}},
                    "generate": {"name": "cited_answer", "params": {"mode": "extractive"}},
                }
            }
        },
    }
    result = tune(
        "demo",
        tmp_path / "run",
        TuneSettings(budget_s=300, objective="f1", max_llm_calls=0, max_trials=6, min_questions=2, report=False),
        space=load_space(space),
    )
    rejected = [r for r in result.rows if "cost model" in r.verdict]
    assert rejected, [r.verdict for r in result.rows]
    # the query rewriters always call the model: ruled out without a single question asked
    assert {r.config["operators"]["rewrite"] for r in rejected} == {"rewrite", "step_back"}
    assert all(r.questions == 0 and r.llm_calls is None for r in rejected)
    assert result.best is not None and result.best.llm_calls == 0
    assert result.best.config["operators"]["rewrite"] == "none"


@pytest.mark.parametrize("pruner", ["halving"])
def test_the_pruner_stops_trailing_candidates_on_a_subset(home: Path, tmp_path: Path, pruner: Any) -> None:
    space = {
        "patterns": {
            "linear": {
                "operators": {
                    "rewrite": "none",
                    "context": "none",
                    "generate": "none",
                    "retrieve": {"name": "dense", "params": {"k": {"int": [1, 10]}}},
                }
            }
        }
    }
    # recall@10 grows with k: small k trails at every rung
    result = tune(
        "demo",
        tmp_path / "run",
        TuneSettings(
            budget_s=300,
            max_trials=24,
            min_questions=2,
            pruner=pruner,
            objective="recall@10",
            reduction=2,
            val_fraction=0.9,
            report_fraction=0.0,
            report=False,
            confirm=0,
        ),
        space=load_space(space),
    )
    pruned = [r for r in result.rows if r.verdict.startswith("pruned at")]
    full = len(result.data.val.queries)
    assert pruned and all(0 < r.questions < full for r in pruned)
    assert all(r.questions == full for r in result.rows if r.verdict == "complete")


def test_a_folder_of_documents_with_a_questions_file_is_a_dataset(home: Path, tmp_path: Path) -> None:
    from modular_rag import demo_corpus_path

    client = tmp_path / "client"
    shutil.copytree(demo_corpus_path(), client / "corpus")
    questions = client / "asked.jsonl"
    rows = [json.loads(line) for line in (demo_corpus_path().parent / "questions.jsonl").read_text().splitlines()]
    questions.write_text("".join(json.dumps({k: r[k] for k in ("id", "text", "relevant")}) + "\n" for r in rows))
    result = tune(
        str(client),
        tmp_path / "run",
        TuneSettings(budget_s=300, max_trials=3, min_questions=2),
        space=load_space(SMALL_SPACE),
        questions=str(questions),
    )
    assert result.best is not None and result.best.value is not None and result.best.value > 0.5


# ------------------------------------------------------------------------------------------------------ resume
def _tune_cmd(out: Path, trials: int) -> list[str]:
    space = out.parent / "space.yaml"
    space.write_text(yaml.safe_dump(SMALL_SPACE))
    return [
        sys.executable,
        "-m",
        "modular_rag.cli",
        "tune",
        "--dataset",
        "demo",
        "--out",
        str(out),
        "--space",
        str(space),
        "--budget",
        "10m",
        "--trials",
        str(trials),
        "--min-questions",
        "2",
        "--quiet",
    ]


def _wait_for(db: Path, complete: int, proc: subprocess.Popen[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if db.exists():
            try:
                if sum(s == "COMPLETE" for s, _ in _states(db).values()) >= complete:
                    return
            except sqlite3.OperationalError:  # the tables are being created
                pass
        time.sleep(0.2)
    raise AssertionError(f"fewer than {complete} trials finished in {timeout}s")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_an_interrupted_tune_continues_the_same_study_and_keeps_every_finished_trial(
    home: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "MODULAR_RAG_HOME": str(home)}
    proc = subprocess.Popen(_tune_cmd(out, 12), env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(out / "study.db", 3, proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130, stderr
        assert "interrupted" in stdout and "interrupted" in (out / "trials.txt").read_text()
    else:
        assert proc.returncode == -signal.SIGKILL
    before = _states(out / "study.db")
    finished = {n: v for n, (s, v) in before.items() if s == "COMPLETE"}
    assert len(finished) >= 3
    again = subprocess.run(_tune_cmd(out, 12), env=env, text=True, capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr
    after = _states(out / "study.db")
    assert all(after[n] == ("COMPLETE", v) for n, v in finished.items())  # nothing finished is lost or redone
    assert sum(s in ("COMPLETE", "PRUNED") for s, _ in after.values()) >= 12
    assert not any(s == "RUNNING" for s, _ in after.values())
    study = optuna.load_study(study_name="tune", storage=f"sqlite:///{out / 'study.db'}")
    for number in (n for n, (s, _) in before.items() if s in ("RUNNING", "FAIL")):  # cut short: run again
        cut = study.trials[number]
        assert cut.state.name == "FAIL"
        if cut.params:
            # the same candidate: every value it had drawn (a kill while it was being drawn leaves a prefix)
            assert any(
                t.user_attrs.get("rerun_of") == number and cut.params.items() <= t.params.items() for t in study.trials
            )
    assert load_config(out / "best.yaml").name == "tune-best"


def test_a_study_is_resumed_only_with_the_settings_it_was_made_with(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    tune(
        "demo",
        out,
        TuneSettings(budget_s=60, max_trials=2, min_questions=2, report=False),
        space=load_space(SMALL_SPACE),
    )
    with pytest.raises(ConfigError, match="other settings"):
        tune(
            "demo",
            out,
            TuneSettings(budget_s=60, max_trials=2, min_questions=2, objective="recall@10"),
            space=load_space(SMALL_SPACE),
        )


def test_the_router_stage_routes_between_front_flows_and_competes_as_a_trial(home: Path, tmp_path: Path) -> None:
    space = {
        "objective": "recall@5",
        "patterns": {
            "linear": {
                "operators": {
                    "rewrite": "none",
                    "context": "none",
                    "generate": "none",
                    "retrieve": {
                        "choice": [
                            {"name": "bm25", "params": {"k": 5}},
                            {"name": "dense", "params": {"k": 5}},
                            {"name": "hybrid", "params": {"k": 10, "pool": 10}},
                        ]
                    },
                }
            }
        },
    }
    out = tmp_path / "run"
    result = tune(
        "demo",
        out,
        TuneSettings(
            budget_s=300,
            objective="recall@5",
            max_trials=6,
            min_questions=2,
            router=True,
            report=False,
            val_fraction=0.4,
        ),
        space=load_space(space),
    )
    routed = [r for r in result.rows if r.summary.startswith("learned router")]
    assert len(routed) == 1 and routed[0].value is not None and routed[0].questions == len(result.data.val.queries)
    config = load_config(routed[0].config)
    assert config.pattern == "conditional" and (out / "router" / "router.json").exists()
    # resuming does not train a second router
    again = tune(
        "demo",
        out,
        TuneSettings(
            budget_s=300,
            objective="recall@5",
            max_trials=6,
            min_questions=2,
            router=True,
            report=False,
            val_fraction=0.4,
        ),
        space=load_space(space),
    )
    assert sum(r.summary.startswith("learned router") for r in again.rows) == 1


def test_a_candidate_far_slower_than_the_budget_allows_is_stopped_early(home: Path, tmp_path: Path) -> None:
    # one trial may take 0.1 s of the budget: every candidate is stopped before it has asked all 22 val questions
    result = tune(
        "demo",
        tmp_path / "run",
        TuneSettings(
            budget_s=100,
            max_trial_share=0.001,
            max_trials=2,
            min_questions=2,
            val_fraction=0.9,
            report_fraction=0.0,
            report=False,
        ),
        space=load_space(SMALL_SPACE),
    )
    slow = [r for r in result.rows if r.verdict.startswith("too slow")]
    assert slow and all(0 < r.questions < 22 for r in slow)
    assert result.best is None


@pytest.mark.unit
def test_without_optuna_tune_says_which_extra_installs_it(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'optuna':\n"
        "            raise ImportError('No module named optuna')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from modular_rag.errors import MissingDependencyError\n"
        "from modular_rag.eval.tune import TuneSettings, tune\n"
        "try:\n"
        f"    tune('demo', {str(tmp_path / 'run')!r}, TuneSettings(budget_s=1))\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 'pip install "modular-rag[eval]"' in out.stdout
