"""The learned router: trained by train-router on what each candidate flow retrieved, saved as a versioned model,
routing in the conditional pattern with its reasons in the trace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from modular_rag.builder import build_flow
from modular_rag.config import load_config
from modular_rag.errors import ConfigError
from operators.routing import LEXICAL_NAMES, RouterModel

CHEAP = {"pattern": "linear", "name": "cheap", "operators": {"retrieve": {"name": "bm25", "params": {"k": 10}},
                                                             "context": "none", "generate": "none"}}  # fmt: skip
HOPPING = {"pattern": "linear", "name": "hopping", "operators": {
    "retrieve": {"name": "hybrid", "params": {"k": 20, "pool": 20}},
    "rerank": {"name": "link_hop", "params": {"k": 10}}, "context": "none", "generate": "none"}}  # fmt: skip


@pytest.fixture(scope="module")
def own_eval_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The evaluation index the training tests build, in a folder of their own: the shared cache under
    ``.modular_rag/eval`` is written by whichever chromadb built it first (chromadb 1.0 cannot open a 1.5 index:
    a Rust panic), and a test must not rest on what another environment left there."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODULAR_RAG_HOME", str(home))
        yield home


def _model(cost_weight: float) -> RouterModel:
    """Two kinds of questions; the hopping route is better on the second kind, which every question belongs to."""
    d = 384 + len(LEXICAL_NAMES)
    return RouterModel(["cheap", "hopping"], ["1 passage", "2+ passages"], np.zeros((2, d)), np.array([0.0, 5.0]),
                       np.array([[0.9, 0.5], [0.9, 0.8]]), np.zeros(len(LEXICAL_NAMES)), np.ones(len(LEXICAL_NAMES)),
                       {"cheap": 1.0, "hopping": 4.0}, cost_weight)  # fmt: skip


@pytest.mark.unit
def test_the_decision_weighs_expected_quality_against_cost(tmp_path: Path) -> None:
    p = _model(0.0).probabilities(np.zeros((1, 384 + len(LEXICAL_NAMES))))
    assert p[0, 1] > p[0, 0]  # the hopping route is expected to do better ...
    assert _model(0.0).decide(p).tolist() == [1]
    assert _model(0.5).decide(p).tolist() == [0]  # ... but not by enough for four times the cost
    file = _model(0.5).save(tmp_path / "router")
    assert file.name == "router.json" and RouterModel.load(tmp_path / "router").cost_weight == 0.5
    data = json.loads(file.read_text())
    file.write_text(json.dumps({**data, "version": 999}))
    with pytest.raises(ConfigError, match="is not a modular-rag-router v3 model"):
        RouterModel.load(file)


@pytest.mark.integration
@pytest.mark.usefixtures("own_eval_home")
def test_train_router_writes_a_model_and_a_routed_flow_that_runs(tmp_path: Path, demo_dir: Path) -> None:
    from modular_rag.eval.datasets import load_demo
    from modular_rag.eval.router import train_router

    report = train_router(load_demo(), {"cheap": load_config(CHEAP), "hopping": load_config(HOPPING)},
                          tmp_path / "router", folds=3)  # fmt: skip
    assert report.costs == {"cheap": 1.0, "hopping": 4.0}  # retrievals per question, measured
    assert sum(report.labels.values()) == 24 and report.model_file.exists()
    assert set(report.validation) == {"cheap", "hopping", "routed"}
    assert report.validation["routed"]["cost"] <= 0.6 * 4.0 + 1e-9  # the default operating point's cost ceiling
    config = load_config(report.config_file)
    assert config.pattern == "conditional" and config.operators["route"].name == "learned"
    config.providers.vectorstore.path = str(demo_dir)
    config.providers.vectorstore.collection = "demo"
    out = build_flow(config).invoke({"query": "What is the frame material of the bike that won the 2022 Coastline "
                                              "Design Award?"})  # fmt: skip
    assert out["route"] in {"cheap", "hopping"}
    route = next(e for e in out["trace"] if e["node"] == "route")
    assert "learned: expected quality cheap" in route["summary"]
    assert any(e["node"].startswith(f"{out['route']}/") for e in out["trace"])


@pytest.mark.integration
def test_a_model_routing_to_unknown_routes_is_refused(tmp_path: Path, demo_dir: Path) -> None:
    file = _model(0.0).save(tmp_path / "r")
    config = {"pattern": "conditional", "providers": {"vectorstore": {"name": "chroma", "path": str(demo_dir),
                                                                       "collection": "demo"}},
              "operators": {"route": {"name": "learned", "params": {"model": str(file)}}},
              "params": {"fallback": "a", "routes": {"a": {"flow": CHEAP}, "b": {"flow": HOPPING}}}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"routes to \['cheap', 'hopping'\], which are not routes of this flow"):
        build_flow(config)


def _cased_like_a_benchmark(question: str, multi_hop: bool) -> str:
    """NQ-open's form for single-passage questions (lower case, no question mark), HotpotQA's for multi-hop ones."""
    return question if multi_hop else question.lower().rstrip("?")


@pytest.mark.integration
@pytest.mark.usefixtures("own_eval_home")
def test_the_learned_router_does_not_read_letter_case(tmp_path: Path, demo_dir: Path) -> None:
    """A training mix whose casing follows the route (NQ-style lower-case single-hop questions, cased multi-hop ones)
    must not teach the router letter case: the same questions lower-cased or title-cased route the same way, so
    held-out routing accuracy moves by at most 0.02."""
    from modular_rag.eval.datasets import BeirDataset, Query, load_demo
    from modular_rag.eval.router import train_router
    from modular_rag.providers import Providers

    demo = load_demo()
    queries = [Query(q.id, _cased_like_a_benchmark(q.text, q.extra.get("kind") == "multi-hop"), q.answers, q.extra)
               for q in demo.queries]  # fmt: skip
    mix = BeirDataset(demo.root, demo.split, queries, demo.qrels)
    report = train_router(mix, {"cheap": load_config(CHEAP), "hopping": load_config(HOPPING)}, tmp_path / "router",
                          folds=3)  # fmt: skip
    model = RouterModel.load(report.model_file)
    encoder = Providers(load_config(CHEAP).providers).encoder
    asked = [q.text for q in demo.queries]
    labels = [report.question_labels[q.id] for q in demo.queries]

    def accuracy(texts: list[str]) -> float:
        return float(np.mean([a == b for a, b in zip(model.route(encoder, texts), labels, strict=True)]))

    as_asked = accuracy(asked)
    assert abs(accuracy([t.lower() for t in asked]) - as_asked) <= 0.02
    assert abs(accuracy([t.title() for t in asked]) - as_asked) <= 0.02
    assert model.route(encoder, asked) == model.route(encoder, [t.upper() for t in asked])
