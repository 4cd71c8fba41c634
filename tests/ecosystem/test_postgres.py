"""The production topology on real servers: a PostgreSQL server on loopback holding the threads' checkpoints
(``langgraph-checkpoint-postgres``) and a Milvus server holding the index, shared by several stateless worker
processes. A conversation started on one worker continues on another; neither holds a copy of the corpus."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

from modular_rag import demo_corpus_path
from modular_rag.config import ProvidersConfig
from modular_rag.ingest import index_paths
from modular_rag.providers import Providers
from tests.ecosystem.conftest import REPO, free_port
from tests.ecosystem.test_milvus import _child_env, milvus_uri, needs_milvus  # noqa: F401 - the fixture

pytestmark = [
    pytest.mark.integration,
    needs_milvus,
    pytest.mark.skipif(
        find_spec("langgraph.checkpoint.postgres") is None,
        reason="langgraph-checkpoint-postgres is not installed (the server extra)",
    ),
]

WORKER = r"""
import json, os, sys
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from modular_rag.builder import build_flow
from modular_rag.state import FlowOutput

config, url, thread, question = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
with PostgresSaver.from_conn_string(url) as saver:
    saver.setup()
    flow = build_flow(config, checkpointer=saver, output_schema=FlowOutput)
    out = flow.invoke({"messages": [HumanMessage(question)]}, {"configurable": {"thread_id": thread}})
    checkpoints = len(list(saver.list({"configurable": {"thread_id": thread}})))
print(json.dumps({"pid": os.getpid(), "answer": out["answer"]["text"], "turns": len(out["messages"]),
                  "checkpoints": checkpoints, "said": [m.content for m in out["messages"]]}))
"""


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None
    )
    if found is None:
        pytest.skip(f"PostgreSQL's {name} is not installed (scripts/setup.sh installs Debian's postgresql)")
    return found


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server on a free loopback port over a fresh cluster (as the ``postgres`` user when run as root:
    the server refuses root)."""
    import tempfile

    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    folder = Path(tempfile.mkdtemp(prefix="modular-rag-pg-"))  # not under pytest's root-only folder: postgres reads it
    folder.chmod(0o755)
    data, sock = folder / "data", folder / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run(
        [*as_user, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-p {port} -k {sock} -h 127.0.0.1"
    subprocess.run(
        [*as_user, pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "fast", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def _worker(config: dict, url: str, thread: str, question: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(config), url, thread, question],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_child_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_thread_started_on_one_worker_continues_on_another(
    postgres_url: str,
    milvus_uri: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    vectorstore = {"name": "milvus", "uri": milvus_uri, "collection": "workers", "catalog": str(tmp_path / "catalog")}
    summary = index_paths(
        [demo_corpus_path()], Providers(ProvidersConfig.model_validate({"vectorstore": vectorstore})), progress=False
    )
    assert summary.files_indexed == 36
    config = {
        "pattern": "linear",
        "providers": {"vectorstore": vectorstore},
        "operators": {
            "retrieve": {"name": "hybrid", "params": {"k": 8}},
            "rerank": {"name": "link_hop", "params": {"k": 8}},
            "context": "evidence_first",
            "generate": {"name": "cited_answer", "params": {"mode": "extractive"}},
        },
    }
    first = _worker(config, postgres_url, "ticket-4711", "What does error code E07 mean on the e-bike display?")
    second = _worker(config, postgres_url, "ticket-4711", "What does error code E12 mean on the e-bike display?")
    other = _worker(config, postgres_url, "ticket-4712", "How much does the TW-900 Carbon Road weigh?")
    assert first["pid"] != second["pid"]  # two worker processes ...
    assert "speed sensor signal lost" in first["answer"] and "overtemperature" in second["answer"]
    assert second["turns"] == 4 and first["said"] == second["said"][:2]  # ... one conversation, resumed from Postgres
    assert second["checkpoints"] > first["checkpoints"]
    assert other["turns"] == 2 and "7.6 kg" in other["answer"]  # another thread never sees the first one's turns
