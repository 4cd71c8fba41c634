"""Test-set operators keep their contracts on the demo corpus: a maker returns questions whose gold passages exist
and whose evidence spans point inside them, a check returns one verdict per question, neither mutates its input,
and an unknown name lists the valid ones. The checks drop what they name (an answer not in its passage, a copied
question, a duplicate)."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

from modular_rag.config import ProvidersConfig
from modular_rag.errors import RegistryError
from modular_rag.providers import Providers
from modular_rag.questions import Passage, PassageSet, Question, Span, Verdict, sentence_spans
from modular_rag.registry import OperatorInfo, Port, catalogue, get_operator
from operators.questions import VerbatimParams
from tests.conftest import DEMO, ScriptedChat

# operator name -> params for the contract run
CASES: dict[str, dict[str, Any]] = {
    "inverse_cloze": {"drop": 0.3},
    "fact_question": {"form": "wh"},
    "bridge": {"anchor": "any"},  # the demo's manuals link by codes and names, not by whole titles
    "manual_question": {},
    "llm": {"kinds": ["single", "multi", "comparison", "unanswerable"]},
    "answer_in_passage": {},
    "not_verbatim": {},
    "dedup": {},
    "closed_book": {},
}


def _reply(prompt: str) -> str:
    """A scripted model: a question with an answer copied from the first passage of the prompt (or a closed-book
    answer that knows nothing)."""
    if prompt.startswith("Answer in a few words"):
        return "I do not know."
    body = prompt.split("\n", 2)[2] if prompt.startswith("Passage") else prompt
    words = [w.strip(".,") for w in body.split()[:40] if w[:1].isupper() and len(w) > 3]
    return f"Question: What about {' '.join(body.split()[3:8])}?\nAnswer: {words[-1] if words else 'none'}"


@pytest.fixture(scope="module")
def passages(tmp_path_factory: pytest.TempPathFactory) -> PassageSet:
    """The demo's passages and a manual page that defines options (what ``manual_question`` reads)."""
    from modular_rag.eval.testset.corpus import read_passages

    page = tmp_path_factory.mktemp("manual") / "tidy-up.md"
    page.write_text(
        "## OPTIONS\n\n--prune=<date>: Prune loose files older than date (default is 2 weeks ago).\n\n"
        "-q, --quiet: Suppress all progress reports.\n\ntidy.autoLimit: Run tidy-up when more than this many "
        "loose files exist. The default value is 6700.\n",
        encoding="utf-8",
    )
    found, _, _ = read_passages([DEMO, page])
    return found


@pytest.fixture(scope="module")
def env() -> Providers:
    return Providers(ProvidersConfig(llm=ScriptedChat.of(_reply)))


def _testset_operators() -> list[OperatorInfo]:
    return [i for i in catalogue() if i.port in (Port.QUESTION, Port.CHECK)]


@pytest.mark.unit
def test_every_testset_operator_has_a_contract_case() -> None:
    names = {i.name for i in _testset_operators()}
    assert {"inverse_cloze", "fact_question", "bridge", "llm", "answer_in_passage", "closed_book"} <= names
    assert not names - set(CASES), f"add contract cases for: {names - set(CASES)}"


@pytest.mark.unit
@pytest.mark.parametrize("info", [i for i in _testset_operators() if i.port is Port.QUESTION], ids=lambda i: i.name)
def test_maker_keeps_its_contract(info: OperatorInfo, passages: PassageSet, env: Providers) -> None:
    maker = info.factory(info.params.model_validate(CASES[info.name]), env)
    before = copy.deepcopy(passages.passages)
    questions = maker(passages, 6, random.Random(0))
    assert passages.passages == before, f"{info.name} changed the passages"
    assert 0 < len(questions) <= 6, f"{info.name} made {len(questions)} questions"
    for q in questions:
        assert isinstance(q, Question) and q.text.strip()
        assert all(g in passages.position for g in q.gold)
        for span in q.evidence:
            assert span.doc in q.gold and 0 <= span.start < span.end <= len(passages[passages.position[span.doc]].text)
    assert questions == maker(passages, 6, random.Random(0)), "the same seed must make the same questions"


@pytest.mark.unit
@pytest.mark.parametrize("info", [i for i in _testset_operators() if i.port is Port.CHECK], ids=lambda i: i.name)
def test_check_keeps_its_contract(info: OperatorInfo, passages: PassageSet, env: Providers) -> None:
    maker = get_operator(Port.QUESTION, "fact_question")
    questions = maker.factory(maker.params(), env)(passages, 5, random.Random(1))
    check = info.factory(info.params.model_validate(CASES[info.name]), env)
    before = copy.deepcopy(questions)
    verdicts = check(questions, passages)
    assert questions == before, f"{info.name} mutated the questions"
    assert len(verdicts) == len(questions) and all(isinstance(v, Verdict) for v in verdicts)


@pytest.mark.unit
@pytest.mark.parametrize("port", [Port.QUESTION, Port.CHECK])
def test_unknown_name_lists_the_valid_ones(port: Port) -> None:
    with pytest.raises(RegistryError, match="valid names: none, .*answer_in_passage|valid names: none, .*bridge"):
        get_operator(port, "nonesuch")


def _one(text: str = "The Loopcell plant opened in 2019 in Ghent.") -> PassageSet:
    return PassageSet([Passage("p1", "Loopcell", text)])


@pytest.mark.unit
def test_a_question_whose_answer_is_not_in_its_passage_is_dropped() -> None:
    check = get_operator(Port.CHECK, "answer_in_passage")
    passages = _one()
    good = Question("When did the Loopcell plant open?", "single", ("p1",), "2019", "date", (Span("p1", 29, 33),))
    invented = Question("When did the Loopcell plant open?", "single", ("p1",), "1987", "date")
    for method in ("span", "attribution"):
        verdicts = check.factory(check.params(method=method), Providers())([good, invented], passages)
        assert [v.keep for v in verdicts] == [True, False], method
        assert verdicts[1].reason == "answer not in the cited passage"


@pytest.mark.unit
def test_not_verbatim_drops_a_copied_question_unless_its_kind_may_copy() -> None:
    check = get_operator(Port.CHECK, "not_verbatim")
    passages = _one("The Loopcell plant in Ghent opened in 2019 and recovers lithium, cobalt and nickel from cells.")
    copied = Question("the Loopcell plant in Ghent opened in 2019 and recovers lithium", "inverse_cloze", ("p1",))
    reworded = Question("Loopcell plant Ghent recovers lithium", "inverse_cloze", ("p1",))
    assert [v.keep for v in check.factory(check.params(), Providers())([copied, reworded], passages)] == [False, True]
    allowed = check.factory(check.params(allow=["inverse_cloze"]), Providers())
    assert allowed([copied], passages)[0].keep


@pytest.mark.unit
def test_dedup_drops_near_duplicates() -> None:
    check = get_operator(Port.CHECK, "dedup")
    passages = _one()
    a = Question("When did the Loopcell plant open in Ghent?", "wh", ("p1",), "2019")
    b = Question("When did the Loopcell plant in Ghent open?", "wh", ("p1",), "2019")
    c = Question("Where is the Loopcell plant?", "wh", ("p1",), "Ghent")
    assert [v.keep for v in check.factory(check.params(), Providers())([a, b, c], passages)] == [True, False, True]


@pytest.mark.unit
def test_typed_spans_and_the_reworded_question() -> None:
    from operators.questions import surface, typed_spans

    sentence = "Tidewater Cycles was founded by Marta Lind in March 1998 with 12 employees."
    found = {(kind, sentence[s:e]) for kind, s, e in typed_spans(sentence, ["number", "date", "name"])}
    assert found == {("name", "Marta Lind"), ("date", "March 1998"), ("number", "12 employees")}
    at = sentence.index("March 1998")
    asked = surface(sentence, random.Random(0), answer=(at, at + 10), drop=0.0, max_words=30)
    assert "1998" not in asked and "Marta Lind" in asked
    blank = surface(sentence, random.Random(0), answer=(at, at + 10), blank=True, drop=0.0, max_words=30)
    assert "in ___ with" in blank


@pytest.mark.unit
def test_rare_focus_leaves_out_the_rarest_words() -> None:
    from operators.questions import surface

    rarity = {"loopcell": 1, "ghent": 2, "plant": 50, "opened": 40, "recovers": 30}
    sentence = "The Loopcell plant in Ghent opened and recovers"
    assert surface(sentence, random.Random(0), drop=0.4, rarity=rarity) == "The plant in opened and recovers"


@pytest.mark.unit
def test_swap_replaces_kept_content_words() -> None:
    from operators.questions import surface

    sentence = "The Loopcell plant opened"
    swapped = surface(sentence, random.Random(0), drop=0.0, swap=1.0, synonym=lambda w: f"{w.lower()}-like")
    assert swapped == "The loopcell-like plant-like opened-like"


@pytest.mark.integration
def test_a_swapped_word_is_a_neighbour_by_the_embedder(passages: PassageSet) -> None:
    from operators.questions import _synonyms

    maker = get_operator(Port.QUESTION, "inverse_cloze")
    nearest = _synonyms(passages, maker.params(swap=0.5, vocabulary=300), Providers())
    assert nearest is not None
    other = nearest("battery")  # a real neighbour from the demo corpus, by the bundled embedder: not the same stem
    assert other and other != "battery" and not other.startswith("batter")


@pytest.mark.unit
def test_sentence_spans_are_offsets_into_the_text() -> None:
    text = "First one here. Second: 2.5 km long!\n\nA new paragraph"
    assert [text[s:e] for s, e in sentence_spans(text)] == [
        "First one here.",
        "Second: 2.5 km long!",
        "A new paragraph",
    ]


@pytest.mark.unit
def test_bridge_questions_do_not_name_the_second_passage(tmp_path: Path) -> None:
    docs = [
        Passage(
            "film",
            "Kiss and Tell",
            "Kiss and Tell is a 1945 comedy film starring Shirley Temple as Corliss "
            "Archer. It was directed by Richard Wallace.",
        ),
        Passage(
            "actress",
            "Shirley Temple",
            "Shirley Temple was an American actress. She served as Chief of "
            "Protocol of the United States from 1976 to 1977.",
        ),
    ]
    bridge = get_operator(Port.QUESTION, "bridge")
    made = bridge.factory(bridge.params(drop=0.0), Providers())(PassageSet(docs), 4, random.Random(0))
    assert made, "the film passage names the actress: a bridge question was expected"
    for q in made:
        assert q.gold == ("film", "actress") and "shirley" not in q.text.lower() and "temple" not in q.text.lower()
        assert q.answer and q.answer in docs[1].text


def _linked() -> PassageSet:
    """Two passages linked by a title (an actress named in a film's passage) and two linked only by an acronym the
    first sentence of a paper defines (CREB), as in abstracts titled by a sentence."""
    return PassageSet(
        [
            Passage(
                "film",
                "Kiss and Tell",
                "Kiss and Tell is a 1945 comedy film starring Shirley Temple as Corliss "
                "Archer. It was directed by Richard Wallace.",
            ),
            Passage(
                "actress",
                "Shirley Temple",
                "Shirley Temple was an American actress. She served as Chief of "
                "Protocol of the United States from 1976 to 1977.",
            ),
            Passage(
                "paper",
                "Phosphorylation of a transcription factor in the liver",
                "CREB is a transcription factor "
                "of the liver. It was described by Marc Montminy in 1987 at the Salk Institute.",
            ),
            Passage(
                "other",
                "Fasting hormones",
                "Glucagon acts through CREB during fasting. The effect was measured in 40 mice in 2004.",
            ),
        ]
    )


@pytest.mark.unit
def test_bridge_questions_cross_title_links_unless_told_any_anchor() -> None:
    from operators.questions import linked_share

    passages, bridge = _linked(), get_operator(Port.QUESTION, "bridge")
    by_title = bridge.factory(bridge.params(drop=0.0), Providers())(passages, 4, random.Random(0))
    assert [q.gold for q in by_title] == [("film", "actress")]
    any_anchor = bridge.factory(bridge.params(drop=0.0, anchor="any"), Providers())(passages, 4, random.Random(0))
    assert {q.gold for q in any_anchor} == {("film", "actress"), ("other", "paper")}
    assert linked_share(passages) == 0.25 and linked_share(passages, "any") == 0.5


@pytest.mark.unit
def test_not_verbatim_lets_a_held_out_sentence_be_copied_but_not_a_copy_elsewhere() -> None:
    check = get_operator(Port.CHECK, "not_verbatim").factory(VerbatimParams(), Providers())
    sentence = "The Loopcell plant in Ghent opened in 2019 and recovers lithium from cells"
    passages = PassageSet(
        [
            Passage("p1", "Loopcell", f"Loopcell recycles batteries. {sentence}."),
            Passage("p2", "Other", "Ghent has a port."),
        ]
    )
    held = Question(sentence, "inverse_cloze", ("p1",), meta={"held_out": True})
    assert [v.keep for v in check([held, Question(sentence, "inverse_cloze", ("p1",))], passages)] == [True, False]
    copied = PassageSet([*passages.passages, Passage("p3", "Copy", f"As reported: {sentence}.")])
    assert not check([held], copied)[0].keep
