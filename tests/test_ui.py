"""The workbench's web app (``modular-rag ui``) through Starlette's test client, on a copy of the demo index, with
LLM-free configs (the linear template answers extractively, and its document-graph hop variant) and one whose model
server is dead; Evaluate on the bundled demo set, checked against ``evaluate_flow``'s own figures."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modular_rag import template_path
from modular_rag.config import load_config

pytestmark = pytest.mark.integration

QUESTION = "What does error code E07 mean on the e-bike display?"


@pytest.fixture(scope="module")
def index_copy(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's demo index, so the feedback written beside it stays in this module."""
    folder = tmp_path_factory.mktemp("ui-index") / "index"
    shutil.copytree(demo_dir, folder)
    return folder


def configs() -> dict[str, Any]:
    """Three LLM-free configs and one whose model server is not there."""
    linear = load_config(template_path("linear")).to_dict()
    bm25 = json.loads(json.dumps(linear))
    bm25["name"] = "linear-bm25"
    bm25["operators"]["retrieve"] = {"name": "bm25", "params": {"k": 10}}
    dead = json.loads(json.dumps(linear))
    dead["name"] = "dead-model"
    dead["providers"]["llm"] = {
        "name": "openai",
        "model": "gone",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "MODULAR_RAG_UI_TEST_KEY",
        "max_retries": 0,
        "timeout_s": 5,
    }
    dead["operators"]["generate"] = {"name": "cited_answer", "params": {"mode": "llm"}}
    multihop = json.loads(json.dumps(linear))
    multihop["name"] = "linear-multihop"
    multihop["operators"]["retrieve"] = {"name": "hybrid", "params": {"k": 20, "pool": 20}}
    multihop["operators"]["rerank"] = {"name": "link_hop", "params": {"k": 10}}
    return {
        "linear": load_config(linear),
        "linear-bm25": load_config(bm25),
        "dead-model": load_config(dead),
        "linear-multihop": load_config(multihop),
    }


@pytest.fixture(scope="module")
def client(index_copy: Path) -> Any:
    from starlette.testclient import TestClient

    from modular_rag.ui import Workbench, create_app
    from modular_rag.ui.workbench import find_indexes

    with TestClient(create_app(Workbench(configs(), find_indexes(index_copy)))) as test_client:
        yield test_client


def ask(client: Any, question: str, config: str = "linear") -> list[dict[str, Any]]:
    """The events of one streamed run."""
    with client.stream("POST", "/api/ask", json={"question": question, "config": config}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        body = "".join(response.iter_text())
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]


def test_pages_render_with_every_choice(client: Any) -> None:
    pages = (("/", 'id="ask-form"'), ("/compare", 'id="compare-form"'), ("/feedback", "Export"))
    for path, marker in (*pages, ("/evaluate", 'id="evaluate-form"')):
        page = client.get(path)
        assert page.status_code == 200 and marker in page.text
        assert "linear-bm25" in page.text or path == "/feedback"
        assert "http://" not in page.text and "https://" not in page.text  # nothing fetched from the network
    for asset in ("/static/app.js", "/static/app.css"):
        assert client.get(asset).status_code == 200


def test_ask_streams_nodes_then_the_answer_with_its_citation(client: Any) -> None:
    events = ask(client, QUESTION)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "result"
    assert [e["node"] for e in events if e["event"] == "node"] == ["retrieve", "context", "generate"]
    assert "<svg" in events[0]["graph"] and 'id="node-generate"' in events[0]["graph"]
    result = events[-1]
    assert result["answer"]["text"] == "Error E07 means speed sensor signal lost [1]."
    (citation,) = result["answer"]["citations"]
    assert citation["verdict"] == "supported" and citation["title"] == "E-bike display error E07"
    assert result["totals"]["llm_calls"] == 0 and result["totals"]["retrievals"] == 2
    assert [e["node"] for e in result["ledger"]] == ["retrieve", "context", "generate"]
    assert result["index_version"].startswith("36 chunks")
    assert 0 < result["first_node_ms"] <= result["total_ms"]


def test_a_citation_opens_its_passage_with_the_quoted_sentence_marked(client: Any) -> None:
    result = ask(client, QUESTION)[-1]
    passage = client.get(f"/api/passage/{result['run_id']}/1").json()
    assert passage["title"] == "E-bike display error E07" and passage["verdict"] == "supported"
    assert passage["text"][passage["start"] : passage["end"]] == "Error E07 means speed sensor signal lost."
    missing = client.get(f"/api/passage/{result['run_id']}/7")
    assert missing.status_code == 400 and "has no citation [7]; its citations: [1]" in missing.json()["error"]
    assert "ask again" in client.get("/api/passage/nope/1").json()["error"]
    assert "not a number" in client.get(f"/api/passage/{result['run_id']}/x").json()["error"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"question": "  ?", "config": "linear"}, "has no words"),
        (
            {"question": QUESTION, "config": "nope"},
            "unknown config 'nope'; configs: linear, linear-bm25, dead-model, linear-multihop",
        ),
        ({"question": QUESTION, "config": "linear", "index": "elsewhere"}, "unknown index 'elsewhere'; indexes:"),
    ],
)
def test_bad_input_is_refused_with_what_is_allowed(client: Any, body: dict[str, Any], says: str) -> None:
    response = client.post("/api/ask", json=body)
    assert response.status_code == 400 and says in response.json()["error"]
    assert client.get("/healthz").json() == {"ok": True}


def test_a_dead_model_server_shows_a_message_and_the_server_serves_on(client: Any) -> None:
    events = ask(client, QUESTION, "dead-model")
    assert [e["event"] for e in events] == ["start", "node", "node", "error"]  # retrieve and context ran
    assert events[-1]["message"].startswith("generate (cited_answer): ProviderError: ")
    assert "http://127.0.0.1:9/v1" in events[-1]["message"]
    assert ask(client, QUESTION)[-1]["answer"]["citations"]


def test_compare_runs_each_config_and_shows_where_the_evidence_differs(client: Any) -> None:
    data = client.post("/api/compare", json={"question": QUESTION, "configs": ["linear", "linear-bm25"]}).json()
    assert [r["config"] for r in data["runs"]] == ["linear", "linear-bm25"]
    assert all("E07" in r["answer"]["text"] for r in data["runs"])
    rows = {row["chunk_id"]: row for row in data["evidence"]}
    cited = data["runs"][0]["answer"]["citations"][0]["chunk_id"]
    assert rows[cited]["shared"] and all(ref is not None for ref in rows[cited]["refs"])
    assert all(len(row["refs"]) == 2 for row in rows.values())
    one = client.post("/api/compare", json={"question": QUESTION, "configs": ["linear"]})
    assert one.status_code == 400 and "compare two or three" in one.json()["error"]


def test_feedback_is_stored_beside_the_index_and_exported_for_eval(
    client: Any, index_copy: Path, tmp_path: Path
) -> None:
    from modular_rag.eval.datasets import load_beir

    right = ask(client, QUESTION)[-1]
    stored = client.post("/api/feedback", json={"run_id": right["run_id"], "verdict": "right"}).json()
    assert Path(stored["stored_in"]) == index_copy / "feedback.sqlite"
    wrong = ask(client, "How long is the frame warranty?")[-1]
    passage = wrong["candidates"][0]["chunk_id"]
    body = {"run_id": wrong["run_id"], "verdict": "wrong", "right_answer": "ten years", "right_passage": passage}
    assert client.post("/api/feedback", json=body).status_code == 200
    unknown = client.post("/api/feedback", json={**body, "right_passage": "no-such-chunk"})
    assert unknown.status_code == 400 and "not a chunk of the index" in unknown.json()["error"]
    bad = client.post("/api/feedback", json={**body, "verdict": "maybe"})
    assert bad.status_code == 400 and "say right or wrong" in bad.json()["error"]
    page = client.get("/feedback").text
    assert "How long is the frame warranty?" in page and right["config_hash"] in page

    out = tmp_path / "feedback-set"
    done = client.post("/api/export", json={"out": str(out)}).json()
    assert done["questions"] == 2 and "modular-rag eval --dataset" in done["lines"][-1]
    dataset = load_beir(out)
    by_text = {q.text: q for q in dataset.queries}
    assert by_text[QUESTION].answers == ("Error E07 means speed sensor signal lost.",)
    assert by_text["How long is the frame warranty?"].answers == ("ten years",)
    assert dataset.qrels[by_text["How long is the frame warranty?"].id] == {passage: 1}
    assert sum(1 for _ in dataset.corpus()) == 36
    again = client.post("/api/export", json={"out": str(out)})
    assert again.status_code == 400 and "already holds a dataset" in again.json()["error"]
    assert '<option value="feedback-set (feedback)">' in client.get("/evaluate").text  # offered to Evaluate


def test_testset_from_feedback_on_the_command_line(client: Any, index_copy: Path, tmp_path: Path, capsys: Any) -> None:
    from modular_rag.cli import main

    result = ask(client, QUESTION)[-1]
    client.post("/api/feedback", json={"run_id": result["run_id"], "verdict": "right"})
    out = tmp_path / "set"
    assert main(["testset", "--from-feedback", str(index_copy / "feedback.sqlite"), "--out", str(out)]) == 0
    assert "questions (queries.jsonl, qrels.tsv)" in capsys.readouterr().out
    assert main(["testset", "--out", str(out)]) == 2
    assert "--from-feedback" in capsys.readouterr().err
    assert main(["testset", "--from-feedback", str(tmp_path / "none.sqlite"), "--out", str(out)]) == 2
    assert "feedback is stored as feedback.sqlite" in capsys.readouterr().err


def test_highlight_finds_the_sentence_an_answer_rests_on() -> None:
    from modular_rag.ui.workbench import highlight

    text = "Title line\nThe saddle is 27 cm wide. The frame is steel.\n\nIt weighs 12 kg."
    start, end = highlight(text, ["The frame is made of steel"]) or (0, 0)
    assert text[start:end] == "The frame is steel."
    assert highlight(text, ["nothing in common"]) is None


def test_the_graph_drawing_layers_a_loop() -> None:
    from modular_rag.ui.drawing import layers

    rows = layers(["s", "a", "b", "e"], [("s", "a"), ("a", "b"), ("b", "a"), ("b", "e")])
    assert rows == [["s"], ["a"], ["b"], ["e"]]


def test_the_ui_command_refuses_bad_input_before_serving(tmp_path: Path, capsys: Any) -> None:
    from modular_rag.cli import main

    assert main(["ui", "--port", "0"]) == 2
    assert "--port: 0: a port is 1 to 65535" in capsys.readouterr().err
    assert main(["ui", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["ui", "--index", str(tmp_path / "file")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["ui", "--dataset", str(tmp_path)]) == 2
    assert "corpus.jsonl is missing; a BEIR folder has" in capsys.readouterr().err


EVALUATED = ["linear", "linear-multihop"]


@pytest.fixture(scope="module")
def eval_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Evaluation indexes (``dataset_providers``'s cache) in this module's own folder."""
    home = tmp_path_factory.mktemp("eval-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODULAR_RAG_HOME", str(home))
        yield home


def wait_for(client: Any, started: dict[str, Any], timeout: float = 180) -> dict[str, Any]:
    """Poll an evaluation until it is done (or failed)."""
    status, deadline = started, time.monotonic() + timeout
    while status["state"] in ("queued", "running"):
        assert time.monotonic() < deadline, f"the evaluation did not finish in {timeout} s: {status}"
        time.sleep(0.2)
        status = client.get(f"/api/evaluate/{started['id']}").json()
    return status


@pytest.fixture(scope="module")
def evaluated(client: Any, eval_home: Path) -> dict[str, Any]:
    """The demo set (its default 20 questions) through two LLM-free configs, from the page's routes."""
    started = client.post("/api/evaluate", json={"dataset": "demo", "configs": EVALUATED}).json()
    assert started["state"] in ("queued", "running", "done") and started["configs"] == EVALUATED
    status = wait_for(client, started)
    assert status["state"] == "done" and status["done"] == status["total"] == 40, status
    return status


@pytest.fixture(scope="module")
def direct(eval_home: Path) -> dict[str, Any]:
    """The same questions and configs through ``evaluate_flow`` as ``modular-rag eval --dataset demo --limit 20``
    runs them."""
    from modular_rag.eval.datasets import load_demo
    from modular_rag.eval.runner import config_chunker, dataset_providers, evaluate_flow

    dataset = load_demo().limited(20, spread=True)
    out: dict[str, Any] = {"dataset": dataset}
    for name in EVALUATED:
        config = configs()[name]
        env = dataset_providers(
            dataset, config.providers, chunker=config_chunker(config, dataset.default_chunker), progress=False
        )
        out[name] = evaluate_flow(config, dataset, env, name=name)
    return out


def test_evaluate_gives_evaluate_flows_figures(evaluated: dict[str, Any], direct: dict[str, Any]) -> None:
    from modular_rag.eval.runner import judge_right

    report = evaluated["report"]
    assert report["dataset"] == "demo" and report["questions"] == 20 and report["quality"] == "right"
    assert [q.id for q in direct["dataset"].queries] == [row["qid"] for row in report["rows"]]
    for row in report["configs"]:
        expected = direct[row["config"]].summary()
        assert set(row["summary"]) == set(expected)
        for key, value in expected.items():
            if key != "ms":  # wall-clock time differs from run to run; every score and count is the same
                assert row["summary"][key] == value, (row["config"], key)
    assert report["configs"][0]["summary"]["right"] != report["configs"][1]["summary"]["right"]  # they differ
    dataset = direct["dataset"]
    for n, name in enumerate(EVALUATED):
        records = {r.qid: r for r in direct[name].records}
        cells = [row["cells"][n] for row in report["rows"]]
        assert [c["config"] for c in cells] == [name] * 20
        judged = [judge_right(q, dataset.qrels[q.id], records[q.id])[0] for q in dataset.queries]
        assert [c["value"] for c in cells] == judged
        assert sum(c["label"] == "right" for c in cells) / 20 == report["configs"][n]["summary"]["right"]
    chart = report["chart"]
    assert chart.startswith('<svg class="chart"') and report["cost"] == "ms"  # no config calls a model
    assert all(f'<g class="dot" data-config="{name}">' in chart for name in EVALUATED)


def test_a_cell_opens_its_run_and_says_why_it_was_wrong(
    client: Any, evaluated: dict[str, Any], direct: dict[str, Any]
) -> None:
    report, run_id = evaluated["report"], evaluated["id"]
    qid, n = next(
        (row["qid"], n) for row in report["rows"] for n, c in enumerate(row["cells"]) if c["label"] == "wrong"
    )
    config = EVALUATED[n]
    record = next(r for r in direct[config].records if r.qid == qid)
    gold = direct["dataset"].qrels[qid]
    run = client.get(f"/api/evaluate/{run_id}/run", params={"config": config, "qid": qid}).json()
    assert run["question"] == next(q.text for q in direct["dataset"].queries if q.id == qid)
    assert run["verdict"] == "wrong" and run["why"] and run["answer"]["text"] == record.answer
    assert [d["doc_id"] for d in run["retrieved"]] == record.docs
    assert [d["doc_id"] for d in run["gold"]] == list(gold)
    assert all(d["gold"] == (d["doc_id"] in gold) for d in run["retrieved"])
    assert [c["chunk_id"] for c in run["answer"]["citations"]] == [c["chunk_id"] for c in record.citations]
    assert all(c["title"] for c in run["answer"]["citations"])
    right_qid = next(row["qid"] for row in report["rows"] if row["cells"][0]["label"] == "right")
    right = client.get(f"/api/evaluate/{run_id}/run", params={"config": "linear", "qid": right_qid}).json()
    assert right["verdict"] == "right" and right["why"] == [] and any(c["gold"] for c in right["answer"]["citations"])
    missing = client.get(f"/api/evaluate/{run_id}/run", params={"config": "linear", "qid": "q999"})
    assert missing.status_code == 400 and "asked no question 'q999'" in missing.json()["error"]
    other = client.get(f"/api/evaluate/{run_id}/run", params={"config": "linear-bm25", "qid": qid})
    assert other.status_code == 400 and "ran no config 'linear-bm25'" in other.json()["error"]
    assert "run it again" in client.get("/api/evaluate/nope").json()["error"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"dataset": "elsewhere", "configs": ["linear"]}, "unknown test set 'elsewhere'; test sets: demo"),
        ({"dataset": "demo", "configs": ["linear", "nope"]}, "unknown config 'nope'; configs: linear, linear-bm25"),
        ({"dataset": "demo", "configs": []}, "0 distinct configs chosen; evaluate one to 4"),
        ({"dataset": "demo", "configs": ["linear", *"abcd"]}, "5 distinct configs chosen; evaluate one to 4"),
        ({"dataset": "demo", "configs": "linear"}, "give a list of one to 4 config names"),
        ({"dataset": "demo", "configs": ["linear"], "limit": 0}, "0: evaluate a whole number of questions from 1"),
        ({"dataset": "demo", "configs": ["linear"], "limit": 1001}, "1001: evaluate a whole number"),
        ({"dataset": "demo", "configs": ["linear"], "limit": "ten"}, "'ten': evaluate a whole number"),
    ],
)
def test_evaluate_refuses_bad_choices_with_what_is_allowed(client: Any, body: dict[str, Any], says: str) -> None:
    response = client.post("/api/evaluate", json=body)
    assert response.status_code == 400 and says in response.json()["error"], response.json()
    assert client.get("/healthz").json() == {"ok": True}


def test_a_run_that_fails_is_a_cell_that_says_so(client: Any, eval_home: Path) -> None:
    body = {"dataset": "demo", "configs": ["dead-model"], "limit": 2}
    status = wait_for(client, client.post("/api/evaluate", json=body).json())
    assert status["state"] == "done" and status["report"]["configs"][0]["summary"]["errors"] == 2.0
    cell = status["report"]["rows"][0]["cells"][0]
    assert cell["label"] == "error" and cell["value"] == 0.0
    params = {"config": "dead-model", "qid": status["report"]["rows"][0]["qid"]}
    run = client.get(f"/api/evaluate/{status['id']}/run", params=params).json()
    assert run["verdict"] == "wrong" and run["why"][0].startswith("the run failed: ")
    assert "http://127.0.0.1:9/v1" in run["error"]
