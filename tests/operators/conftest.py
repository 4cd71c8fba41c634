"""Fixtures for operator tests: a realistic state produced by real retrieval over the demo index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modular_rag.providers import Providers

E07 = "What does error code E07 mean on the e-bike display?"


@pytest.fixture(scope="session")
def base_state(demo_env: Providers) -> dict[str, Any]:
    """A state as it stands before generation: query, queries, candidates (real hybrid hits), evidence."""
    from operators.fusion import rrf

    dense = demo_env.index.search_dense(E07, 10)
    sparse = demo_env.index.search_sparse(E07, 10)
    candidates = rrf([dense, sparse], k=6, channel="hybrid")
    evidence = [
        {"ref": i + 1, "chunk_id": h["chunk_id"], "text": h["text"], "score": h["score"], "metadata": h["metadata"]}
        for i, h in enumerate(candidates[:3])
    ]
    answer = {"text": "E07 means the speed sensor signal was lost [1].", "citations": [
        {"ref": 1, "chunk_id": evidence[0]["chunk_id"], "method": "model"}], "refused": False}
    return {"query": E07, "queries": [E07], "candidates": candidates, "evidence": evidence, "answer": answer,
            "step": 1, "rounds": [], "branches": [], "verdicts": [], "trace": [], "ledger": []}


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sentence-transformers CrossEncoder folder built offline from the bundled MiniLM encoder with a fresh
    (untrained) scoring head: no trained cross-encoder weights can be obtained here, so this checks the wiring."""
    from sentence_transformers import CrossEncoder

    from modular_rag.providers import minilm_path

    folder = tmp_path_factory.mktemp("cross-encoder")
    CrossEncoder(str(minilm_path()), num_labels=1, device="cpu").save(str(folder))
    return folder
