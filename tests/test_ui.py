"""The workbench's web app (``modular-rag ui``) through Starlette's test client, on a copy of the demo index, with
LLM-free configs (the linear template answers extractively) and one whose model server is dead."""

from __future__ import annotations

import json
import shutil
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
    """Two LLM-free configs and one whose model server is not there."""
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
    return {"linear": load_config(linear), "linear-bm25": load_config(bm25), "dead-model": load_config(dead)}


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
    for path, marker in (("/", 'id="ask-form"'), ("/compare", 'id="compare-form"'), ("/feedback", "Export")):
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
        ({"question": QUESTION, "config": "nope"}, "unknown config 'nope'; configs: linear, linear-bm25, dead-model"),
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
