"""The learned router: trained by train-router on what each candidate flow retrieved, saved as a versioned model,
routing in the conditional pattern with its reasons in the trace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modular_rag.builder import build_flow
from modular_rag.config import load_config
from modular_rag.errors import ConfigError
from operators.routing import LEXICAL_NAMES, RouterModel

CHEAP = {
    "pattern": "linear",
    "name": "cheap",
    "operators": {"retrieve": {"name": "bm25", "params": {"k": 10}}, "context": "none", "generate": "none"},
}
HOPPING = {
    "pattern": "linear",
    "name": "hopping",
    "operators": {
        "retrieve": {"name": "hybrid", "params": {"k": 20, "pool": 20}},
        "rerank": {"name": "link_hop", "params": {"k": 10}},
        "context": "none",
        "generate": "none",
    },
}


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
    return RouterModel(
        ["cheap", "hopping"],
        ["1 passage", "2+ passages"],
        np.zeros((2, d)),
        np.array([0.0, 5.0]),
        np.array([[0.9, 0.5], [0.9, 0.8]]),
        np.zeros(len(LEXICAL_NAMES)),
        np.ones(len(LEXICAL_NAMES)),
        {"cheap": 1.0, "hopping": 4.0},
        cost_weight,
    )


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
    with pytest.raises(ConfigError, match="is not a modular-rag-router model of version 3 or 4"):
        RouterModel.load(file)


@pytest.mark.integration
@pytest.mark.usefixtures("own_eval_home")
def test_train_router_writes_a_model_and_a_routed_flow_that_runs(tmp_path: Path, demo_dir: Path) -> None:
    from modular_rag.eval.datasets import load_demo
    from modular_rag.eval.router import train_router

    report = train_router(
        load_demo(), {"cheap": load_config(CHEAP), "hopping": load_config(HOPPING)}, tmp_path / "router", folds=3
    )
    assert report.costs == {"cheap": 1.0, "hopping": 4.0}  # retrievals per question, measured
    assert sum(report.labels.values()) == 24 and report.model_file.exists()
    assert set(report.validation) == {"cheap", "hopping", "routed"}
    assert report.validation["routed"]["cost"] <= 0.7 * 4.0 + 1e-9  # the default operating point's cost ceiling
    config = load_config(report.config_file)
    assert config.pattern == "conditional" and config.operators["route"].name == "learned"
    config.providers.vectorstore.path = str(demo_dir)
    config.providers.vectorstore.collection = "demo"
    out = build_flow(config).invoke(
        {"query": "What is the frame material of the bike that won the 2022 Coastline Design Award?"}
    )
    assert out["route"] in {"cheap", "hopping"}
    route = next(e for e in out["trace"] if e["node"] == "route")
    assert "learned: expected quality cheap" in route["summary"]
    assert any(e["node"].startswith(f"{out['route']}/") for e in out["trace"])


@pytest.mark.integration
def test_a_model_routing_to_unknown_routes_is_refused(tmp_path: Path, demo_dir: Path) -> None:
    file = _model(0.0).save(tmp_path / "r")
    config = {
        "pattern": "conditional",
        "providers": {"vectorstore": {"name": "chroma", "path": str(demo_dir), "collection": "demo"}},
        "operators": {"route": {"name": "learned", "params": {"model": str(file)}}},
        "params": {"fallback": "a", "routes": {"a": {"flow": CHEAP}, "b": {"flow": HOPPING}}},
    }
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
    queries = [
        Query(q.id, _cased_like_a_benchmark(q.text, q.extra.get("kind") == "multi-hop"), q.answers, q.extra)
        for q in demo.queries
    ]
    mix = BeirDataset(demo.root, demo.split, queries, demo.qrels)
    report = train_router(
        mix, {"cheap": load_config(CHEAP), "hopping": load_config(HOPPING)}, tmp_path / "router", folds=3
    )
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


def _shared(demo_dir: Path, route: dict[str, Any]) -> dict[str, Any]:
    """A conditional flow retrieving once (hybrid) before the router; the routes take those candidates."""
    linear = {
        "pattern": "linear",
        "operators": {"retrieve": {"name": "given", "params": {"k": 10}}, "context": "none", "generate": "none"},
    }
    hop = {
        "pattern": "linear",
        "operators": {
            "retrieve": {"name": "given", "params": {"k": 20}},
            "rerank": {"name": "link_hop", "params": {"k": 10}},
            "context": "none",
            "generate": "none",
        },
    }
    return {
        "pattern": "conditional",
        "providers": {"vectorstore": {"name": "chroma", "path": str(demo_dir), "collection": "demo"}},
        "operators": {"retrieve": {"name": "hybrid", "params": {"k": 20, "pool": 20}}, "route": route},
        "params": {
            "fallback": "cheap",
            "routes": {
                "cheap": {"keywords": ["frame"], "flow": linear},
                "hopping": {"keywords": ["award"], "flow": hop},
            },
        },
    }


@pytest.mark.integration
def test_a_shared_first_retrieval_makes_a_routed_question_cost_two_or_four_retrievals(demo_dir: Path) -> None:
    """The routes start from the retrieval made before the router: the single shot costs its 2 searches, the hop
    only adds its 2 link-table lookups (4, not 6), and the estimate says the same."""
    from modular_rag.costs import Span, estimate
    from modular_rag.trace import totals

    config = _shared(demo_dir, {"name": "keyword"})
    flow = build_flow(config)
    cheap = flow.invoke({"query": "What is the frame made of?"})
    hopping = flow.invoke({"query": "Which bike won the design award?"})
    assert (cheap["route"], hopping["route"]) == ("cheap", "hopping")
    assert totals(cheap["ledger"])["retrievals"] == 2 and totals(hopping["ledger"])["retrievals"] == 4
    assert cheap["candidates"] and len(cheap["candidates"]) <= 10
    assert estimate(load_config(config)).retrievals == Span(2, 4)


@pytest.mark.integration
def test_a_route_taking_given_candidates_needs_a_shared_retrieval(demo_dir: Path) -> None:
    config = _shared(demo_dir, {"name": "keyword"})
    del config["operators"]["retrieve"]
    with pytest.raises(ConfigError, match="retrieve: given takes the candidates of a retrieval shared before"):
        build_flow(config)


def _hit(i: int, text: str, title: str = "", score: float = 0.03) -> dict[str, Any]:
    return {
        "chunk_id": f"c{i}",
        "text": text,
        "score": score,
        "channel": "hybrid",
        "metadata": {"title": title, "doc_id": f"d{i}"} if title else {},
    }


def _evidence_model() -> RouterModel:
    """Routes by evidence alone: the more of the question the first passage covers, the cheaper route."""
    from modular_rag.evidence import EVIDENCE_NAMES

    d = len(EVIDENCE_NAMES)
    w = np.zeros((2, d))
    w[0, EVIDENCE_NAMES.index("covered by top-1")] = 4.0
    return RouterModel(
        ["cheap", "hopping"],
        ["cheap", "hopping"],
        w,
        np.array([0.0, 0.0]),
        np.array([[0.9, 0.3], [0.9, 0.9]]),
        np.zeros(len(LEXICAL_NAMES)),
        np.ones(len(LEXICAL_NAMES)),
        {"cheap": 2.0, "hopping": 4.0},
        0.3,
        blocks=("evidence",),
        evidence_mean=np.full(d, 0.5),
        evidence_scale=np.ones(d),
    )


@pytest.mark.unit
def test_an_evidence_router_decides_from_what_the_first_retrieval_found(tmp_path: Path) -> None:
    """The same question routes to the single shot when the first passage answers it and to the hop when it covers
    only part of it; the model reads no question embedding (no encoder needed) and survives a save and load."""
    model = RouterModel.load(_evidence_model().save(tmp_path / "r"))
    question = "Which river flows through the capital of the country where the Fiat company was founded?"
    answered = [
        _hit(
            0,
            "The Fiat company was founded in Turin; Italy's capital Rome lies on the river Tiber, the "
            "country's third longest river, which flows through the city.",
        )
    ]
    partial = [_hit(0, "Fiat was founded in Turin in 1899."), _hit(1, "Rome is on the Tiber.")]
    assert model.reads_evidence and model.blocks == ("evidence",)
    assert model.route(None, [question, question], [answered, partial]) == ["cheap", "hopping"]
    with pytest.raises(ValueError, match="pass its candidates"):
        model.route(None, [question])


_WORDS = ["lantern", "copper", "harbour", "violin", "glacier", "orchid", "tunnel", "saddle", "meadow", "falcon"]


def _covering(share: int) -> tuple[str, list[dict[str, Any]]]:
    """A question of ten words whose first passage holds ``share`` of them (plain text: no title, no doc id)."""
    return " ".join(_WORDS) + "?", [_hit(0, " ".join(_WORDS[:share]) + ".")]


def _hops(route: Any, shares: list[int]) -> list[bool]:
    return [route({"query": q, "candidates": h})["route"] == "hopping" for q, h in map(_covering, shares)]


@pytest.mark.unit
def test_a_learned_router_holds_its_budget_where_traffic_needs_more_hops_than_its_training(tmp_path: Path) -> None:
    """At its trained cost weight the evidence model hops wherever the first passage covers under about three
    quarters of the question: eight questions in ten of this traffic, 90% of the hop's cost. Holding the budget it
    was trained at (0.7 of the hop's cost: at most four hops in ten with costs 2 and 4) it hops only as often as
    that allows, counting what its first questions spent before it acted, and on the questions covered least;
    ``budget: 1`` routes at the trained weight."""
    from types import SimpleNamespace

    from modular_rag.route_budget import WARM
    from operators.routing import LearnedRouterParams, learned_router

    model = _evidence_model()
    model.budget = 0.7
    file = model.save(tmp_path / "r")
    routes: dict[str, Any] = {"cheap": {}, "hopping": {}}
    providers = SimpleNamespace(encoder=None, index=None)
    shares = [[1, 9, 3, 5, 2, 10, 6, 4, 7, 2][i % 10] for i in range(120)]  # 8 in 10 cover less than 3/4
    free = learned_router(LearnedRouterParams(model=str(file), routes=routes, budget=1.0), providers)
    assert np.mean(_hops(free, shares)) == pytest.approx(0.8)
    held = _hops(learned_router(LearnedRouterParams(model=str(file), routes=routes), providers), shares)
    assert np.mean(held) <= 0.4 + 1e-9  # what it spent, the first questions (at the trained weight) included
    served = held[WARM:]
    assert np.mean(served) >= 0.2  # ... and it still hops, as often as what is left allows
    covered = np.array(shares[WARM:])
    assert covered[np.array(served)].max() <= 2  # ... on the least covered (1 or 2 words of 10: 3 questions in 10)


@pytest.mark.unit
def test_evidence_features_read_no_letter_case_and_work_without_titles() -> None:
    """Features of plain files (no title, no doc id) and of cased or lower-cased questions are the same numbers."""
    from modular_rag.evidence import EVIDENCE_NAMES, evidence_features

    hits = [_hit(0, "The Eiffel Tower was completed in 1889."), _hit(1, "Gustave Eiffel's company built it.", "", 0.02)]
    asked = evidence_features("When was the Eiffel Tower completed?", hits)
    assert asked == evidence_features("when was the eiffel tower completed", hits)
    assert asked == evidence_features("WHEN WAS THE EIFFEL TOWER COMPLETED?", hits)
    named = dict(zip(EVIDENCE_NAMES, asked, strict=True))
    assert named["covered by top-1"] == 1.0 and named["top-1 title named"] == 0.0
    assert named["score 2/1"] == pytest.approx(0.02 / 0.03) and named["score 3/1"] == 0.0
    titled = [_hit(0, "It was completed in 1889.", "Eiffel Tower"), _hit(1, "A bridge.", "Garabit viaduct")]
    named = dict(zip(EVIDENCE_NAMES, evidence_features("When was the eiffel tower completed?", titled), strict=True))
    assert named["top-1 title named"] == 1.0 and named["titles named in top-5"] == 0.5


@pytest.mark.integration
def test_link_evidence_reads_plain_notes_through_the_index_link_table(tmp_path: Path) -> None:
    """Notes without titles or front matter: the question names a note the first passages hold, and the passage
    found names a note they do not (a bridge not crossed); once both are found, nothing is left outside. Cased
    and lower-cased questions give the same numbers; without a link table the link features are 0."""
    from modular_rag.config import ChromaConfig, ProvidersConfig
    from modular_rag.evidence import EVIDENCE_NAMES, evidence_features
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "gravel.txt").write_text(
        "The TW-550 Gravel is a steel touring bike. Its frames are welded at the Kestrel Harbour factory.\n"
    )
    (notes / "factory.txt").write_text(
        "The Kestrel Harbour factory opened in 1998 on the river front. It employs forty welders.\n"
    )
    (notes / "winter.txt").write_text("Winter riding needs bright lights, mudguards and lower tyre pressure.\n")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="notes")))
    index_paths([notes], env, progress=False)
    links = env.index.links
    gravel = env.index.hits(sorted(links.named_in("the TW-550 Gravel")))
    factory = env.index.hits(sorted(links.named_in("the Kestrel Harbour factory")))
    assert gravel and factory and gravel[0]["chunk_id"] != factory[0]["chunk_id"]
    question = "How many people work where the frames of the TW-550 Gravel are welded?"

    def link(hits: list[Any], asked: str = question) -> dict[str, float]:
        return dict(zip(EVIDENCE_NAMES, evidence_features(asked, hits, links), strict=True))

    one = link(gravel)
    assert one["anchors named, in top-5"] == 1 and one["anchors named, outside top-5"] == 0
    assert one["anchors top-2 link out to"] > 0 and one["anchors top-5 link out to"] > 0
    assert link(gravel, question.lower()) == one
    both = link([*gravel, *factory])
    assert both["anchors top-5 link out to"] == 0 and both["anchors named, in top-5"] == 1
    bare = dict(zip(EVIDENCE_NAMES, evidence_features(question, gravel), strict=True))
    assert all(bare[name] == 0 for name in EVIDENCE_NAMES[-5:])


@pytest.mark.unit
def test_a_router_saved_before_evidence_features_still_loads_and_routes(tmp_path: Path) -> None:
    """A version 3 model (no features, no evidence fields) reads the question as before."""
    file = _model(0.0).save(tmp_path / "r")
    data = json.loads(file.read_text())
    for key in ("features", "evidence", "evidence_mean", "evidence_scale"):
        del data[key]
    file.write_text(json.dumps({**data, "version": 3}))
    old = RouterModel.load(file)
    assert old.blocks == ("question",) and not old.reads_evidence
    assert old.route(_FixedEncoder(), ["Who won?"]) == _model(0.0).route(_FixedEncoder(), ["Who won?"])


class _FixedEncoder:
    def encode_query(self, text: str) -> np.ndarray:
        return np.zeros(384)


@pytest.mark.integration
def test_a_learned_evidence_router_routes_after_the_shared_retrieval(tmp_path: Path, demo_dir: Path) -> None:
    """The conditional flow hands the router the shared retrieval's candidates; without a shared retrieval the
    evidence model says what to set."""
    file = _evidence_model().save(tmp_path / "r")
    config = _shared(demo_dir, {"name": "learned", "params": {"model": str(file)}})
    out = build_flow(config).invoke({"query": "Which bike won the 2022 Coastline Design Award?"})
    assert out["route"] in {"cheap", "hopping"}
    assert totals_of(out) == (2 if out["route"] == "cheap" else 4)
    bare = _shared(demo_dir, {"name": "learned", "params": {"model": str(file)}})
    del bare["operators"]["retrieve"]
    bare["params"]["routes"]["cheap"]["flow"]["operators"]["retrieve"] = "hybrid"
    bare["params"]["routes"]["hopping"]["flow"]["operators"]["retrieve"] = "hybrid"
    from modular_rag.errors import OperatorError

    with pytest.raises(OperatorError, match="decides from the first retrieval's evidence"):
        build_flow(bare).invoke({"query": "Which bike won the 2022 Coastline Design Award?"})


def totals_of(out: dict[str, Any]) -> float:
    from modular_rag.trace import totals

    return totals(out["ledger"])["retrievals"]


@pytest.mark.unit
def test_evidence_features_need_candidates_sharing_one_first_retrieval() -> None:
    from modular_rag.eval.router import shared_retrieval

    spec, ks = shared_retrieval(
        {
            "a": load_config(
                {
                    **HOPPING,
                    "operators": {
                        **HOPPING["operators"],
                        "retrieve": {"name": "hybrid", "params": {"k": 10, "pool": 20}},
                    },
                }
            ),
            "b": load_config(HOPPING),
        }
    )
    assert (spec.name, spec.params, ks) == ("hybrid", {"pool": 20, "k": 20}, {"a": 10, "b": 20})
    with pytest.raises(ConfigError, match="cheap retrieve otherwise than hopping"):
        shared_retrieval({"hopping": load_config(HOPPING), "cheap": load_config(CHEAP)})


@pytest.mark.integration
@pytest.mark.usefixtures("own_eval_home")
def test_train_router_on_evidence_writes_a_flow_that_retrieves_once_before_routing(
    tmp_path: Path, demo_dir: Path
) -> None:
    """train-router --features evidence: the routed flow makes the candidates' shared first retrieval (the largest k)
    before the router, its routes take those candidates, and each question costs 2 or 4 retrievals as measured."""
    from modular_rag.eval.datasets import load_demo
    from modular_rag.eval.router import train_router
    from modular_rag.trace import totals

    retrieve = {"name": "hybrid", "params": {"k": 10, "pool": 20}}
    single = {**HOPPING, "name": "single", "operators": {"retrieve": retrieve, "context": "none", "generate": "none"}}
    report = train_router(
        load_demo(),
        {"single": load_config(single), "hopping": load_config(HOPPING)},
        tmp_path / "router",
        features=["evidence"],
        folds=3,
        max_cost_ratio=1.0,
    )
    assert report.costs == {"single": 2.0, "hopping": 4.0}
    assert RouterModel.load(report.model_file).blocks == ("evidence",)
    config = load_config(report.config_file)
    assert config.operators["retrieve"].model_dump(include={"name", "params"}) == {
        "name": "hybrid",
        "params": {"pool": 20, "k": 20},
    }
    routes = config.params["routes"]
    assert [routes[r]["flow"]["operators"]["retrieve"] for r in ("single", "hopping")] == [
        {"name": "given", "params": {"k": 10}},
        {"name": "given", "params": {"k": 20}},
    ]
    config.providers.vectorstore.path = str(demo_dir)
    config.providers.vectorstore.collection = "demo"
    flow = build_flow(config)
    for question in (
        "What does error code E07 mean?",
        "What is the frame material of the bike that won the 2022 Coastline Design Award?",
    ):
        out = flow.invoke({"query": question})
        assert totals(out["ledger"])["retrievals"] == {"single": 2, "hopping": 4}[out["route"]]
    with pytest.raises(ConfigError, match="unknown|some of"):
        train_router(
            load_demo(),
            {"single": load_config(single), "hopping": load_config(HOPPING)},
            tmp_path / "r2",
            features=["tone"],
            folds=3,
        )


@pytest.mark.integration
@pytest.mark.usefixtures("own_eval_home")
def test_train_router_by_default_reads_the_question_and_evidence_under_a_budget_of_70_percent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`modular-rag train-router` with no options trains the router docs/router.md measures: it reads the question and
    the first retrieval's evidence and holds 70% of the costliest route's cost; flows that share no first retrieval
    get a question-only router, and the log says why."""
    import yaml

    from modular_rag.cli import main

    single = {
        **HOPPING,
        "name": "single",
        "operators": {"retrieve": HOPPING["operators"]["retrieve"], "context": "none", "generate": "none"},
    }
    paths = []
    for config in (single, HOPPING, CHEAP):
        paths.append(tmp_path / f"{config['name']}.yaml")
        paths[-1].write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = ["train-router", "--dataset", "demo", "--folds", "3", "--quiet", "--config"]
    assert main([*argv, str(paths[0]), str(paths[1]), "--out", str(tmp_path / "shared")]) == 0
    model = RouterModel.load(tmp_path / "shared")
    assert model.blocks == ("question", "evidence") and model.budget == 0.7
    assert load_config(tmp_path / "shared" / "routed.yaml").operators["retrieve"].name == "hybrid"
    assert main([*argv, str(paths[2]), str(paths[1]), "--out", str(tmp_path / "apart")]) == 0
    model = RouterModel.load(tmp_path / "apart")
    assert model.blocks == ("question",) and model.budget == 0.7
    assert "features: the question only" in capsys.readouterr().out


@pytest.mark.unit
def test_train_router_help_states_the_defaults_train_router_applies() -> None:
    """The command line leaves out what the user did not give, so train_router's signature is the one source of
    the defaults; the help says the same."""
    import inspect

    from modular_rag.cli import _parser
    from modular_rag.eval.router import DEFAULT_FEATURES, train_router

    defaults = inspect.signature(train_router).parameters
    sub = next(a for a in _parser()._actions if a.dest == "command" or getattr(a, "choices", None))
    helps = {a.dest: a.help or "" for a in sub.choices["train-router"]._actions}  # type: ignore[union-attr]
    assert f"(default {defaults['max_cost_ratio'].default})" in helps["max_cost_ratio"]
    assert f"default {','.join(DEFAULT_FEATURES)}" in helps["features"]
