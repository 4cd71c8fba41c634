"""Fixtures for operator tests: a realistic state produced by real retrieval over the demo index."""

from __future__ import annotations

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
    answer = {
        "text": "E07 means the speed sensor signal was lost [1].",
        "citations": [{"ref": 1, "chunk_id": evidence[0]["chunk_id"], "method": "model"}],
        "refused": False,
    }
    branches = [
        {
            "branch": i,
            "query": E07,
            "weight": 1.0,
            "candidates": [h],
            "answer": {"text": f"E07 means the speed sensor signal was lost [{1}].", "citations": [], "refused": False},
        }
        for i, h in enumerate(candidates[:2])
    ]
    tree = [
        {
            "node_id": "n0",
            "parent": None,
            "depth": 0,
            "question": E07,
            "answer": "Speed sensor signal lost.",
            "chunk_ids": [candidates[0]["chunk_id"]],
            "evidence": candidates[:2],
            "refused": False,
        },
        {
            "node_id": "n1",
            "parent": "n0",
            "depth": 1,
            "question": "What should I check when E07 appears?",
            "answer": "The speed sensor magnet.",
            "chunk_ids": [candidates[0]["chunk_id"]],
            "evidence": candidates[:1],
            "refused": False,
        },
    ]
    rounds = [
        {"step": 1, "query": E07, "answer": "Speed sensor signal lost.", "chunk_ids": []},
        {"step": 2, "query": E07, "answer": "The speed sensor signal was lost.", "chunk_ids": []},
    ]
    draft = {
        "text": "E07 means the speed sensor lost its signal.",
        "tokens": [" E", "07", " means", " lost"],
        "logprobs": [-0.1, -0.2, -1.9, -0.3],
        "done": False,
    }
    return {
        "query": E07,
        "queries": [E07],
        "candidates": candidates,
        "evidence": evidence,
        "answer": answer,
        "draft": draft,
        "step": 2,
        "rounds": rounds,
        "branches": branches,
        "tree": tree,
        "verdicts": [],
        "trace": [],
        "ledger": [],
    }


@pytest.fixture(scope="session")
def router_file(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A learned-router model over the contract routes (exact, open): untrained weights, a cost per route."""
    import numpy as np

    from operators.routing import LEXICAL_NAMES, RouterModel

    d = 384 + len(LEXICAL_NAMES)
    model = RouterModel(
        ["exact", "open"],
        ["1 passage"],
        np.zeros((1, d)),
        np.zeros(1),
        np.array([[0.6], [0.5]]),
        np.zeros(len(LEXICAL_NAMES)),
        np.ones(len(LEXICAL_NAMES)),
        {"exact": 2.0, "open": 1.0},
    )
    return model.save(tmp_path_factory.mktemp("router"))
