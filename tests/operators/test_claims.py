"""The attribution check reads relations, not bags of words: written misreadings of demo and SQuAD passages, built
from the passages' own words, are rejected; correct quotes, paraphrases and short answers of the same passages
are accepted (``data/misreadings.jsonl``)."""

from __future__ import annotations

import pytest

from modular_rag.attribution.claims import check_claims
from modular_rag.attribution.relations import negated, quantities, sides
from tests.operators.misreadings import Case, cases, evidence_for

MISREADINGS = [c for c in cases() if not c.correct]
CORRECT = [c for c in cases() if c.correct]


def _supported(case: Case) -> tuple[bool, list[str]]:
    verdicts = check_claims(case.answer, case.question, evidence_for(case.passage), semantic_threshold=None)
    return bool(verdicts) and all(v.supported for v in verdicts), [v.reason for v in verdicts]


@pytest.mark.unit
def test_the_fixture_is_big_enough_and_covers_each_kind_of_misreading() -> None:
    assert len(MISREADINGS) >= 30 and len(CORRECT) >= 30
    assert {c.kind for c in MISREADINGS} == {"binding", "negation", "comparison", "unit", "rival", "roles"}
    assert {c.passage.split("/")[0] for c in MISREADINGS} == {"demo", "squad"}


@pytest.mark.unit
def test_the_e07_misreading_made_of_the_passages_own_words_is_rejected() -> None:
    [entry] = evidence_for("demo/display-error-e07")
    question = "What does error code E07 mean on the e-bike display?"
    [wrong] = check_claims(
        "E07 means the motor was running for more than 10 seconds [1].", question, [entry], semantic_threshold=None
    )
    assert not wrong.supported and wrong.reason.startswith("binding:") and "'e07'" in wrong.reason
    [right] = check_claims("Error E07 means speed sensor signal lost [1].", question, [entry], semantic_threshold=None)
    assert right.supported and right.evidence == ((1, "Error E07 means speed sensor signal lost."),)


@pytest.mark.unit
@pytest.mark.parametrize("case", MISREADINGS, ids=[c.label[:60] for c in MISREADINGS])
def test_a_written_misreading_is_rejected(case: Case) -> None:
    supported, reasons = _supported(case)
    assert not supported, reasons


@pytest.mark.unit
@pytest.mark.parametrize("case", CORRECT, ids=[c.label[:60] for c in CORRECT])
def test_a_correct_answer_of_the_same_passages_is_accepted(case: Case) -> None:
    supported, reasons = _supported(case)
    assert supported, reasons


@pytest.mark.unit
def test_negation_comparison_and_units_are_read_from_the_clause() -> None:
    assert negated("The display has not received a pulse") and negated("Custom-painted bikes cannot be returned")
    assert not negated("not only the frame but also the fork") and not negated("it was not until 1271 that")
    assert sides("usually drawing crowds of over 95,000 people") == {("amount", 1)}
    assert sides("New South Wales to the north") == {("north", 1)}  # "South" in a name takes no side
    assert [str(q) for q in quantities("within the legal 25 km/h limit, 10 seconds, $8.7 billion")] == [
        "25 km/h",
        "10 s",
        "8.7 billion usd",
    ]
