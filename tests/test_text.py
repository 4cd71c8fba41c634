"""The kit's sentence splitter: what it does with abbreviations, pinned.

``split_sentences`` splits at terminal punctuation followed by whitespace and a capital or a digit. It stays a regex
after pysbd, syntok and sentencex were measured as the kit's splitter (``benchmarks/splitters.py``,
``benchmarks/results/splitters-tune.txt``): each splits these cases right, and none answered more tune questions of
SQuAD or NQ-open (on NQ-open each answered two fewer). So a period after an abbreviation before a capital or a
digit is a sentence end here; these cases say so, and would fail if the splitter changed under the stored sentence
vectors (which are looked up by their text).
"""

from __future__ import annotations

import pytest

from modular_rag.questions import sentence_spans
from modular_rag.text import split_sentences

CASES = [
    # before a capital or a digit: split, an abbreviation's period included
    ("Dr. Smith went home. He slept.", ["Dr.", "Smith went home.", "He slept."]),
    ("The U.S. Army was formed. 1775 was the year.", ["The U.S.", "Army was formed.", "1775 was the year."]),
    ("See Fig. 2 for details. The curve rises.", ["See Fig.", "2 for details.", "The curve rises."]),
    ("J. R. R. Tolkien wrote it.", ["J.", "R.", "R.", "Tolkien wrote it."]),
    # before a lower-case word, or with no space after it: no split
    ("Use a solvent, e.g. acetone. Then rinse.", ["Use a solvent, e.g. acetone.", "Then rinse."]),
    ("U.S. policy changed in 1990. It was debated.", ["U.S. policy changed in 1990.", "It was debated."]),
    ("The dose is 3.5 mg daily. Take it with food.", ["The dose is 3.5 mg daily.", "Take it with food."]),
    ("It costs $3.50. That is cheap!", ["It costs $3.50.", "That is cheap!"]),
    ("Panic! at the Disco formed in 2004.", ["Panic! at the Disco formed in 2004."]),
    # a closing quote or bracket after the period: no split (the punctuation must touch the space)
    ('He said "Stop." Then he left.', ['He said "Stop." Then he left.']),
    ("(See above.) The next part.", ["(See above.) The next part."]),
    # an opening quote or bracket before the capital: split
    ('It ended. "Why?" he asked.', ["It ended.", '"Why?" he asked.']),
]


@pytest.mark.unit
@pytest.mark.parametrize(("text", "sentences"), CASES)
def test_a_period_before_a_capital_or_a_digit_ends_a_sentence_abbreviations_included(
    text: str, sentences: list[str]
) -> None:
    assert split_sentences(text) == sentences
    # the test-set makers' offsets split at the same places
    assert [text[a:b] for a, b in sentence_spans(text)] == sentences


@pytest.mark.unit
def test_blank_lines_end_a_sentence_and_other_whitespace_is_squeezed() -> None:
    text = "A heading without a period\n\nThe first   sentence\nruns on. The second.\n \n"
    assert split_sentences(text) == ["A heading without a period", "The first sentence runs on.", "The second."]
    assert split_sentences(" \n\n ") == []
