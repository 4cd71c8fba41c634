"""Milvus as the shared index: ``providers.vectorstore: {name: milvus, uri, collection}`` against two real servers on
loopback, each test that takes ``server`` once on each: ``milvus-lite server`` (the pure-Python engine, with Milvus's
BM25 function) and ``milvus-server`` (the PyPI ``milvus`` package: Milvus 2.3.5 standalone, the C++ engine, which
predates BM25 in Milvus, so BM25 ranks over the kit's postings there). Two client processes; where filters
translated to Milvus expressions; sync deletes; an embedded Milvus Lite file."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modular_rag import demo_corpus_path
from modular_rag import milvus as milvus_module
from modular_rag.config import MilvusConfig, ProvidersConfig
from modular_rag.errors import ConfigError, ProviderError
from modular_rag.index import matches_where
from modular_rag.ingest import index_paths
from modular_rag.milvus import MilvusStore
from modular_rag.milvus_terms import where_to_expr
from modular_rag.providers import Providers
from operators.fusion import rrf
from tests.ecosystem.conftest import REPO, background, executable, free_port

needs_milvus = pytest.mark.skipif(
    find_spec("pymilvus") is None or find_spec("milvus_lite") is None,
    reason="pymilvus / milvus-lite are not installed (the milvus extra: pip install -e '.[milvus]')",
)
QUESTION = "What does error code E07 mean on the e-bike display?"

# A client that opens the index before anything is in it, then (told on stdin) retrieves what another process added.
READER = r"""
import json, sys
from modular_rag.builder import build_flow
from modular_rag.config import ProvidersConfig
from modular_rag.providers import Providers

vs = json.loads(sys.argv[1])
env = Providers(ProvidersConfig.model_validate({"vectorstore": vs}))
def shared():  # what the writer's adds put in the shared catalog: term statistics and the link table
    return {"df": env.index.catalog.document_frequencies(["e07"])["e07"],
            "named": len(env.index.links.named_in("which battery does the tw-e2 cargo have"))}
print(json.dumps({"count": env.index.count(), "bm25": len(env.index.search_sparse("E07", 5)), **shared()}),
      flush=True)
sys.stdin.readline()
bm25 = env.index.search_sparse("speed sensor signal lost", 3)
dense = env.index.search_dense("the display says the wheel speed is not read", 3)
retrieve = {"name": "hybrid", "params": {"k": 5}}
flow = build_flow({"pattern": "linear", "providers": {"vectorstore": vs}, "operators": {
    "retrieve": retrieve, "context": "none", "generate": "none"}}, providers=env)
out = flow.invoke({"query": sys.argv[2]})
# link_hop and the evidence scorer read the catalog the writer filled, by key
hop = build_flow({"pattern": "linear", "providers": {"vectorstore": vs}, "operators": {
    "retrieve": retrieve, "rerank": {"name": "link_hop", "params": {"k": 5}}, "context": "evidence_first",
    "generate": "none"}}, providers=env).invoke({"query": sys.argv[2]})
print(json.dumps({
    "count": env.index.count(), **shared(),
    "bm25": [h["metadata"].get("title") for h in bm25], "dense": [h["metadata"].get("title") for h in dense],
    "hybrid": [h["metadata"].get("title") for h in out["candidates"]],
    "evidence": [e["metadata"].get("title") for e in hop.get("evidence") or []],
    "trace": {e["node"]: e["summary"] for e in out["trace"]},
    "ledger": {e["node"]: e["retrievals"] for e in out["ledger"]},
}), flush=True)
"""

WRITER = r"""
import json, sys
from modular_rag import demo_corpus_path
from modular_rag.config import ProvidersConfig
from modular_rag.providers import Providers
from modular_rag.ingest import index_paths

env = Providers(ProvidersConfig.model_validate({"vectorstore": json.loads(sys.argv[1])}))
summary = index_paths([demo_corpus_path()], env, progress=False)
print(json.dumps({"files": summary.files_indexed, "chunks": summary.index_chunks}), flush=True)
"""


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def milvus_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``milvus-lite server`` on a free loopback port over a fresh data folder, for this module's tests."""
    if find_spec("pymilvus") is None or find_spec("milvus_lite") is None:
        pytest.skip("pymilvus / milvus-lite are not installed (the milvus extra: pip install -e '.[milvus]')")
    folder = tmp_path_factory.mktemp("milvus")
    port = free_port()
    cmd = [
        executable("milvus-lite"),
        "server",
        "--data-dir",
        str(folder / "data"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with background(cmd, None, log=folder / "milvus.log", ready=lambda: _reachable(port), timeout_s=60):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def standalone_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Milvus 2.3 standalone server (``milvus-server`` of the PyPI ``milvus`` package: the C++ engine with
    embedded etcd and local storage) on a free loopback port over a fresh data folder."""
    if find_spec("pymilvus") is None or find_spec("milvus") is None:
        pytest.skip(
            "the Milvus standalone server is not installed (the milvus-server extra: pip install -e "
            "'.[milvus-server]', Linux and macOS on x86-64)"
        )
    folder = tmp_path_factory.mktemp("standalone")
    port = free_port()
    cmd = [executable("milvus-server"), "--data", str(folder / "data"), "--proxy-port", str(port)]
    with background(cmd, None, log=folder / "milvus.log", ready=lambda: _answers(port), timeout_s=120):
        yield f"http://127.0.0.1:{port}"


def _answers(port: int) -> bool:
    """Whether a Milvus server on ``port`` answers a request (the proxy listens before the server is ready)."""
    if not _reachable(port):
        return False
    store = MilvusStore(uri=f"http://127.0.0.1:{port}", collection="probe", timeout_s=5)
    try:
        return bool(store.server_version())
    except ProviderError:
        return False
    finally:
        store.close()


@pytest.mark.integration
@pytest.mark.slow
def test_an_idle_session_is_not_sent_away_for_pinging_too_often(
    milvus_uri: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # a gRPC server allows one ping per 5 minutes between requests and answers the third early one with GOAWAY
    # "too_many_pings" (about 30 s after the last request with pymilvus's 10 s pings), which once ended an eval run
    store = MilvusStore(uri=milvus_uri, collection="idle", timeout_s=10)
    try:
        assert store.server_version()
        time.sleep(40)
        assert store.server_version()
    finally:
        store.close()
    assert "too_many_pings" not in capfd.readouterr().err


@dataclass(frozen=True)
class Server:
    """A Milvus server a test runs against: its address, and where BM25 ranks on it (``milvus``: its BM25 function;
    ``kit``: the kit's postings, on a Milvus before 2.5)."""

    uri: str
    kind: str
    bm25: str


@pytest.fixture(params=["lite", "standalone"])
def server(request: pytest.FixtureRequest) -> Server:
    """Each server in turn: ``milvus-lite server``, then the Milvus 2.3 standalone."""
    if request.param == "lite":
        return Server(request.getfixturevalue("milvus_uri"), "lite", "milvus")
    return Server(request.getfixturevalue("standalone_uri"), "standalone", "kit")


def _providers(vectorstore: dict[str, Any]) -> Providers:
    return Providers(ProvidersConfig.model_validate({"vectorstore": vectorstore}))


# ------------------------------------------------------------------------------------------------ two processes


@pytest.mark.integration
@needs_milvus
def test_what_one_process_adds_another_retrieves_by_bm25_and_dense(server: Server, tmp_path: Path) -> None:
    vectorstore = json.dumps(
        {
            "name": "milvus",
            "uri": server.uri,
            "collection": "shared",
            "bm25": server.bm25,
            "catalog": str(tmp_path / "catalog"),
        }
    )  # the folder both processes share
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, vectorstore, QUESTION],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=_child_env(),
    )
    try:
        assert reader.stdout is not None and reader.stdin is not None
        before = json.loads(reader.stdout.readline() or "null")
        assert before == {"count": 0, "bm25": 0, "df": 0, "named": 0}, reader.stderr.read() if reader.stderr else ""
        writer = subprocess.run(
            [sys.executable, "-c", WRITER, vectorstore],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=_child_env(),
            timeout=120,
        )
        assert writer.returncode == 0, writer.stderr[-3000:]
        wrote = json.loads(writer.stdout.strip().splitlines()[-1])
        assert wrote["files"] == 36 and wrote["chunks"] > 0
        out, err = reader.communicate("go\n", timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 0, err[-3000:]
    after = json.loads(out.strip().splitlines()[-1])
    assert after["count"] == wrote["chunks"]  # the server's count, seen from the reader
    assert after["df"] > 0 and after["named"] > 0  # the writer's statistics and links, read by key: no copy, no lag
    assert after["bm25"][0] == "E-bike display error E07"  # BM25 over the writer's chunks, in Milvus or the catalog
    assert "E-bike display error E07" in after["dense"]
    assert after["hybrid"] and after["hybrid"][0] == "E-bike display error E07"
    assert after["evidence"]  # link_hop and evidence_first ran over the writer's chunks
    fused = (
        "one Milvus hybrid_search per query"
        if server.bm25 == "milvus"
        else "dense searched in Milvus, BM25 over the kit's postings (bm25: kit), rrf fusion in the kit"
    )
    assert fused in after["trace"]["retrieve"]
    assert after["ledger"]["retrieve"] == 2  # two channels, in one call or two


# ------------------------------------------------------------------------------------------------------ filters

ROWS = [
    ("c1", "The battery of the e-bike drains fast in winter", {"year": 2019, "source": "manual", "lang": "en"}),
    ("c2", "Error code E07 means the speed sensor signal is lost", {"year": 2021, "source": "faq", "lang": "en"}),
    ("c3", "Charging the battery takes four hours with the standard charger", {"year": 2023, "source": "manual"}),
    (
        "c4",
        "Battery recycling: return old battery packs to any dealer",
        {"year": 2024, "source": "policy", "draft": True},
    ),
    ("c5", "Tyre pressure for gravel riding", {"source": "guide", "rating": 4.5}),
]
FILTERS: list[dict[str, Any]] = [
    {"source": "manual"},
    {"year": {"$gte": 2021}},
    {"year": {"$gt": 2019, "$lt": 2024}},
    {"year": {"$ne": 2019}},
    {"source": {"$in": ["faq", "policy"]}},
    {"source": {"$nin": ["manual", "faq"]}},
    {"$and": [{"source": "manual"}, {"year": {"$lte": 2020}}]},
    {"$or": [{"lang": "en"}, {"draft": True}]},
    {"rating": {"$gte": 4.0}},
    {"source": "manual", "year": 2023},
]


@pytest.mark.unit
def test_filters_translate_to_milvus_expressions() -> None:
    assert where_to_expr({"year": {"$gte": 2020}}) == 'metadata["year"] >= 2020'
    assert (
        where_to_expr({"$or": [{"source": "faq"}, {"draft": True}]})
        == '(metadata["source"] == "faq" or metadata["draft"] == true)'
    )
    assert (
        where_to_expr({"source": {"$in": ["a", 'say "x"']}})
        == '(metadata["source"] == "a" or metadata["source"] == "say \\"x\\"")'
    )
    assert where_to_expr({"year": {"$ne": 2019}}) == '(metadata["year"] is null or metadata["year"] != 2019)'


@pytest.mark.unit
@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        ({"year": {"$regex": "20.*"}}, "unknown operator '$regex'; operators: $eq, $ne"),
        ({"$not": {"year": 2019}}, "unknown logical operator '$not'; logical operators: $and, $or"),
        ({"source": {"$in": []}}, "filter.source.$in: takes a non-empty list"),
        ({"year": None}, "filter.year.$eq: values are strings, finite numbers or booleans (got None)"),
        ({"tags": ["a", "b"]}, "values are strings, finite numbers or booleans"),
        ({"$and": []}, "filter.$and: takes a non-empty list of filters"),
        ({"year": {"$gt": float("nan")}}, "finite numbers"),
    ],
)
def test_untranslatable_filters_are_refused_naming_the_part(where: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        where_to_expr(where)
    assert fragment in str(err.value)


@pytest.mark.integration
@needs_milvus
def test_filters_select_what_matches_where_selects_on_every_channel(tmp_path: Path) -> None:
    # an embedded Milvus Lite file (uri: *.db): the same store in this process, no server
    env = _providers(
        {"name": "milvus", "uri": str(tmp_path / "lite" / "index.db"), "collection": "filters", "bm25": "milvus"}
    )
    store = env.index.dense
    assert isinstance(store, MilvusStore)
    ids, texts, metas = (list(x) for x in zip(*ROWS, strict=True))
    vectors = np.eye(len(ROWS), 8, dtype=np.float32)
    store.add(ids, texts, metas, vectors)
    assert store.dump() == (ids, texts, metas) and store.existing(["c2", "nope"]) == {"c2"}
    everything = np.ones(8, dtype=np.float32) / np.sqrt(8)
    for where in FILTERS:
        expected = {cid for cid, _, meta in ROWS if matches_where(meta, where)}
        assert {h["chunk_id"] for h in store.query(everything, 10, where)} == expected, where
        bm25 = {h["chunk_id"] for h in env.index.search_sparse("battery", 10, where)}
        assert bm25 == {cid for cid in expected if "battery" in dict(zip(ids, texts, strict=True))[cid].lower()}, where
        fused = store.search_hybrid(everything, "battery", 10, pool=10, where=where)
        assert {h["chunk_id"] for h in fused} == expected, where
    hits = env.index.search_sparse("battery", 3)
    assert hits[0]["channel"] == "bm25" and hits[0]["score"] > 0 and hits[0]["metadata"] == dict(ROWS[3][2])
    with pytest.raises(ConfigError, match=r"unknown operator '\$like'"):
        env.index.search_sparse("battery", 3, {"source": {"$like": "man%"}})


@pytest.mark.integration
@needs_milvus
def test_hybrid_fusions_run_in_milvus_where_it_has_them(tmp_path: Path) -> None:
    store = MilvusStore(uri=str(tmp_path / "fusion.db"), collection="fusion")
    ids, texts, metas = (list(x) for x in zip(*ROWS, strict=True))
    store.add(ids, texts, metas, np.eye(len(ROWS), 8, dtype=np.float32))
    query = np.array([0.9, 0.7, 0.5, 0.3, 0.1, 0, 0, 0], dtype=np.float32)  # a distinct cosine for each chunk
    query /= np.linalg.norm(query)
    assert store.fuses("rrf") and store.fuses("weighted", (0.7, 0.3))
    assert not store.fuses("rrf", (2.0, 1.0)) and not store.fuses("convex")
    dense, sparse = store.query(query, 5), store.search_sparse("battery charger", 5)
    # Milvus's RRF is the kit's over the same two lists
    expected = rrf([dense, sparse], rrf_k=60)
    fused = store.search_hybrid(query, "battery charger", 5, pool=5)
    assert [h["chunk_id"] for h in fused] == [h["chunk_id"] for h in expected]
    assert [h["score"] for h in fused] == pytest.approx([h["score"] for h in expected], abs=1e-6)
    assert all(h["channel"] == "hybrid" for h in fused)
    # weighted: Milvus's normalisation, (1 + cos) / 2 and 2 atan(bm25) / pi, weighted and summed
    cos, bm = ({h["chunk_id"]: h["score"] for h in hits} for hits in (dense, sparse))
    weighted = store.search_hybrid(query, "battery charger", 5, pool=5, fusion="weighted", weights=(0.7, 0.3))
    for h in weighted:
        want = 0.7 * (1 + cos[h["chunk_id"]]) / 2 + 0.3 * 2 * math.atan(bm.get(h["chunk_id"], 0.0)) / math.pi
        assert h["score"] == pytest.approx(want, abs=1e-5), h["chunk_id"]
    with pytest.raises(ConfigError, match="Milvus runs rrf, weighted"):
        store.search_hybrid(query, "battery", 5, pool=5, fusion="convex")
    with pytest.raises(ProviderError, match="holds 8-dim vectors, the query's is 384-dim"):
        store.query(np.ones(384, dtype=np.float32), 3)


@pytest.mark.integration
@needs_milvus
def test_fusions_milvus_lacks_run_in_the_kit_over_two_milvus_searches(tmp_path: Path) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from modular_rag.builder import build_flow

    fake = DeterministicFakeEmbedding(size=8)  # a LangChain Embeddings object as the embeddings provider
    cfg = ProvidersConfig.model_validate(
        {
            "embeddings": fake,
            "vectorstore": {
                "name": "milvus",
                "uri": str(tmp_path / "kit-fusion.db"),
                "collection": "kit_fusion",
                "bm25": "milvus",
            },
        }
    )
    env = Providers(cfg)
    ids, texts, metas = (list(x) for x in zip(*ROWS, strict=True))
    env.index.dense.add(ids, texts, metas, np.asarray(fake.embed_documents(texts), dtype=np.float32))
    retrieve = {"name": "hybrid", "params": {"k": 3, "pool": 5, "fusion": "convex"}}
    flow = build_flow(
        {"pattern": "linear", "operators": {"retrieve": retrieve, "context": "none", "generate": "none"}}, providers=env
    )
    out = flow.invoke({"query": "battery"})
    assert out["candidates"] and out["candidates"][0]["channel"] == "hybrid"
    assert "convex fusion with weights (1.0, 1.0) in the kit" in out["trace"][0]["summary"]
    assert out["ledger"][0]["retrievals"] == 2


# ------------------------------------------------------------------------------------------------ parity


@pytest.mark.integration
@needs_milvus
def test_bm25_auto_and_hybrid_rank_as_the_embedded_default(server: Server, tmp_path: Path) -> None:
    # Milvus Lite neither stems nor folds accents, and Milvus 2.3 has no BM25: bm25 auto ranks over the kit's
    # postings on both, so a flow scores what it scores on the embedded default; on Milvus Lite bm25: milvus is
    # Milvus's own (unstemmed) ranking, and on Milvus 2.3 it is refused, naming the version and bm25: kit
    from modular_rag.builder import build_flow

    chroma = _providers({"path": str(tmp_path / "chroma"), "collection": "parity"})
    milvus = {"name": "milvus", "uri": server.uri, "collection": "parity", "catalog": str(tmp_path / "catalog")}
    auto = _providers(milvus)
    index_paths([demo_corpus_path()], chroma, progress=False)
    index_paths([demo_corpus_path()], auto, progress=False)
    queries = ["charging batteries", "speed sensors disconnected", "warranty claims", "E07"]
    for q in queries:
        want = [(h["chunk_id"], round(h["score"], 4), h["text"]) for h in chroma.index.search_sparse(q, 8)]
        assert [(h["chunk_id"], round(h["score"], 4), h["text"]) for h in auto.index.search_sparse(q, 8)] == want
    # dense search in Milvus finds what Chroma finds (both exact here: a small collection)
    for q in queries:
        assert [h["chunk_id"] for h in auto.index.search_dense(q, 5)] == [
            h["chunk_id"] for h in chroma.index.search_dense(q, 5)
        ], q
    in_milvus = _providers({**milvus, "bm25": "milvus"})  # the same collection, ranked by Milvus
    if server.bm25 == "milvus":
        unstemmed = in_milvus.index.search_sparse("charging batteries", 8)
        assert [h["chunk_id"] for h in unstemmed] != [
            h["chunk_id"] for h in chroma.index.search_sparse("charging batteries", 8)
        ]
        assert in_milvus.index.bm25_in_store
    else:
        with pytest.raises(
            ConfigError,
            match=r"bm25: milvus cannot rank in milvus .*/parity.*: the server is Milvus "
            r"v2\.3\.5-lite, and Milvus computes BM25 only from 2\.5; use bm25: kit \(or auto\)",
        ):
            in_milvus.index.search_sparse("charging batteries", 8)
    hybrid = {
        "pattern": "linear",
        "operators": {"retrieve": {"name": "hybrid", "params": {"k": 5}}, "generate": "none"},
    }
    for q in queries:
        want = build_flow(hybrid, providers=chroma).invoke({"query": q})
        got = build_flow(hybrid, providers=auto).invoke({"query": q})
        assert [h["chunk_id"] for h in got["candidates"]] == [h["chunk_id"] for h in want["candidates"]], q
    assert "BM25 over the kit's postings (bm25: auto)" in got["trace"][0]["summary"]
    assert not auto.index.bm25_in_store


@pytest.mark.integration
@needs_milvus
def test_eval_on_milvus_indexes_the_dataset_there_and_scores_as_on_chroma(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from modular_rag.cli import main

    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    config = tmp_path / "hybrid.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "pattern": "linear",
                "name": "hybrid",
                "operators": {
                    "retrieve": {"name": "hybrid", "params": {"k": 10}},
                    "context": "none",
                    "generate": "none",
                },
            }
        )
    )

    said: list[str] = []

    def table(*extra: str) -> str:
        assert main(["eval", "--dataset", "demo", "--config", str(config), "--quiet", *extra]) == 0
        out, err = capsys.readouterr()
        said.append(err)
        return out

    def scores(out: str) -> dict[str, str]:  # the results row without the time per query
        lines = out.splitlines()
        header, row = next(x for x in lines if x.startswith("config")), next(x for x in lines if x.startswith("hybrid"))
        return {h: c for h, c in zip(header.split(), row.split(), strict=True) if h != "ms/q"}

    on_chroma, on_milvus = table(), table("--milvus", server.uri)
    folders = sorted(p.name for p in (tmp_path / "home" / "eval").iterdir())
    assert len(folders) == 2 and folders[1].startswith(folders[0] + "-milvus-")  # one index each, side by side
    collection = "eval_" + folders[1].replace("-", "_")
    other = MilvusStore(uri=server.uri, collection=collection)
    try:
        assert other.count() > 0  # the dataset is in the server
    finally:
        other.close()
    assert scores(on_milvus) == scores(on_chroma) and scores(on_chroma)["nDCG@10"] != "–"
    assert "indexed demo" in said[1]
    assert scores(table("--milvus", server.uri)) == scores(on_milvus) and "indexed" not in said[2]  # reused


# ------------------------------------------------------------------------------------------------- sync / delete


@pytest.mark.integration
@needs_milvus
def test_sync_deletes_removed_and_replaced_files_in_milvus(server: Server, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("display-error-e07.md", "display-error-e12.md", "warranty-policy-2019.md"):
        shutil.copy(demo_corpus_path() / name, docs / name)
    vectorstore = {
        "name": "milvus",
        "uri": server.uri,
        "collection": "synced",
        "catalog": str(tmp_path / "catalog"),
        "bm25": server.bm25,
    }
    env = _providers(vectorstore)
    first = index_paths([docs], env, progress=False, sync=True)
    assert first.synced["added"] == 3 and env.index.count() == first.index_chunks
    assert any("E12" in h["text"] for h in env.index.search_sparse("E12", 5))

    (docs / "display-error-e12.md").unlink()
    e07 = docs / "display-error-e07.md"
    e07.write_text(e07.read_text(encoding="utf-8") + "\nSee also the tachometer calibration note.\n", encoding="utf-8")
    second = index_paths([docs], env, progress=False, sync=True)
    assert second.synced == {"added": 0, "replaced": 1, "unchanged": 1, "completed": 0, "removed": 1}
    assert second.removed > 0 and second.index_chunks == env.index.count()

    # another client of the same server and catalog sees the deletions at once, by BM25, dense and listing
    other = _providers(vectorstore)
    assert other.index.count() == second.index_chunks
    assert not [h for h in other.index.search_sparse("E12", 10) if "E12" in h["text"]]
    assert [h["metadata"]["title"] for h in other.index.search_sparse("tachometer", 3)] == ["E-bike display error E07"]
    assert not [h for h in other.index.search_dense("error E12 on the display", 10) if "E12" in h["text"]]
    store = other.index.dense
    assert isinstance(store, MilvusStore)
    assert {m["path"] for m in store.dump()[2]} == {"display-error-e07.md", "warranty-policy-2019.md"}
    if server.bm25 == "milvus":  # and Milvus's own BM25, where it has one
        assert not [h for h in store.search_sparse("E12", 10) if "E12" in h["text"]]
        assert [h["metadata"]["title"] for h in store.search_sparse("tachometer", 3)] == ["E-bike display error E07"]
    store.close()


@pytest.mark.integration
@needs_milvus
def test_reads_wait_for_this_process_writes_not_for_every_time_tick(server: Server, tmp_path: Path) -> None:
    # Strong reads waited for the server's next time tick, 0.2-0.4 s each on the Milvus 2.3 standalone whatever the
    # collection's size: at 2,000 chunks a question (a search and a get; link_hop a search and five gets) spent
    # 0.4-1.2 s in Milvus. Session reads wait only for this process's own writes, and its next read still sees them
    env = _providers(
        {
            "name": "milvus",
            "uri": server.uri,
            "collection": "session_reads",
            "bm25": server.bm25,
            "catalog": str(tmp_path / "catalog"),
        }
    )
    index_paths([demo_corpus_path()], env, progress=False)
    store = env.index.dense
    assert isinstance(store, MilvusStore)
    vector = np.asarray(env.encoder.encode_query(QUESTION), dtype=np.float32)
    ids = [h["chunk_id"] for h in store.query(vector, 5)]
    start = time.perf_counter()
    for _ in range(10):
        assert len(store.query(vector, 5)) == 5 and len(store.get(ids)) == 5
    assert time.perf_counter() - start < 1.5  # 20 reads; waiting for time ticks, at least 4 s on the standalone
    store.add(["fresh"], ["Error E07 again, added just now"], [{"path": "fresh.md"}], vector[None, :])
    assert [h["chunk_id"] for h in store.get(["fresh"])] == ["fresh"]
    assert store.query(vector, 1)[0]["chunk_id"] == "fresh"
    store.delete(["fresh"])
    assert not store.get(["fresh"]) and store.query(vector, 1)[0]["chunk_id"] != "fresh"
    store.close()


@pytest.mark.integration
@needs_milvus
@pytest.mark.parametrize("bm25", ["auto", "server"])
def test_an_index_run_leaves_the_collection_warm_for_readers(
    server: Server, tmp_path: Path, bm25: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a server builds what a search needs on the first search after a write (Milvus Lite: its BM25 index, 12-15 s
    # at 100k chunks); the indexer pays it, not a worker's first question. It warms only what readers will search:
    # under bm25: auto on Milvus Lite the kit's postings rank BM25, and Milvus's BM25 index would only take memory;
    # "server" is Milvus's BM25 where the server has it (Milvus Lite), the kit's where not (Milvus 2.3)
    bm25 = server.bm25 if bm25 == "server" else bm25
    calls: list[str] = []
    call = MilvusStore._call

    def recorded(self: MilvusStore, what: str, fn: Any) -> Any:
        calls.append(what)
        return call(self, what, fn)

    monkeypatch.setattr(MilvusStore, "_call", recorded)
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("display-error-e07.md", "display-error-e12.md"):
        shutil.copy(demo_corpus_path() / name, docs / name)
    env = _providers(
        {
            "name": "milvus",
            "uri": server.uri,
            "collection": f"warmed_{bm25}",
            "bm25": bm25,
            "catalog": str(tmp_path / "catalog"),
        }
    )
    first = index_paths([docs], env, progress=False)
    last_write = max(i for i, what in enumerate(calls) if what == "upsert")
    searches = ["search", "search"] if bm25 == "milvus" else ["search"]  # a dense (and a BM25) search
    # Milvus Lite is flushed (it rebuilds the BM25 index of unsealed rows on every search); a server is not after a
    # few files (each flush seals a segment, however small: Milvus seals them on its own)
    warmed = ["flush", "load_collection", *searches] if server.kind == "lite" else ["load_collection", *searches]
    after = calls[last_write + 1 :]
    assert after[: len(warmed)] == warmed, calls  # (sealed,) loaded, searched
    # ... and nothing else searched or flushed
    assert after.count("search") == len(searches) and after.count("flush") == (server.kind == "lite"), calls
    assert first.stages["warm"] > 0
    calls.clear()
    again = index_paths([docs], env, progress=False)  # nothing changed: nothing to warm
    assert "load_collection" not in calls and "warm" not in again.stages
    calls.clear()
    monkeypatch.setattr(milvus_module, "SEAL_ROWS", 1)  # a bulk load (here: any write) ends sealed on either
    (docs / "display-error-e07.md").write_text("The display shows E07 when the lid is open.\n")
    index_paths([docs], env, progress=False)
    last_write = max(i for i, what in enumerate(calls) if what == "upsert")
    assert calls[last_write + 1 : last_write + 3] == ["flush", "load_collection"], calls


@pytest.mark.unit
def test_milvus_config_round_trips_and_builds_no_client() -> None:
    cfg = ProvidersConfig.model_validate(
        {"vectorstore": {"name": "milvus", "collection": "manuals", "token_env": "MILVUS_TOKEN"}}
    )
    assert isinstance(cfg.vectorstore, MilvusConfig) and cfg.vectorstore.uri == "http://127.0.0.1:19530"
    assert ProvidersConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    # a store without a name is Chroma, the default, as before there was a choice
    assert ProvidersConfig.model_validate({"vectorstore": {"in_memory": True}}).vectorstore.name == "chroma"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("version", "lite", "able"),
    [
        ("v2.3.5-lite", False, False),  # the PyPI milvus package's standalone: its "lite" is not Milvus Lite
        ("v2.4.17", False, False),
        ("v2.5.4", False, True),
        ("v3.0.0-beta", False, True),
        ("milvus_lite-3.2.2", True, True),
        ("zilliz-cloud", False, True),  # no release number (a managed service): counted able, as Milvus decides
    ],
)
def test_the_server_version_says_whether_milvus_can_rank_bm25(version: str, lite: bool, able: bool) -> None:
    store = MilvusStore(uri="http://127.0.0.1:1", collection="c")
    store.server_version = lambda: version  # type: ignore[method-assign]
    # bm25 auto ranks in Milvus where it can, but not on Milvus Lite, which would drop the default's stemming
    assert (store.lite, store.bm25_function, store.ranks_bm25) == (lite, able, able and not lite)
    refused = MilvusStore(uri="http://127.0.0.1:1", collection="c", bm25="milvus")
    refused.server_version = lambda: version  # type: ignore[method-assign]
    if able:
        assert refused.ranks_bm25
    else:
        with pytest.raises(
            ConfigError,
            match=rf"the server is Milvus {version}, and Milvus computes BM25 only "
            r"from 2\.5; use bm25: kit",
        ):
            assert refused.ranks_bm25


@pytest.mark.unit
def test_milvus_is_an_extra_not_a_core_dependency() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("[")[0] for d in project["optional-dependencies"]["milvus"]}
    assert names == {"pymilvus", "milvus-lite", "numpy"}  # numpy >= 2: the newest pyarrow, milvus-lite's, needs it
    server = {d.split(">")[0] for d in project["optional-dependencies"]["milvus-server"]}
    assert server == {"milvus", "pymilvus"}  # the standalone server: a wheel with no dependencies of its own
    assert not any(d.startswith(("pymilvus", "milvus")) for d in project["dependencies"])


@pytest.mark.integration
@needs_milvus
def test_the_link_table_on_milvus_equals_a_build_over_every_chunk(tmp_path: Path) -> None:
    """The demo indexed into Milvus Lite one file at a time: each add looks up its new anchors in the older chunks
    through Milvus's BM25 (ids only, in batches), and the stored links equal a table built over all chunks at once."""
    from modular_rag.links import LinkTable

    env = _providers({"name": "milvus", "uri": str(tmp_path / "lite" / "index.db"), "collection": "links"})
    for file in sorted(demo_corpus_path().glob("*.md"), reverse=True):
        index_paths([file], env, progress=False)
    held = [c for part in env.index.catalog.scan() for c in part]
    texts = env.index._texts(held)  # Milvus holds the texts: the catalog rows have none
    built = LinkTable.build(texts, [c.metadata for c in held])
    stored = env.index.links.outlinks([c.id for c in held])
    assert {(held[i].id, held[j].id) for i, out in enumerate(built.outlinks) for j in out} == {
        (a, b) for a, out in stored.items() for b in out
    }


class _Status(Exception):
    """A gRPC error as pymilvus lets it through (``_InactiveRpcError``: a ``code()`` naming its status)."""

    def __init__(self, status: str) -> None:
        super().__init__(f"<_InactiveRpcError: status = StatusCode.{status}>")
        self.status = status

    def code(self) -> Any:
        import grpc

        return grpc.StatusCode[self.status]


class _BusyClient:
    """A Milvus client whose ``get`` fails with ``statuses`` (gRPC status names, or errors to raise) in turn, then
    answers."""

    def __init__(self, *statuses: str | Exception) -> None:
        self.statuses, self.calls = list(statuses), 0

    def get(self, collection: str, ids: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        self.calls += 1
        if self.statuses:
            status = self.statuses.pop(0)
            raise _Status(status) if isinstance(status, str) else status
        return [{"id": i, "text": f"text of {i}", "meta": {}} for i in ids]


@pytest.mark.unit
def test_a_request_the_busy_server_let_time_out_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # a 1M-chunk build died on one read past its deadline while the server was busy: every request of the store is
    # idempotent, so a transient status is retried (twice); any other error is raised at once, naming the request
    pytest.importorskip("grpc")
    monkeypatch.setattr("modular_rag.milvus_connection._BACKOFF_S", 0.0)
    store = MilvusStore(uri="http://127.0.0.1:9", collection="busy")
    store._ready, store._lite = True, False
    store._client = busy = _BusyClient("DEADLINE_EXCEEDED", "UNAVAILABLE")
    assert [h["text"] for h in store.get(["a", "b"])] == ["text of a", "text of b"] and busy.calls == 3
    store._client = busy = _BusyClient("DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED")
    with pytest.raises(ProviderError, match=r"milvus http://127.0.0.1:9/busy.*get failed.*DEADLINE_EXCEEDED"):
        store.get(["a"])
    assert busy.calls == 3
    store._client = busy = _BusyClient("INVALID_ARGUMENT")
    with pytest.raises(ProviderError, match="get failed"):
        store.get(["a"])
    assert busy.calls == 1


@pytest.mark.unit
def test_a_restarted_server_refusing_requests_until_it_takes_over_its_channels_is_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a Milvus 2.3.5 standalone restarted on a 1M-chunk collection refused flushes for minutes with "node not match"
    # (its coordinator still gave the old data node's channels): the store waits for the handover, within a bound,
    # rather than failing an index run after its two quick retries
    pytest.importorskip("grpc")
    monkeypatch.setattr("modular_rag.milvus_connection._HANDOVER_POLL_S", 0.0, raising=False)
    monkeypatch.setattr("modular_rag.milvus_connection._BACKOFF_S", 0.0)
    refused = "<MilvusException: (code=65535, message=node not match [expectedNodeID=1] [actualNodeID=2])>"
    store = MilvusStore(uri="http://127.0.0.1:9", collection="restarted")
    store._ready, store._lite = True, False
    store._client = busy = _BusyClient(*[Exception(refused)] * 5, "UNAVAILABLE", Exception("node not found[node=3]"))
    assert [h["text"] for h in store.get(["a"])] == ["text of a"] and busy.calls == 8
    monkeypatch.setattr("modular_rag.milvus_connection._HANDOVER_WAIT_S", 0.0)  # past the bound: said, not hidden
    store._client = busy = _BusyClient(Exception(refused), Exception(refused))
    with pytest.raises(ProviderError, match=r"get failed.*node not match.*still refused after 0 s"):
        store.get(["a"])
    assert busy.calls == 1


@pytest.mark.integration
@needs_milvus
def test_search_params_reach_every_dense_search(server: Server, tmp_path: Path) -> None:
    # Milvus Lite's AUTOINDEX is a faiss HNSW searched with ef 64: on scifact-best's 16k passages its top-50 recall
    # is 0.961 (Chroma's 0.979); searched with ef 128, 0.991. vectorstore.search_params carries ef (or AUTOINDEX's
    # level on Milvus) to the dense search and to the dense half of a Milvus hybrid search
    env = _providers(
        {
            "name": "milvus",
            "uri": server.uri,
            "collection": "ef_params",
            "bm25": server.bm25,
            "search_params": {"ef": 128},
            "catalog": str(tmp_path / "catalog"),
        }
    )
    index_paths([demo_corpus_path()], env, progress=False)
    store = env.index.dense
    assert isinstance(store, MilvusStore)
    sent: list[Any] = []
    search, hybrid = store.client.search, store.client.hybrid_search
    store.client.search = lambda *a, **kw: sent.append(kw.get("search_params")) or search(*a, **kw)
    store.client.hybrid_search = lambda name, reqs, *a, **kw: sent.append(reqs[0].param) or hybrid(name, reqs, *a, **kw)
    vector = env.encoder.encode_query("What does error E07 mean?")
    dense = store.query(vector, 3)
    fused = server.bm25 == "milvus"  # Milvus 2.3 has no BM25, so no hybrid_search of it
    assert dense and (not fused or store.search_hybrid(vector, "What does error E07 mean?", 3, pool=10))
    assert len(sent) == 1 + fused, sent
    assert all(p["params"] == {"ef": 128} and p["metric_type"] == "COSINE" for p in sent), sent


@pytest.mark.integration
@needs_milvus
def test_a_catalog_ahead_of_the_store_does_not_make_workers_read_the_collection(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a write killed between the catalog's commit and Milvus's upsert leaves the catalog holding chunks Milvus lacks
    # (the next index run writes them): a worker opening the index then read the whole collection to find chunks
    # the catalog lacks (none), at 1M chunks minutes before its first answer. Only a store holding more is read.
    config = {
        "name": "milvus",
        "uri": server.uri,
        "collection": "ahead",
        "catalog": str(tmp_path / "catalog"),
        "bm25": server.bm25,
    }
    env = _providers(config)
    index_paths([demo_corpus_path()], env, progress=False)
    held = env.index.count()
    env.index.dense.delete([next(iter(env.index.catalog.ids()))])  # the vector of a chunk the catalog holds, gone
    env.index.dense.flush()
    with monkeypatch.context() as m:
        m.setattr(MilvusStore, "dump", lambda self: pytest.fail("the worker read the whole collection"))
        worker = _providers(config)._build_index()  # a new process's index: nothing of it opened yet
        assert worker.search_sparse("E07", 3) and worker.count() == held - 1
    writer = _providers(config)  # the next index run writes the missing vector
    index_paths([demo_corpus_path()], writer, progress=False)
    assert writer.index.dense.count() == held
