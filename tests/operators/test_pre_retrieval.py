"""Pre-retrieval: the rewrite operator, its output cleaning and its fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag.registry import Port, get_operator
from operators.pre_retrieval import first_line, usable_rewrite
from tests.conftest import fake_env


def rewrite(env, query: str, **params):
    info = get_operator(Port.QUERY, "rewrite")
    return info.factory(info.params.model_validate(params), env)({"query": query})


@pytest.mark.unit
def test_first_line_strips_labels_and_markers() -> None:
    assert first_line('Query: "e07 error meaning"\nmore') == "e07 error meaning"
    assert first_line("1. brake pad part number") == "brake pad part number"
    assert not usable_rewrite("", "q")
    assert not usable_rewrite("x " * 200, "short question")
    assert not usable_rewrite("Sorry, I cannot help with that.", "q")


@pytest.mark.integration
def test_rewrite_keeps_the_original_by_default(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "Search query: E07 display error meaning")
    assert rewrite(env, "what's E07?") == {"queries": ["what's E07?", "E07 display error meaning"]}
    assert rewrite(env, "what's E07?", keep_original=False) == {"queries": ["E07 display error meaning"]}


@pytest.mark.integration
def test_unusable_rewrite_falls_back_to_the_original(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "Sorry, as an AI I cannot rewrite questions.")
    assert rewrite(env, "what's E07?") == {"queries": ["what's E07?"]}
