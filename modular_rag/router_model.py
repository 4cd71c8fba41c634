"""The learned router's model: a classifier of what a question needs and each route's measured quality per kind
(:class:`RouterModel`), its features (:func:`lexical_features`, and the evidence of :mod:`modular_rag.evidence`) and
its saved form. ``modular-rag train-router`` (:func:`modular_rag.eval.router.train_router`) fits it; the ``learned``
router operator (:mod:`operators.routing`) routes with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from modular_rag.text import normalize_question

__all__ = [
    "FEATURE_BLOCKS",
    "LEXICAL_NAMES",
    "READS_VERSIONS",
    "ROUTER_FORMAT",
    "ROUTER_VERSION",
    "RouterModel",
    "evidence_names",
    "lexical_features",
    "softmax",
]


ROUTER_FORMAT = "modular-rag-router"
ROUTER_VERSION = 4
READS_VERSIONS = (3, 4)
"""Versions :meth:`RouterModel.load` reads: 3 (question features only, before evidence features) and 4."""
FEATURE_BLOCKS = ("question", "wording", "evidence")
"""What a router's features may read: the question (its normalised embedding and lexical features), its wording alone
(the lexical features, no embedding; implied by ``question``) and the evidence
(:func:`modular_rag.evidence.evidence_features` of the shared first retrieval)."""

_QUESTION_WORDS = (
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "is",
    "are",
    "was",
    "were",
    "do",
    "does",
    "did",
    "can",
    "in",
    "the",
)
_COMPARISON = re.compile(
    r"\b(both|either|neither|or|same|than|compared|difference|older|younger|first|earlier|"
    r"later)\b"
)


def lexical_features(query: str) -> list[float]:
    """Cheap features of what a question asks, read from its normalised form (:func:`normalize_question`), so letter
    case, quotes and punctuation, which say more about where a question was written than what it needs, carry no
    signal: its length in words, whether it has a digit, comparison words, and its first word."""
    text = normalize_question(query)
    words = text.split()
    first = words[0] if words else ""
    return [
        len(words) / 20.0,
        float(any(ch.isdigit() for ch in text)),
        float(bool(_COMPARISON.search(text))),
        *[float(first == w) for w in _QUESTION_WORDS],
    ]


LEXICAL_NAMES = ["words/20", "digits", "comparison", *[f"first={w}" for w in _QUESTION_WORDS]]


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``n x c`` scores."""
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@dataclass
class RouterModel:
    """A learned router in the manner of Adaptive-RAG: a classifier of what a question needs, and what each route
    achieves for each kind of question.

    ``classes`` are kinds of questions (by default by how many relevant passages a training question has: one, or
    two and more; see :func:`modular_rag.eval.router.train_router`). A softmax regression over the embedding of the
    normalised question and :func:`lexical_features` gives ``P(class | question)``; ``quality[k, c]`` is route k's
    measured quality on training questions of class c; a route's expected quality is ``sum_c P(c) quality[k, c]``,
    and the router picks ``argmax_k expected_k - cost_weight * cost_k / max cost``: a costlier route only where it
    is expected to buy enough. With a ``budget`` (the cost ceiling it was trained at), the learned router operator
    holds its mean cost over the questions it serves to that share of the costliest route's
    (:class:`~modular_rag.route_budget.RouteBudget`), raising the cost weight where the traffic needs more hops than
    the training questions did.

    Saved as versioned JSON by :meth:`save` (``modular-rag train-router`` writes it); :meth:`load` refuses another
    format or version.
    """

    routes: list[str]
    classes: list[str]
    weights: np.ndarray
    bias: np.ndarray
    quality: np.ndarray
    lexical_mean: np.ndarray
    lexical_scale: np.ndarray
    costs: dict[str, float]
    cost_weight: float = 0.0
    embeddings: str = ""
    trained: dict[str, Any] = field(default_factory=dict)
    blocks: tuple[str, ...] = ("question",)
    evidence_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    evidence_scale: np.ndarray = field(default_factory=lambda: np.ones(0))
    budget: float | None = None

    @property
    def reads_evidence(self) -> bool:
        """Whether the model decides from the shared first retrieval's candidates too."""
        return "evidence" in self.blocks

    def features(
        self, vector: np.ndarray | None, query: str, hits: Sequence[Any] | None = None, links: Any = None
    ) -> np.ndarray:
        """The feature row of a query: with the question block, the embedding of its normalised form (``vector``)
        and its standardised lexical features (the wording block: those alone); with the evidence block, the
        standardised
        :func:`~modular_rag.evidence.evidence_features` of ``hits`` (``links``: the index's link table).

        Raises:
            ValueError: If a block the model reads is not given (no vector, or no hits).
        """
        parts = []
        if "question" in self.blocks:
            if vector is None:
                raise ValueError("this router reads the question's embedding: pass its vector")
            parts.append(np.asarray(vector, dtype=np.float64))
        if "question" in self.blocks or "wording" in self.blocks:
            parts.append((np.asarray(lexical_features(query)) - self.lexical_mean) / self.lexical_scale)
        if "evidence" in self.blocks:
            if hits is None:
                raise ValueError("this router reads the first retrieval's evidence: pass its candidates")
            from modular_rag.evidence import evidence_features

            row = np.asarray(evidence_features(query, hits, links))
            parts.append((row - self.evidence_mean) / self.evidence_scale)
        return np.concatenate(parts)

    def class_probabilities(self, rows: np.ndarray) -> np.ndarray:
        """``P(class | question)`` for feature rows (``n x d`` -> ``n x c``)."""
        return softmax(rows @ self.weights.T + self.bias)

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """Each route's expected quality for feature rows (``n x d`` -> ``n x k``)."""
        return self.class_probabilities(rows) @ self.quality.T

    def decide(self, expected: np.ndarray) -> np.ndarray:
        """The route index per row of expected qualities: the best after its cost penalty."""
        top = max(self.costs.values()) or 1.0
        penalty = np.array([self.costs.get(r, 0.0) / top for r in self.routes])
        return np.argmax(expected - self.cost_weight * penalty, axis=1)

    def route(
        self,
        encoder: Any,
        queries: Sequence[str],
        hits: Sequence[Sequence[Any]] | None = None,
        links: Any = None,
    ) -> list[str]:
        """The route chosen for each query at the trained cost weight, without the budget (``encoder`` embeds their
        normalised forms, as the flow's embeddings provider does; ``hits``: each query's first-retrieval
        candidates, for a model that reads evidence; ``links``: the index's link table)."""
        found = hits if hits is not None else [None] * len(queries)
        rows = np.vstack(
            [
                self.features(
                    encoder.encode_query(normalize_question(q)) if "question" in self.blocks else None, q, h, links
                )
                for q, h in zip(queries, found, strict=True)
            ]
        )
        return [self.routes[i] for i in self.decide(self.probabilities(rows)).tolist()]

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON (``router.json`` inside ``path`` when it is a folder)."""
        file = Path(path)
        if file.suffix != ".json":
            file.mkdir(parents=True, exist_ok=True)
            file = file / "router.json"
        data = {
            "format": ROUTER_FORMAT,
            "version": ROUTER_VERSION,
            "routes": self.routes,
            "classes": self.classes,
            "weights": self.weights.tolist(),
            "bias": self.bias.tolist(),
            "quality": self.quality.tolist(),
            "lexical": LEXICAL_NAMES,
            "lexical_mean": self.lexical_mean.tolist(),
            "lexical_scale": self.lexical_scale.tolist(),
            "costs": self.costs,
            "cost_weight": self.cost_weight,
            "embeddings": self.embeddings,
            "trained": self.trained,
            "features": list(self.blocks),
            "evidence": evidence_names() if self.reads_evidence else [],
            "evidence_mean": self.evidence_mean.tolist(),
            "evidence_scale": self.evidence_scale.tolist(),
            "budget": self.budget,
        }
        file.write_text(json.dumps(data, indent=1), encoding="utf-8")
        return file

    @classmethod
    def load(cls, path: str | Path) -> RouterModel:
        """Read a saved model (a ``router.json`` file or the folder holding it); a version 3 model (before evidence
        features) reads the question only.

        Raises:
            ConfigError: If the file is missing, not a router model, or of a version it cannot read.
        """
        from modular_rag.errors import ConfigError

        file = Path(path)
        file = file / "router.json" if file.is_dir() else file
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                "operators.route.params.model",
                f"cannot read a router model at {file}: {exc}; write one with modular-rag train-router",
            ) from None
        if data.get("format") != ROUTER_FORMAT or data.get("version") not in READS_VERSIONS:
            raise ConfigError(
                "operators.route.params.model",
                f"{file} is not a {ROUTER_FORMAT} model of version "
                f"{' or '.join(map(str, READS_VERSIONS))} (format {data.get('format')!r}, version "
                f"{data.get('version')!r}); train it again with modular-rag train-router",
            )
        blocks = tuple(data.get("features", ["question"]))
        if data.get("lexical") != LEXICAL_NAMES or ("evidence" in blocks and data.get("evidence") != evidence_names()):
            raise ConfigError(
                "operators.route.params.model",
                f"{file} was trained on other lexical or evidence features; train it again with this version",
            )
        return cls(
            list(data["routes"]),
            list(data["classes"]),
            np.asarray(data["weights"]),
            np.asarray(data["bias"]),
            np.asarray(data["quality"]),
            np.asarray(data["lexical_mean"]),
            np.asarray(data["lexical_scale"]),
            dict(data["costs"]),
            float(data["cost_weight"]),
            str(data.get("embeddings", "")),
            dict(data.get("trained", {})),
            blocks,
            np.asarray(data.get("evidence_mean", [])),
            np.asarray(data.get("evidence_scale", [])),
            None if data.get("budget") is None else float(data["budget"]),
        )


def evidence_names() -> list[str]:
    """The evidence features' names (:data:`modular_rag.evidence.EVIDENCE_NAMES`)."""
    from modular_rag.evidence import EVIDENCE_NAMES

    return list(EVIDENCE_NAMES)
