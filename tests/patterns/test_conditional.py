"""Conditional pattern: routers pick a sub-flow; low confidence and invalid model output fall back, visibly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modular_rag.builder import build_flow
from modular_rag.config import load_config
from modular_rag.errors import ConfigError
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from tests.conftest import fake_env
from tests.patterns.conftest import snapshot, template

ROUTES = {
    "exact": {
        "description": "Questions naming a product model, an error code or a part number.",
        "keywords": ["re:\\b[A-Z]{1,3}-?\\d{1,4}\\b", "error", "code", "part"],
        "examples": ["What does error E12 mean?", "Which brake pads fit the TW-E1?"],
    },
    "open": {
        "description": "Open questions about riding, maintenance, policies and the company.",
        "examples": ["How should I look after my chain in winter?", "Why choose disc brakes?"],
    },
}


def router(name: str, env: Providers, threshold: float = 0.0, **params: Any):
    info = get_operator(Port.ROUTE, name)
    injected = {
        "routes": {k: {kk: v for kk, v in r.items()} for k, r in ROUTES.items()},
        "fallback": "open",
        "threshold": threshold,
    }
    return info.factory(info.params.model_validate({**params, **injected}), env)


@pytest.mark.unit
def test_template_graph_matches_snapshot() -> None:
    flow = build_flow(template("conditional"))
    assert flow.get_graph().draw_mermaid() == snapshot("conditional", flow.get_graph().draw_mermaid())


@pytest.mark.unit
def test_bad_routes_are_refused_with_their_path() -> None:
    bad = template("conditional", params={"fallback": "nowhere"})
    with pytest.raises(ConfigError, match="fallback 'nowhere' is not a route"):
        load_config(bad)
    bad = template("conditional")
    bad["params"]["routes"]["exact"]["flow"]["operators"]["retrieve"] = {"name": "bm25", "params": {"k": 0}}
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert err.value.path == "params.routes.exact.flow.operators.retrieve.params.k"


@pytest.mark.integration
def test_keyword_router_scores_by_eq19(demo_env: Providers) -> None:
    out = router("keyword", demo_env)({"query": "What does error code E07 mean?"})
    assert out == {"route": "exact", "route_confidence": pytest.approx(3 / 4)}
    low = router("keyword", demo_env, threshold=0.9)({"query": "What does error code E07 mean?"})
    assert low["route"] == "open"  # below threshold: the fallback


@pytest.mark.integration
def test_embedding_and_hybrid_routers(demo_env: Providers) -> None:
    emb = router("embedding", demo_env)({"query": "Is it better to use disc brakes or rim brakes?"})
    assert emb["route"] == "open" and 0 < emb["route_confidence"] <= 1
    hyb = router("hybrid", demo_env, alpha=0.7)({"query": "Which part number are the brake pads for the TW-E1?"})
    assert hyb["route"] == "exact"


@pytest.mark.integration
def test_llm_router_naming_no_route_falls_back_and_says_so(demo_dir: Path) -> None:
    config = template("conditional", demo_dir, operators={"route": {"name": "llm"}})
    config["params"]["routes"]["exact"]["flow"]["operators"]["generate"] = "none"
    config["params"]["routes"]["open"]["flow"]["operators"]["generate"] = "none"
    from tests.conftest import fake_llm

    config["providers"]["llm"] = fake_llm("Sure! I think this is about bicycles.")
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert out["route"] == "open"
    note = next(e for e in out["trace"] if e["node"] == "route")["summary"]
    assert "no route matched" in note and "bicycles" in note
    config["providers"]["llm"] = fake_llm("exact")
    assert build_flow(config).invoke({"query": "What does error code E07 mean?"})["route"] == "exact"


@pytest.mark.integration
def test_llm_router_on_the_local_model_takes_the_route_the_model_names(demo_env: Providers) -> None:
    import re

    from operators.routing import ROUTE_PROMPT

    query = "What does error code E07 mean?"
    out = router("llm", demo_env)({"query": query})
    # ask the model the same question independently (temperature 0): the route is the name it writes, or the
    # fallback when it writes none
    listing = "\n".join(f"- {name}: {info['description']}" for name, info in ROUTES.items())
    reply = demo_env.llm.complete(ROUTE_PROMPT.format(routes=listing, query=query), max_tokens=8).text
    named = [n for n in ROUTES if re.search(rf"(?<![\w-]){n}(?![\w-])", reply, re.IGNORECASE)]
    assert out["route"] == (named[0] if len(named) == 1 else "open"), reply
    assert (0.0 < out["route_confidence"] <= 1.0) if len(named) == 1 else out["route_confidence"] == 0.0


@pytest.mark.integration
def test_end_to_end_on_the_local_model(demo_dir: Path) -> None:
    out = build_flow(template("conditional", demo_dir)).invoke({"query": "What does error code E17 mean?"})
    assert out["route"] == "exact"
    assert out["candidates"][0]["metadata"]["doc_id"] == "display-error-e17"
    assert out["answer"]["text"].strip()
    assert [e["node"] for e in out["trace"]] == ["route", "exact/retrieve", "exact/context", "exact/generate"]


@pytest.mark.integration
def test_routes_share_the_parent_providers(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "E17 is a controller fault [1].")
    config = template("conditional", demo_dir)
    out = build_flow(config, providers=env).invoke({"query": "What does error code E17 mean?"})
    assert out["answer"]["text"] == "E17 is a controller fault [1]."


@pytest.mark.integration
@pytest.mark.parametrize("control", ["skip_when", "on_error"])
def test_a_skipped_or_failed_router_takes_the_fallback_route_and_says_so(demo_dir: Path, control: str) -> None:
    from modular_rag.config import OperatorSpec

    def broken(state: Any) -> dict[str, Any]:
        raise RuntimeError("router service down")

    config = load_config(template("conditional", demo_dir))
    if control == "skip_when":
        config.operators["route"] = OperatorSpec(
            name="keyword", skip_when={"key": "query", "op": "contains", "value": "E07"}
        )
    else:
        spec = OperatorSpec.from_object(broken)
        spec.on_error = "skip"
        config.operators["route"] = spec
    config.providers.llm = fake_env(demo_dir, "E07 means speed sensor signal lost [1].").llm.model
    out = build_flow(config).invoke({"query": "What does error code E07 mean?"})
    assert out["route"] == "open"  # the configured fallback, although the keyword router would say exact
    event = next(e for e in out["trace"] if e["node"] == "route")
    assert "falls back to route='open'" in event["summary"]
    assert any(e["node"].startswith("open/") for e in out["trace"])


class _ScriptedLogprobs:
    """A chat client that replies with fixed tokens and their alternatives (the router needs exact log-probs)."""

    def __init__(self, tokens: list[tuple[str, list[tuple[str, float]]]]) -> None:
        import math

        from modular_rag.providers import Completion, TokenLogprob

        self.completion = Completion(
            "".join(t for t, _ in tokens),
            tuple(
                TokenLogprob(t, math.log(dict(top)[t]), tuple((a, math.log(p)) for a, p in top)) for t, top in tokens
            ),
        )

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return self.completion


@pytest.mark.unit
def test_llm_router_scores_each_route_by_its_full_name() -> None:
    from types import SimpleNamespace

    routes = {
        "explain": {"description": "explanations"},
        "exact": {"description": "codes and parts"},
        "open": {"description": "anything else"},
    }
    # the model wrote "exact": "ex" (0.9, else "open" 0.1), then "act" (0.7, else "plain" 0.3)
    llm = _ScriptedLogprobs([("ex", [("ex", 0.9), ("open", 0.1)]), ("act", [("act", 0.7), ("plain", 0.3)])])
    info = get_operator(Port.ROUTE, "llm")
    route = info.factory(info.params.model_validate({"routes": routes, "fallback": "open"}), SimpleNamespace(llm=llm))
    out = route({"query": "What does E07 mean?"})
    assert out["route"] == "exact"  # the name the model wrote, never a route that only shares its first token
    assert out["route_confidence"] == pytest.approx(0.9 * 0.7 / (0.9 * 0.7 + 0.9 * 0.3 + 0.1))
