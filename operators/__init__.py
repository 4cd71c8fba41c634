"""The bricks: operators of the Modular RAG taxonomy, one file per module.

Each file registers its operators when it is imported. The registry imports a file when a config names one of its
operators (:data:`PROVIDES`), and every file when a listing needs them all (:data:`PLUGIN_MODULES`, through the
``modular_rag.plugins`` entry point), so a worker running one flow does not import the catalogue. Orchestration is
split into routing, judging and fusion; the multi-round hops (how the next round searches) are in ``hops``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PROVIDES: dict[str, tuple[str, ...]] = {
    "fusion": ("llm_fusion", "pairs", "replug", "rrf", "sentences", "weighted"),
    "generation": ("abstain", "cited_answer", "draft_sentence", "verify"),
    "hops": ("answer", "evidence", "links", "query", "thought"),
    "indexing": ("document", "docx", "fixed", "html", "jsonl", "markdown", "pdf", "recursive", "sentence_window",
                 "text"),
    "judging": ("budget", "llm_judge", "no_progress", "prune", "reflection", "self_verify", "token_confidence"),
    "post_retrieval": ("budget", "compress_budget", "cross_encoder", "dedup", "embedding", "evidence_first",
                       "extractive", "llm_critique", "llm_pointwise", "lost_in_the_middle", "mmr"),
    "pre_retrieval": ("condense", "decompose", "filter_extract", "hyde", "multi_query", "rewrite", "step_back"),
    "questions": ("answer_in_passage", "bridge", "dedup", "fact_question", "inverse_cloze", "not_verbatim"),
    "questions_llm": ("closed_book", "llm"),
    "retrieval": ("bm25", "dense", "given", "hybrid", "link_hop"),
    "routing": ("embedding", "hybrid", "keyword", "learned", "llm"),
}  # fmt: skip
"""Each file -> the operator names it registers (checked against the registry by tests/test_registry.py)."""

PLUGIN_MODULES: tuple[str, ...] = tuple(PROVIDES)
"""The files the registry imports to list every operator."""

__all__ = ["PLUGIN_MODULES", "PROVIDES", *PLUGIN_MODULES]


def __getattr__(name: str) -> ModuleType:
    """``operators.<file>`` imports the file on first use."""
    if name in PROVIDES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
