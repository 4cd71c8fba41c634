"""Evaluation: BEIR datasets, retrieval and answer metrics, runners, benchmark reports."""

from modular_rag.eval.datasets import BeirDataset, Query, load_beir
from modular_rag.eval.metrics import best_answer_scores, exact_match, retrieval_metrics, token_f1

__all__ = ["BeirDataset", "Query", "load_beir", "retrieval_metrics", "exact_match", "token_f1", "best_answer_scores"]
