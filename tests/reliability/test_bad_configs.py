"""A corpus of malformed configs: each is rejected before any model loads, with one line naming the config path and
what is allowed; the CLI exits 2 without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modular_rag.config import load_config
from modular_rag.errors import ConfigError

pytestmark = pytest.mark.unit

OK = {"pattern": "linear", "providers": {"vectorstore": {"name": "chroma", "in_memory": True}}}


def with_(**changes: object) -> dict:
    return {**OK, **changes}


def op(slot: str, spec: object, pattern: str = "linear", **extra: object) -> dict:
    return {**OK, "pattern": pattern, "operators": {slot: spec}, **extra}


ROUTES = {"a": {"flow": {"pattern": "linear"}}, "b": {"flow": {"pattern": "linear"}}}

# (id, config, expected path, fragment of the message)
BAD: list[tuple[str, object, str, str]] = [
    # the document itself
    ("list", ["pattern", "linear"], "", "must be a mapping"),
    ("scalar", "linear", "", "must be a mapping"),
    ("number", 42, "", "must be a mapping"),
    ("empty", None, "", "config is empty"),
    ("no-pattern", {"operators": {}}, "pattern", "Field required"),
    ("pattern-null", {"pattern": None}, "pattern", "valid string"),
    ("pattern-empty", {"pattern": ""}, "pattern", "at least 1 character"),
    ("pattern-unknown", {"pattern": "spiral"}, "pattern", "patterns: adaptive, branching, conditional"),
    ("pattern-typo", {"pattern": "Linear"}, "pattern", "unknown pattern 'Linear'"),
    ("unknown-top-key", with_(operator={}), "operator", "unknown key"),
    ("operators-list", with_(operators=["bm25"]), "operators", "valid dictionary"),
    ("params-list", with_(params=[1]), "params", "valid dictionary"),
    # providers
    ("llm-unknown", with_(providers={"llm": {"name": "gpt"}}), "providers.llm", "'local', 'openai'"),
    ("llm-no-name", with_(providers={"llm": {"model": "x"}}), "providers.llm", "name"),
    (
        "llm-temperature",
        with_(providers={"llm": {"name": "local", "temperature": 3}}),
        "providers.llm.temperature",
        "less than or equal to 2",
    ),
    (
        "llm-max-tokens",
        with_(providers={"llm": {"name": "openai", "max_tokens": 0}}),
        "providers.llm.max_tokens",
        "greater than 0",
    ),
    (
        "llm-parallel",
        with_(providers={"llm": {"name": "local", "parallel": 0}}),
        "providers.llm.parallel",
        "greater than or equal to 1",
    ),
    (
        "llm-timeout",
        with_(providers={"llm": {"name": "openai", "timeout_s": -1}}),
        "providers.llm.timeout_s",
        "greater than 0",
    ),
    (
        "llm-retries",
        with_(providers={"llm": {"name": "openai", "max_retries": 100}}),
        "providers.llm.max_retries",
        "less than or equal to 20",
    ),
    (
        "llm-extra",
        with_(providers={"llm": {"name": "openai", "api_key": "sk-x"}}),
        "providers.llm.api_key",
        "unknown key",
    ),
    (
        "embeddings-unknown",
        with_(providers={"embeddings": {"name": "bge"}}),
        "providers.embeddings",
        "'minilm', 'sentence_transformers'",
    ),
    (
        "embeddings-no-path",
        with_(providers={"embeddings": {"name": "sentence_transformers"}}),
        "providers.embeddings.path",
        "Field required",
    ),
    (
        "vectorstore-unknown",
        with_(providers={"vectorstore": {"name": "faiss"}}),
        "providers.vectorstore",
        "'chroma' (the default) or 'milvus'",
    ),
    (
        "vectorstore-milvus-uri",
        with_(providers={"vectorstore": {"name": "milvus", "uri": "milvus.example:19530"}}),
        "providers.vectorstore.uri",
        "nor a Milvus Lite file",
    ),
    (
        "vectorstore-port",
        with_(providers={"vectorstore": {"name": "chroma", "port": 70000}}),
        "providers.vectorstore.port",
        "less than 65536",
    ),
    (
        "vectorstore-collection",
        with_(providers={"vectorstore": {"name": "chroma", "collection": "a b"}}),
        "providers.vectorstore.collection",
        "pattern",
    ),
    (
        "sparse-stemmer",
        with_(providers={"sparse": {"stemmer": "porter"}}),
        "providers.sparse.stemmer",
        "'english' or 'none'",
    ),
    ("sparse-b", with_(providers={"sparse": {"b": 2}}), "providers.sparse.b", "less than or equal to 1"),
    ("providers-extra", with_(providers={"gpu": True}), "providers.gpu", "unknown key"),
    # operators: names, ports, slots
    ("op-unknown", op("retrieve", {"name": "bm26"}), "operators.retrieve.name", "valid names: none, bm25, dense"),
    ("op-wrong-slot", op("rerank", {"name": "hybrid"}), "operators.rerank.name", "fits port retrieve"),
    ("op-generator-in-retrieve", op("retrieve", "cited_answer"), "operators.retrieve.name", "fits port generate"),
    ("op-router-in-linear", op("generate", "keyword"), "operators.generate.name", "fits port route"),
    ("op-unknown-slot", op("retriever", "bm25"), "operators.retriever", "slots: rewrite, retrieve"),
    ("op-required-none", op("retrieve", "none"), "operators.retrieve.name", "required"),
    ("op-no-name", op("retrieve", {"params": {"k": 3}}), "operators.retrieve.name", "Field required"),
    ("op-name-number", op("retrieve", {"name": 5}), "operators.retrieve.name", "valid string"),
    ("op-list-where-one", op("generate", [{"name": "cited_answer"}]), "operators.generate", "takes one operator"),
    ("op-import-no-optin", op("rerank", "pkg.mod:fn"), "operators.rerank.name", "allow_imports"),
    ("op-extra-key", op("retrieve", {"name": "bm25", "weight": 1}), "operators.retrieve.weight", "unknown key"),
    (
        "op-on-error",
        op("retrieve", {"name": "bm25", "on_error": "retry"}),
        "operators.retrieve.on_error",
        "'fail' or 'skip'",
    ),
    ("op-timeout", op("retrieve", {"name": "bm25", "timeout_s": 0}), "operators.retrieve.timeout_s", "greater than 0"),
    (
        "op-skip-when-op",
        op("rerank", {"name": "embedding", "skip_when": {"key": "x", "op": "like", "value": 1}}),
        "operators.rerank.skip_when.op",
        "'empty', 'nonempty'",
    ),
    (
        "op-chain-bad-item",
        op("rerank", [{"name": "embedding"}, {"name": "bm25"}]),
        "operators.rerank.1.name",
        "fits port retrieve",
    ),
    # operator params: wrong types, negative and absurd bounds
    ("k-zero", op("retrieve", {"name": "bm25", "params": {"k": 0}}), "operators.retrieve.params.k", "greater than 0"),
    (
        "k-negative",
        op("retrieve", {"name": "dense", "params": {"k": -5}}),
        "operators.retrieve.params.k",
        "greater than 0",
    ),
    (
        "k-absurd",
        op("retrieve", {"name": "dense", "params": {"k": 10**9}}),
        "operators.retrieve.params.k",
        "less than or equal to 1000",
    ),
    (
        "k-string",
        op("retrieve", {"name": "dense", "params": {"k": "ten"}}),
        "operators.retrieve.params.k",
        "valid integer",
    ),
    (
        "fusion-unknown",
        op("retrieve", {"name": "hybrid", "params": {"fusion": "max"}}),
        "operators.retrieve.params.fusion",
        "'rrf', 'convex' or 'weighted'",
    ),
    (
        "weights-shape",
        op("retrieve", {"name": "hybrid", "params": {"weights": [1, 2, 3]}}),
        "operators.retrieve.params.weights",
        "at most 2 items",
    ),
    (
        "pool-below-k",
        op("retrieve", {"name": "hybrid", "params": {"k": 50, "pool": 10}}),
        "operators.retrieve.params",
        "k (50) can be at most 2 x pool (20)",
    ),
    (
        "budget-negative",
        op("context", {"name": "budget", "params": {"max_tokens": -1}}),
        "operators.context.params.max_tokens",
        "greater than 0",
    ),
    (
        "mmr-lambda",
        op("rerank", {"name": "mmr", "params": {"lambda_mult": 1.5}}),
        "operators.rerank.params.lambda_mult",
        "less than or equal to 1",
    ),
    (
        "cross-encoder-no-model",
        op("rerank", {"name": "cross_encoder"}),
        "operators.rerank.params.model",
        "Field required",
    ),
    (
        "generate-tokens",
        op("generate", {"name": "cited_answer", "params": {"max_tokens": 0}}),
        "operators.generate.params.max_tokens",
        "greater than 0",
    ),
    # pattern params and loop bounds
    ("linear-params", with_(params={"rounds": 2}), "params.rounds", "unknown key"),
    (
        "iterative-rounds-zero",
        {**OK, "pattern": "iterative", "params": {"rounds": 0}},
        "params.rounds",
        "greater than or equal to 1",
    ),
    (
        "iterative-rounds-absurd",
        {**OK, "pattern": "iterative", "params": {"rounds": 10_000}},
        "params.rounds",
        "less than or equal to 20",
    ),
    (
        "recursive-depth",
        {**OK, "pattern": "recursive", "params": {"max_depth": -1}},
        "params.max_depth",
        "greater than or equal to 1",
    ),
    (
        "recursive-nodes",
        {**OK, "pattern": "recursive", "params": {"max_nodes": 1}},
        "params.max_nodes",
        "greater than or equal to 2",
    ),
    (
        "branching-mode",
        {**OK, "pattern": "branching", "params": {"mode": "both"}},
        "params.mode",
        "'queries', 'documents' or 'passages'",
    ),
    (
        "branching-branches",
        {**OK, "pattern": "branching", "params": {"branches": 100}},
        "params.branches",
        "less than or equal to 16",
    ),
    (
        "adaptive-steps",
        {**OK, "pattern": "adaptive", "params": {"max_steps": 0}},
        "params.max_steps",
        "greater than or equal to 1",
    ),
    (
        "adaptive-mode",
        {**OK, "pattern": "adaptive", "params": {"mode": "agent"}},
        "params.mode",
        "'flare' or 'self_rag'",
    ),
    (
        "tau-out-of-range",
        op("judge", {"name": "token_confidence", "params": {"tau": 2}}, "iterative"),
        "operators.judge.params.tau",
        "less than 1",
    ),
    (
        "conditional-no-routes",
        {**OK, "pattern": "conditional", "params": {"fallback": "a"}},
        "params.routes",
        "Field required",
    ),
    (
        "conditional-one-route",
        {**OK, "pattern": "conditional", "params": {"fallback": "a", "routes": {"a": {"flow": {"pattern": "linear"}}}}},
        "params.routes",
        "at least 2 items",
    ),
    (
        "conditional-bad-fallback",
        {**OK, "pattern": "conditional", "params": {"fallback": "z", "routes": ROUTES}},
        "params",
        "fallback 'z' is not a route",
    ),
    (
        "conditional-route-flow",
        {
            **OK,
            "pattern": "conditional",
            "params": {
                "fallback": "a",
                "routes": {**ROUTES, "b": {"flow": {"pattern": "linear", "operators": {"retrieve": "nope"}}}},
            },
        },
        "params.routes.b.flow.operators.retrieve.name",
        "valid names",
    ),
    (
        "conditional-nested",
        {
            **OK,
            "pattern": "conditional",
            "params": {"fallback": "a", "routes": {**ROUTES, "b": {"flow": {"pattern": "conditional"}}}},
        },
        "params.routes.b.flow.pattern",
        "cannot itself be conditional",
    ),
    (
        "conditional-threshold",
        {**OK, "pattern": "conditional", "params": {"fallback": "a", "routes": ROUTES, "threshold": 7}},
        "params.threshold",
        "less than or equal to 1",
    ),
    ("branching-fuse-wrong-port", op("fuse", "bm25", "branching"), "operators.fuse.name", "fits port retrieve"),
    # indexing and caches
    (
        "chunk-size",
        with_(indexing={"chunker": {"name": "fixed", "params": {"chunk_size": 5}}}),
        "indexing.chunker.params.chunk_size",
        "greater than 20",
    ),
    (
        "chunker-unknown",
        with_(indexing={"chunker": {"name": "semantic"}}),
        "indexing.chunker.name",
        "valid names: none, document, fixed, recursive, sentence_window",
    ),
    (
        "answer-cache-threshold",
        with_(answer_cache={"threshold": 0.1}),
        "answer_cache.threshold",
        "greater than or equal to 0.5",
    ),
    ("cache-size", with_(providers={"cache": {"max_entries": 0}}), "providers.cache.max_entries", "greater than 0"),
]


def test_the_corpus_has_at_least_fifty_configs() -> None:
    assert len(BAD) >= 50
    assert len({case[0] for case in BAD}) == len(BAD)


@pytest.mark.parametrize(("config", "path", "fragment"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_config_is_rejected_with_its_path(config: object, path: str, fragment: str, tmp_path: Path) -> None:
    import modular_rag.providers as providers

    file = tmp_path / "config.yaml"  # as users write them
    file.write_text("" if config is None else yaml.safe_dump(config))
    before = dict(providers._SHARED)
    with pytest.raises(ConfigError) as err:
        load_config(file)
    message = str(err.value)
    assert err.value.path == path, message
    assert fragment in message, message
    assert "\n" not in message
    assert before == providers._SHARED  # nothing was built or loaded


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in BAD
        if c[0] in {"list", "pattern-unknown", "op-wrong-slot", "k-zero", "conditional-route-flow", "empty"}
    ],
    ids=lambda c: c[0],
)
def test_cli_exits_2_with_one_line(case: tuple, tmp_path: Path) -> None:
    name, config, path, fragment = case
    file = tmp_path / "bad.yaml"
    file.write_text("" if config is None else yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "modular_rag.cli", "run", "--config", str(file), "q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert fragment in proc.stderr
