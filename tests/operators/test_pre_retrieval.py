"""Pre-retrieval: the rewrite operators (rewrite, condense, expansions), their output cleaning and fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from operators.pre_retrieval import first_line, usable_rewrite
from tests.conftest import ScriptedChat, fake_env, providers_config


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
def test_rewrite_retrieves_with_the_rewrite_as_the_paper_does(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "Search query: E07 display error meaning")
    assert rewrite(env, "what's E07?") == {"queries": ["E07 display error meaning"]}
    assert rewrite(env, "what's E07?", keep_original=True) == {"queries": ["what's E07?", "E07 display error meaning"]}


@pytest.mark.integration
def test_unusable_rewrite_falls_back_to_the_original(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "Sorry, as an AI I cannot rewrite questions.")
    assert rewrite(env, "what's E07?") == {"queries": ["what's E07?"]}


def build(env, name: str, **params):
    info = get_operator(Port.QUERY, name)
    return info.factory(info.params.model_validate(params), env)


@pytest.mark.integration
def test_multi_query_styles_and_dedup(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "E07 display error meaning", "E07 display error meaning", "speed sensor E07 fault")
    out = build(env, "multi_query")({"query": "What does E07 mean?"})
    assert out == {"queries": ["What does E07 mean?", "E07 display error meaning", "speed sensor E07 fault"]}


@pytest.mark.integration
def test_decompose_reads_one_question_per_line(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "1. Which bike won the award?\n2. What frame does it have?\n3. Which bike won the award?")
    out = build(env, "decompose", max_questions=3)({"query": "What frame does the award winner have?"})
    assert out == {"queries": ["Which bike won the award?", "What frame does it have?"]}


@pytest.mark.integration
def test_hyde_searches_with_a_hypothetical_passage(demo_dir: Path) -> None:
    import numpy as np

    passage = "Error E07 on the display means the speed sensor signal was lost."
    env = fake_env(demo_dir, passage)
    out = build(env, "hyde", average_with_query=True)({"query": "What does E07 mean?"})
    assert out["queries"] == [passage]
    vec = np.asarray(out["query_embedding"])
    assert vec.shape == (384,) and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
    from modular_rag.registry import Port as P

    retrieve = get_operator(P.RETRIEVE, "dense")
    hits = retrieve.factory(retrieve.params.model_validate({"k": 1}), env)({"query": "x", **out})["candidates"]
    assert hits[0]["metadata"]["doc_id"] == "display-error-e07"


@pytest.mark.integration
def test_step_back_adds_a_general_question(demo_dir: Path) -> None:
    env = fake_env(demo_dir, "How do e-bike displays report faults?")
    out = build(env, "step_back")({"query": "What does E07 mean?"})
    assert out == {"queries": ["What does E07 mean?", "How do e-bike displays report faults?"]}


@pytest.mark.integration
def test_filter_extraction_is_validated_against_the_index(demo_dir: Path, demo_env) -> None:
    rules = build(demo_env, "filter_extract")
    assert rules({"query": "What was the warranty on aluminium frames in 2019?"}) == {"filter": {"year": 2019}}
    both = rules({"query": "Which policy covered returns in 2020?", "filter": {"source": "policy"}})
    assert both == {"filter": {"$and": [{"source": "policy"}, {"year": 2020}]}}
    assert rules({"query": "How do I fit a helmet?"}) == {}
    env = fake_env(demo_dir, 'Sure: {"year": "twenty", "colour": "red", "source": "policy"}')
    from modular_rag.trace import metered

    with metered() as meter:
        out = build(env, "filter_extract", mode="llm")({"query": "policies please"})
    assert out == {"filter": {"source": "policy"}}
    assert any("colour: not a metadata field" in n for n in meter.notes)
    assert any("year: 'twenty' is not a int" in n for n in meter.notes)


E07 = "What does error code E07 mean on the e-bike display?"
TURNS = [
    HumanMessage("Which bike won the 2022 Coastline Design Award?"),
    AIMessage("The TW-550 Gravel [1]."),
    HumanMessage(E07),
    AIMessage("Error E07 means speed sensor signal lost [1]."),
]


def scripted_env(demo_dir: Path, reply: str):
    llm = ScriptedChat.of(lambda prompt: reply)
    return Providers(providers_config(demo_dir, llm)), llm


@pytest.mark.integration
def test_condense_passes_a_first_question_without_a_model_call(demo_dir: Path) -> None:
    from modular_rag.trace import metered

    env, llm = scripted_env(demo_dir, "unused")
    with metered() as meter:
        out = build(env, "condense")({"query": E07, "messages": [HumanMessage(E07)]})
    assert out == {"queries": [E07]}
    assert meter.llm_calls == 0 and llm.prompts == []


@pytest.mark.integration
def test_condense_writes_a_standalone_question_from_the_last_turns(demo_dir: Path) -> None:
    env, llm = scripted_env(demo_dir, "Question: What does error code E12 mean on the e-bike display?")
    out = build(env, "condense", max_turns=1)({"query": "And E12?", "messages": [*TURNS, HumanMessage("And E12?")]})
    assert out == {"queries": ["What does error code E12 mean on the e-bike display?"]}
    (prompt,) = llm.prompts
    assert f"User: {E07}\nAssistant: Error E07 means speed sensor signal lost.\n" in prompt  # markers stripped
    assert "Coastline" not in prompt  # the window is the last max_turns turns
    assert "Follow-up question: And E12?\n" in prompt


@pytest.mark.integration
@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("Sorry, I cannot help with that.", "is unusable"),
        (f"User: {E07}", "copies an earlier question"),  # SmolLM2-135M, asked to condense "Is it dangerous?"
        ("What does error code E17 mean on the e-bike display?", "drops e12"),
    ],
)
def test_condense_falls_back_to_the_question_as_asked(demo_dir: Path, reply: str, why: str) -> None:
    from modular_rag.trace import metered

    env, _ = scripted_env(demo_dir, reply)
    with metered() as meter:
        out = build(env, "condense")({"query": "And E12?", "messages": TURNS})
    assert out == {"queries": ["And E12?"]}
    assert meter.llm_calls == 1 and any(why in n and "as asked" in n for n in meter.notes)
