"""Evidence selection and attribution, read without a model: which sentences of the evidence answer a question
(:mod:`.scoring`), what the answer is inside one (:mod:`.spans`), and whether a written answer is supported by what
it cites (:mod:`.claims`, with its reading of clauses in :mod:`.relations`). What a question asks for is in
:mod:`.cues`. The post-retrieval and generation operators, the extractive answerer and the evaluation share them.
"""

from __future__ import annotations

from modular_rag.attribution.claims import ClaimVerdict, check_claims
from modular_rag.attribution.cues import Expect, QuestionCues, named_words, question_cues
from modular_rag.attribution.scoring import ScoredSentence, SentenceScorer, SentenceWeights, lead_of, packed_text
from modular_rag.attribution.spans import answer_clause, best_span
from modular_rag.sentences import evidence_sentences

__all__ = [
    "ClaimVerdict",
    "Expect",
    "QuestionCues",
    "ScoredSentence",
    "SentenceScorer",
    "SentenceWeights",
    "answer_clause",
    "best_span",
    "check_claims",
    "evidence_sentences",
    "lead_of",
    "named_words",
    "packed_text",
    "question_cues",
]
