"""Text analysis shared by the sparse index, lexical routers and selection operators.

Case folding, accent stripping, word tokenisation, English stop words and Snowball stemming (PyStemmer, a C
extension), with a per-analyzer cache of stemmed words. Also sentence splitting and a token-count estimate.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

__all__ = [
    "Analyzer",
    "ENGLISH_STOPWORDS",
    "split_sentences",
    "estimate_tokens",
    "fold",
    "normalize_answer",
    "normalize_question",
    "exact_match",
    "token_f1",
    "distinctive_tokens",
    "NUMBER_WORDS",
    "instruction_like",
]

ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "don",
    ]
)
"""A compact English stop-word list (function words only; negations other than 'not'/'no' are kept out)."""

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


@lru_cache(maxsize=65536)
def _fold_word(word: str) -> str:
    if word.isascii():
        return word
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def fold(text: str) -> str:
    """Lower-case and strip accents (``Café`` -> ``cafe``)."""
    lowered = text.lower()
    return lowered if lowered.isascii() else "".join(_fold_word(w) for w in re.split(r"(\W+)", lowered))


class Analyzer:
    """Turns text into index terms: fold case and accents, split words, drop stop words, stem.

    Args:
        stemmer: ``"english"`` (Snowball via PyStemmer) or ``"none"``.
        stopwords: ``"english"`` or ``"none"``.

    Raises:
        MissingDependencyError: If stemming is asked for and PyStemmer is not installed.
    """

    def __init__(self, stemmer: str = "english", stopwords: str = "english") -> None:
        self.stemmer_name = stemmer
        self.stopwords_name = stopwords
        self._stop = ENGLISH_STOPWORDS if stopwords == "english" else frozenset()
        self._stem_cache: dict[str, str] = {}
        self._stemmer = None
        if stemmer == "english":
            try:
                import Stemmer
            except ImportError as exc:  # pragma: no cover - PyStemmer is a core dependency
                from modular_rag.errors import MissingDependencyError

                raise MissingDependencyError(
                    "stemming needs PyStemmer: pip install PyStemmer (or set sparse.stemmer: none)"
                ) from exc
            self._stemmer = Stemmer.Stemmer("english")

    def __repr__(self) -> str:
        return f"Analyzer(stemmer={self.stemmer_name!r}, stopwords={self.stopwords_name!r})"

    def __call__(self, text: str) -> list[str]:
        """The index terms of ``text``, in order (duplicates kept)."""
        words = [w for w in _WORD.findall(fold(text)) if w not in self._stop]
        if self._stemmer is None:
            return words
        cache = self._stem_cache
        missing = [w for w in set(words) if w not in cache]
        if missing:
            for word, stem in zip(missing, self._stemmer.stemWords(missing), strict=True):
                cache[word] = stem
        return [cache[w] for w in words]

    def many(self, texts: Iterable[str]) -> list[list[str]]:
        """Analyse several texts."""
        return [self(t) for t in texts]


def _split_block(block: str) -> list[str]:
    """The sentences of one paragraph whose whitespace is squeezed to single spaces (``benchmarks/splitters.py``
    puts a library's splitter here to compare it as the kit's)."""
    return _SENTENCE_END.split(block)


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences: at blank lines, and at terminal punctuation followed by whitespace and a capital
    or a digit (an opening quote or bracket between them allowed); whitespace squeezed, empty pieces dropped.

    A period that ends an abbreviation before a capital or a digit ends a sentence too ("Dr." | "Smith went home.",
    "See Fig." | "2 ..."); one before a lower-case word does not ("e.g. acetone", "3.5 mg"). pysbd, syntok and
    sentencex split those right but answered no more questions as the kit's splitter
    (``benchmarks/results/splitters-tune.txt``), so the regex stays; ``tests/test_text.py`` pins what it does.
    """
    parts: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        block = " ".join(block.split())
        if block:
            parts.extend(s.strip() for s in _split_block(block) if s.strip())
    return parts


def estimate_tokens(text: str) -> int:
    """Estimate the LLM tokens of ``text`` without a tokenizer: the larger of chars/4 and words*4/3.

    BPE tokenizers of current chat models average 3.5-4.5 characters per English token; the estimate errs high so
    token budgets hold.
    """
    if not text:
        return 0
    words = len(text.split())
    return max(math.ceil(len(text) / 4), math.ceil(words * 4 / 3))


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation and articles (a, an, the), squeeze whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_QUOTES = re.compile(r"[\"“”„«»`´]|(?<!\w)['‘’]|['‘’](?!\w)")
_NOT_IN_WORDS = re.compile(r"[^\w\s'’\-./%]|(?<![\w])[-./]|[-./](?![\w])")


def normalize_question(text: str) -> str:
    """A question's content without its writing style: Unicode NFKC, case folded, quotes and punctuation removed
    (hyphens, apostrophes, decimal points and slashes inside words kept: "e-bike", "3.1", "km/h"), whitespace
    squeezed. "What's the TW-900's weight?" and "what's the tw-900's weight" normalise alike.

    A router or any learned model should read this form: letter case and punctuation say where a question was
    written (NQ-open is lower case without a question mark, HotpotQA cased), not what it needs.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NOT_IN_WORDS.sub(" ", _QUOTES.sub(" ", folded)).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between normalised prediction and gold."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


_TOKEN = re.compile(r"[^\W_]+(?:[-./][^\W_]+)*")
_SENTENCE_START = re.compile(r"(^|[.!?]\s+)$")


def distinctive_tokens(text: str) -> frozenset[str]:
    """The tokens that make a text about one thing rather than another, lower-cased: anything with a digit (codes,
    part numbers, years, quantities) and capitalised words that do not start a sentence (names, models).

    Two questions whose embeddings are near-identical ("What does E07 mean?" / "What does E12 mean?") differ exactly
    here: the semantic answer cache requires these sets to be equal, and the attribution check requires an answer's
    to be in the passage it cites.
    """
    out: set[str] = set()
    for match in _TOKEN.finditer(text):
        word = match.group(0)
        if any(ch.isdigit() for ch in word) or (
            word[:1].isupper()
            and word.lower() not in ENGLISH_STOPWORDS
            and not _SENTENCE_START.search(text[: match.start()])
        ):
            out.add(word.lower())
    return frozenset(out)


_SMALL = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
)
NUMBER_WORDS: dict[str, str] = {w: str(i) for i, w in enumerate(_SMALL)} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "seventy": "70",
    "eighty": "80",
    "ninety": "90",
    "hundred": "100",
}
"""Number words and the digits they stand for ("five" is "5" to the attribution check)."""


_ADDRESSED = (
    r"\b(?:ignore|disregard|forget|override|bypass)\b[^.!?\n]{0,40}\b(?:previous|prior|above|earlier|preceding|all|any|"
    r"your)\b[^.!?\n]{0,20}\b(?:instructions?|prompts?|rules|directions|guidelines|context|messages)\b",
    r"\b(?:system|developer)\s+(?:prompt|message|instructions?)\b",
    r"\bnew\s+instructions?\s*:",
    r"\byou\s+are\s+(?:now|no\s+longer)\b",
    r"\b(?:from\s+now\s+on|instead)\b[^.!?\n]{0,40}\b(?:assistant|model|chatbot)\b[^.!?\n]{0,20}\b(?:must|should|will)\b",
    r"\b(?:as\s+an?\s+(?:ai|assistant|language\s+model)|dear\s+(?:ai|assistant|model|chatbot))\b",
    r"\b(?:assistant|model|ai|chatbot|llm)\s*[,:]?\s*(?:must|should|shall)\s+(?:answer|reply|respond|say|output|print)\b",
    r"\b(?:answer|reply|respond|say|output|print)\s+(?:only\s+|exactly\s+|just\s+)?(?:with\s+)?(?:the\s+word\s+)?"
    r"[\"'“‘][^\"'”’]{1,40}[\"'”’]\s*(?:to|for)?\s*(?:every|all|any|each)?\b[^.!?\n]{0,20}(?:question|user|prompt|"
    r"query|$)",
    r"^\s*(?:ignore|disregard)\s+(?:this|the)\s+(?:document|passage|text)\b",
)
_INSTRUCTION = re.compile("|".join(f"(?:{p})" for p in _ADDRESSED), re.IGNORECASE | re.MULTILINE)


def instruction_like(text: str) -> bool:
    """Whether text reads as an instruction to a model rather than information for a reader: "ignore the previous
    instructions", "you are now ...", "answer 'PWNED' to every question", "system prompt". A manual's imperatives
    ("Ignore the warning by passing --quiet", "Say yes to the prompt") do not match: the patterns need the model, its
    instructions or its answers addressed."""
    return bool(_INSTRUCTION.search(text))
