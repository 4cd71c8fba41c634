"""The bricks: operators of the Modular RAG taxonomy, one file per module.

Importing this package registers every operator (the registry finds it through the ``modular_rag.plugins``
entry point). Orchestration is split into routing, judging and fusion; the
multi-round hops (how the next round searches) are in ``hops``.
"""

from operators import (  # noqa: F401  (imported to register)
    fusion,
    generation,
    hops,
    indexing,
    judging,
    post_retrieval,
    pre_retrieval,
    questions,
    questions_llm,
    retrieval,
    routing,
)

__all__ = ["fusion", "generation", "hops", "indexing", "judging", "post_retrieval", "pre_retrieval", "questions",
           "questions_llm", "retrieval", "routing"]
