"""Config: validated with pydantic, errors name the path and what is allowed, round-trips through YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag import template_path
from modular_rag.config import FlowConfig, load_config
from modular_rag.errors import ConfigError

pytestmark = pytest.mark.unit

BASE = {"pattern": "linear", "providers": {"vectorstore": {"name": "chroma", "in_memory": True}}}


def config(**overrides: object) -> dict:
    data = {**BASE, **overrides}
    return data


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        (
            config(operators={"retrieve": {"name": "hybrid", "params": {"k": 0}}}),
            "operators.retrieve.params.k",
            "greater than 0",
        ),
        (
            config(operators={"retrieve": {"name": "hybrid", "params": {"k": 5, "fusion": "max"}}}),
            "operators.retrieve.params.fusion",
            "'rrf', 'convex' or 'weighted'",
        ),
        (config(operators={"retrieve": {"name": "bm26"}}), "operators.retrieve.name", "valid names"),
        (config(operators={"rerank": {"name": "bm25"}}), "operators.rerank.name", "fits port retrieve"),
        (config(operators={"retriever": {"name": "bm25"}}), "operators.retriever", "slots: rewrite, retrieve"),
        (config(operators={"retrieve": {"name": "none"}}), "operators.retrieve.name", "required"),
        (
            config(operators={"retrieve": {"name": "bm25", "params": {"kk": 3}}}),
            "operators.retrieve.params.kk",
            "unknown key",
        ),
        (config(pattern="spiral"), "pattern", "patterns: "),
        (config(providers={"llm": {"name": "gpt"}}), "providers.llm", "'local', 'openai'"),
        (
            config(providers={"llm": {"name": "local", "temperature": -1}}),
            "providers.llm.temperature",
            "greater than or equal to 0",
        ),
        (config(params={"rounds": 3}), "params.rounds", "unknown key"),
        (
            config(operators={"retrieve": {"name": "bm25", "on_error": "ignore"}}),
            "operators.retrieve.on_error",
            "'fail' or 'skip'",
        ),
        (config(operators={"generate": [{"name": "cited_answer"}]}), "operators.generate", "takes one operator"),
        (
            config(operators={"retrieve": {"name": "hybrid", "params": {"k": 30, "pool": 10}}}),
            "operators.retrieve.params",
            "k (30) can be at most 2 x pool (20)",
        ),
        (config(surprise=1), "surprise", "unknown key"),
        (
            config(indexing={"chunker": {"name": "recursive", "params": {"chunk_size": 100, "chunk_overlap": 100}}}),
            "indexing.chunker.params",
            "must be smaller",
        ),
        (
            config(operators={"retrieve": {"name": "bm25", "skip_when": {"key": "route", "op": "eq"}}}),
            "operators.retrieve.skip_when",
            "needs a value",
        ),
    ],
)
def test_invalid_configs_name_the_path_and_what_is_allowed(data: dict, path: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(data)
    assert err.value.path == path, str(err.value)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_yaml_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "broken.yaml").write_text("pattern: [linear\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match="empty"):
        load_config(tmp_path / "empty.yaml")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(tmp_path / "broken.yaml")
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    (tmp_path / "evil.yaml").write_text("pattern: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "evil.yaml")


def test_shorthand_names_and_defaults() -> None:
    cfg = load_config(config(operators={"retrieve": "bm25"}))
    assert cfg.slot("retrieve")[0].name == "bm25"
    assert cfg.providers.llm.name == "local"
    assert cfg.providers.embeddings.name == "minilm"


def test_round_trip_through_yaml_gives_an_equal_config_and_the_same_graph(tmp_path: Path) -> None:
    from modular_rag.builder import build_flow

    cfg = load_config(template_path("linear"))
    cfg.providers.vectorstore.in_memory = True
    text = cfg.to_yaml()
    (tmp_path / "c.yaml").write_text(text)
    again = load_config(tmp_path / "c.yaml")
    assert again == cfg
    assert again.to_yaml() == text
    assert build_flow(again).get_graph().draw_mermaid() == build_flow(cfg).get_graph().draw_mermaid()


def test_python_objects_are_accepted_but_not_dumped() -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=["x"])
    cfg = load_config({**BASE, "providers": {"llm": model, "vectorstore": {"in_memory": True}}})
    assert cfg.providers.llm is model
    with pytest.raises(ConfigError, match="providers.llm: a Python object cannot be written"):
        cfg.to_yaml()


def test_import_paths_need_opt_in() -> None:
    with pytest.raises(ConfigError, match="allow_imports"):
        load_config(config(operators={"rerank": {"name": "mypkg.ops:rerank"}}))
    assert load_config(config(operators={"rerank": {"name": "mypkg.ops:rerank"}}, allow_imports=True))


def test_loading_has_no_side_effects(tmp_path: Path) -> None:
    target = tmp_path / "store"
    load_config(config(providers={"vectorstore": {"name": "chroma", "path": str(target)}}))
    assert not target.exists()


def test_flowconfig_is_strict() -> None:
    assert FlowConfig.model_config["extra"] == "forbid"
