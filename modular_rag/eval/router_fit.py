"""The router's fitting: L2-penalised softmax and logistic regressions (L-BFGS), and the choice of an operating
point on the grid of penalties and cost weights."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["fit_logistic", "fit_softmax", "choose_operating_point"]


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, float]:
    """Logistic regression with an L2 penalty on the weights (L-BFGS), on targets in [0, 1] (soft targets allowed):
    ``(weights d, bias)``."""
    w, b = fit_softmax(x, np.column_stack([1.0 - y, y]), l2)
    return w[1] - w[0], float(b[1] - b[0])


def fit_softmax(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, np.ndarray]:
    """Softmax (multinomial logistic) regression with an L2 penalty on the weights (L-BFGS).

    Args:
        x: Features, ``n x d``.
        y: Class targets, ``n x c``, each row a distribution (one-hot or soft).
        l2: The penalty.

    Returns:
        ``(weights c x d, bias c)``.
    """
    from scipy.optimize import minimize

    from modular_rag.router_model import softmax

    n, d = x.shape
    c = y.shape[1]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[: c * d].reshape(c, d), theta[c * d :]
        p = softmax(x @ w.T + b)
        value = -float(np.sum(y * np.log(p + 1e-12))) / n + l2 * float(np.sum(w * w))
        grad_w = (p - y).T @ x / n + 2 * l2 * w
        return value, np.concatenate([grad_w.ravel(), (p - y).sum(axis=0) / n])

    theta = minimize(loss, np.zeros(c * (d + 1)), jac=True, method="L-BFGS-B", options={"maxiter": 500}).x
    return theta[: c * d].reshape(c, d), theta[c * d :]


def choose_operating_point(
    grid: Sequence[Mapping[str, Any]],
    costs: Mapping[str, float],
    best_single: float,
    *,
    max_cost_ratio: float | None,
    max_quality_loss: float | None,
) -> Mapping[str, Any]:
    """The operating point (a row of ``grid``: quality and cost of one l2 / cost weight) by the rule asked for: the
    cheapest within ``max_quality_loss`` of the best single flow, else the best quality whose cost is at most
    ``max_cost_ratio`` of the costliest flow's (the best overall when none fits)."""
    if max_quality_loss is not None:
        within = [g for g in grid if g["quality"] >= best_single - max_quality_loss]
        if within:
            return min(within, key=lambda g: (g["cost"], -g["quality"]))
    else:
        ceiling = (max_cost_ratio if max_cost_ratio is not None else 1.0) * max(costs.values())
        within = [g for g in grid if g["cost"] <= ceiling + 1e-9]
        if within:
            return max(within, key=lambda g: (g["quality"], -g["cost"]))
    return max(grid, key=lambda g: (g["quality"], -g["cost"]))
