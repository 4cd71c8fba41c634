"""A learned router's spending held to a budget over the questions it serves.

A router's cost weight is chosen on its training questions; on traffic with more questions of the costly kind it
spends more (trained where one question in six needs a hop, a router hops for every one of them on traffic where one
in two does). :class:`RouteBudget` holds the mean cost of its last decisions to a share of the costliest route's
instead: each question, it raises the cost weight (never below the trained one) just enough that the decisions it
would take with it on the last ``window`` questions' expected qualities cost at most that share, then decides the
question with it. The hops go to the questions expected to gain most from them, whatever the mix of the traffic.
And it caps what it spent: a costlier route is taken only while the mean cost of the decisions it actually took over
the window, this one included, stays within the budget (so the first questions, routed before it acts, and the
decisions at the margin do not push the spend over it).

It holds per process (each worker over the questions it answered), and needs ``warm`` questions before it acts: a
new process routes its first questions at the trained cost weight. A stream sorted by kind (every easy question,
then every hard one) makes it spend early and hold back late; traffic interleaves.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["RouteBudget", "WARM", "WINDOW"]

WINDOW = 200
"""How many of the last questions' expected qualities the budget is held over."""

WARM = 20
"""How many questions a process routes at the trained cost weight before the budget acts."""

_MAX_WEIGHT = 1e6  # a weight this large sends every question to its cheapest route


class RouteBudget:
    """Decides routes so that the mean cost over the last ``window`` questions is at most ``share`` of the costliest
    route's.

    Args:
        routes: The routes, in the order of the expected-quality rows.
        costs: Each route's cost (a missing one costs 0).
        share: The budget, a share of the costliest route's cost, in (0, 1].
        floor: The trained cost weight: the budget never weighs cost less.
        window: Questions held (:data:`WINDOW`).
        warm: Questions before the budget acts (:data:`WARM`).

    Raises:
        ValueError: If ``share`` is not in (0, 1] or ``window`` is below ``warm``.
    """

    def __init__(
        self,
        routes: Sequence[str],
        costs: Mapping[str, float],
        share: float,
        floor: float,
        *,
        window: int = WINDOW,
        warm: int = WARM,
    ) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"a router's budget is a share of its costliest route's cost in (0, 1] (got {share})")
        if window < max(warm, 1):
            raise ValueError(f"the budget's window ({window}) must hold at least its warm-up ({warm}) questions")
        cost = np.array([float(costs.get(r, 0.0)) for r in routes])
        top = float(cost.max()) or 1.0
        self.penalty = cost / top
        self.limit = share
        self.floor = floor
        self.warm = warm
        self.rows: deque[np.ndarray] = deque(maxlen=window)
        self.spent: deque[float] = deque(maxlen=window)  # the penalty of each decision taken
        self._lock = threading.Lock()

    def _spend(self, rows: np.ndarray, weight: float) -> float:
        """The mean cost (a share of the costliest route's) of the decisions at ``weight``."""
        return float(self.penalty[np.argmax(rows - weight * self.penalty, axis=1)].mean())

    def weight(self, rows: np.ndarray) -> float:
        """The smallest cost weight, at least the trained one, whose decisions on ``rows`` keep to the budget."""
        if self._spend(rows, self.floor) <= self.limit:
            return self.floor
        low, high = self.floor, max(self.floor, 1.0)
        while self._spend(rows, high) > self.limit and high < _MAX_WEIGHT:
            low, high = high, high * 4
        for _ in range(40):
            mid = (low + high) / 2
            low, high = (low, mid) if self._spend(rows, mid) <= self.limit else (mid, high)
        return high

    def decide(self, expected: np.ndarray) -> tuple[int, float]:
        """The route index for one question's expected qualities, and the cost weight it was decided at."""
        row = np.asarray(expected, dtype=np.float64)
        with self._lock:
            self.rows.append(row)
            acting = len(self.rows) >= self.warm
            weight = self.weight(np.vstack(self.rows)) if acting else self.floor
            value = row - weight * self.penalty
            if acting:  # only routes whose cost keeps the spend of the decisions taken within the budget
                kept = list(self.spent)[1:] if len(self.spent) == self.spent.maxlen else list(self.spent)
                over = (sum(kept) + self.penalty) / (len(kept) + 1) > self.limit + 1e-12
                value = np.where(over & (self.penalty > self.penalty.min()), -np.inf, value)
            chosen = int(np.argmax(value))
            self.spent.append(float(self.penalty[chosen]))
        return chosen, weight
