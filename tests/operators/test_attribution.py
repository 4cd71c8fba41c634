"""Evidence selection and the attribution check: question cues, answer spans, and claims checked against what they
cite (numbers, codes, names and content words must be in the cited passage)."""

from __future__ import annotations

import pytest

from modular_rag.attribution import SentenceScorer, best_span, question_cues
from modular_rag.attribution.claims import check_claims
from modular_rag.providers import Providers
from operators.generation import check_answer

E07 = [
    {
        "ref": 1,
        "chunk_id": "e07",
        "text": "Error E07 means speed sensor signal lost. The display has not received "
        "a pulse from the wheel speed sensor for more than 10 seconds while the motor was running.",
        "score": 1.0,
        "metadata": {"title": "E-bike display error E07", "doc_id": "display-error-e07"},
    }
]
QUESTION = "What does error code E07 mean on the e-bike display?"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("question", "expects"),
    [
        ("How much does the TW-900 Carbon Road weigh?", "number"),
        ("When standing over a bicycle, how big a gap should there be below the crotch?", "number"),
        ("When did the Normans conquer England?", "date"),
        ("Who wrote Hamlet?", "person"),
        ("In which town is the factory?", "place"),
        ("Is the TW-E1 an e-bike?", "yes_no"),
        ("What does error code E07 mean?", "other"),
    ],
)
def test_question_cues_say_what_kind_of_answer_is_asked_for(question: str, expects: str) -> None:
    assert question_cues(question).expects == expects


@pytest.mark.unit
@pytest.mark.parametrize(
    ("question", "sentence", "span"),
    [
        (QUESTION, "Error E07 means speed sensor signal lost.", "speed sensor signal lost"),
        ("How much does the TW-900 Carbon Road weigh?", "A complete size 54 weighs 7.6 kg without pedals.", "7.6 kg"),
        (
            "How many days did online customers have to return a bike in 2020?",
            "Bikes bought from the online shop can be returned within 14 days of delivery.",
            "14 days",
        ),
        (
            "How big a gap should there be below the crotch?",
            "You should have 2 to 5 cm of clearance between your body and the top tube.",
            "2 to 5 cm",
        ),
        ("In 2023, how long was the warranty?", "From 1 March 2023, the warranty is extended to 10 years.", "10 years"),
        ("When did the Normans conquer England?", "The Normans conquered England in 1066 under William.", "1066"),
        ("Who wrote Hamlet?", "The play Hamlet was written by William Shakespeare around 1600.", "William Shakespeare"),
        (
            "In which town is every Tidewater bike built?",
            "Every Tidewater bike has been built at our factory in Kestrel Harbour.",
            "Kestrel Harbour",
        ),
    ],
)
def test_the_answer_span_is_what_the_question_does_not_already_say(question: str, sentence: str, span: str) -> None:
    assert best_span(question, sentence) == span


@pytest.mark.unit
@pytest.mark.parametrize(
    ("answer", "supported", "why"),
    [
        ("Error E07 means speed sensor signal lost [1].", True, "new words"),
        ("E07 means a malfunctioning motor controller [1].", False, "new words"),  # the showcase misreading
        ("The display waits 3 seconds before showing E07 [1].", False, "number 3"),
        ("E07 is shown on the TW-900 [1].", False, "900 not in the cited text"),
        ("E07 means speed sensor signal lost.", True, "new words"),  # uncited, attributed to the passage that says it
        ("It means the error code E07 [1].", False, "says nothing the question does not"),
    ],
)
def test_the_attribution_check_can_fail(answer: str, supported: bool, why: str) -> None:
    [verdict] = check_claims(answer, QUESTION, E07, semantic_threshold=None)
    assert verdict.supported is supported and why in verdict.reason


@pytest.mark.unit
def test_per_citation_verdicts_and_the_supported_share() -> None:
    evidence = [
        *E07,
        {
            "ref": 2,
            "chunk_id": "e12",
            "text": "Error E12 means battery overtemperature.",
            "score": 0.5,
            "metadata": {"title": "E-bike display error E12"},
        },
    ]
    answer = {
        "text": "Error E07 means speed sensor signal lost [1]. E07 also means the battery is overheating [2].",
        "citations": [
            {"ref": 1, "chunk_id": "e07", "method": "model"},
            {"ref": 2, "chunk_id": "e12", "method": "model"},
        ],
        "refused": False,
    }
    checked = check_answer(answer, QUESTION, evidence)  # type: ignore[arg-type]
    assert [(c["ref"], c["verdict"]) for c in checked["citations"]] == [(1, "supported"), (2, "unsupported")]
    assert checked["supported"] == 0.5 and checked["unsupported"] == ["E07 also means the battery is overheating."]
    assert "new words" in checked["citations"][1]["reason"]


@pytest.mark.integration
def test_the_scorer_puts_the_answer_sentence_first(demo_env: Providers) -> None:
    hits = demo_env.index.search_sparse(QUESTION, 5)
    evidence = [
        {"ref": i + 1, "chunk_id": h["chunk_id"], "text": h["text"], "score": h["score"], "metadata": h["metadata"]}
        for i, h in enumerate(hits)
    ]
    best = SentenceScorer(demo_env).score(QUESTION, evidence)[0]
    assert best.sentence == "Error E07 means speed sensor signal lost."
    weigh = "How much does the TW-900 Carbon Road weigh?"
    hits = demo_env.index.search_sparse(weigh, 5)
    evidence = [
        {"ref": i + 1, "chunk_id": h["chunk_id"], "text": h["text"], "score": h["score"], "metadata": h["metadata"]}
        for i, h in enumerate(hits)
    ]
    assert "7.6 kg" in SentenceScorer(demo_env).score(weigh, evidence)[0].sentence  # a mass, not "24 gears"
