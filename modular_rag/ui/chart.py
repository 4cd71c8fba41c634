"""The Evaluate page's quality-vs-cost chart, drawn as SVG on the server (as the graph is): one labelled dot per
config, cost across, quality up (0 to 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = ["quality_cost_svg", "nice_ceiling"]

_W, _H = 560, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 110, 16, 44


def nice_ceiling(value: float) -> float:
    """The axis end for values up to ``value``: the next of 1, 2, 2.5 or 5 times a power of ten at or above it
    (1 for nothing above zero)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= value)


def _tick(value: float) -> str:
    return f"{value:g}" if value < 1000 else f"{value:,.0f}"


def quality_cost_svg(points: Sequence[tuple[str, float, float]], *, x_label: str, y_label: str) -> str:
    """A scatter of ``(label, cost, quality)`` points as an ``<svg class="chart">`` element: each dot a ``<g
    class="dot" data-config=label>`` holding its circle, label and a title with both figures; quality from 0 to 1,
    cost from 0 to a round number above the largest."""
    width, height = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    x_end = nice_ceiling(max((p[1] for p in points), default=0.0) * 1.05)

    def x(v: float) -> float:
        return _LEFT + width * min(max(v, 0.0), x_end) / x_end

    def y(v: float) -> float:
        return _TOP + height * (1.0 - min(max(v, 0.0), 1.0))

    parts = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" '
        f'role="img" aria-label="{escape(y_label)} against {escape(x_label)}">'
    ]
    for i in range(5):  # grid and ticks: quarters of each axis
        gy, gx = y(i / 4), x(x_end * i / 4)
        parts.append(f'<line class="grid" x1="{_LEFT}" y1="{gy:.1f}" x2="{_LEFT + width}" y2="{gy:.1f}"/>')
        parts.append(f'<text class="tick" x="{_LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end">{i / 4:g}</text>')
        parts.append(f'<line class="grid" x1="{gx:.1f}" y1="{_TOP}" x2="{gx:.1f}" y2="{_TOP + height}"/>')
        parts.append(
            f'<text class="tick" x="{gx:.1f}" y="{_TOP + height + 16}" text-anchor="middle">'
            f"{_tick(x_end * i / 4)}</text>"
        )
    parts.append(
        f'<text class="axis" x="{_LEFT + width / 2:.1f}" y="{_H - 6}" text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text class="axis" x="14" y="{_TOP + height / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + height / 2:.1f})">{escape(y_label)}</text>'
    )
    placed: list[tuple[float, float]] = []
    for label, cost, quality in points:
        cx, cy = x(cost), y(quality)
        ly = cy + 4 - 14 * sum(1 for px, py in placed if abs(px - cx) < 60 and abs(py - cy) < 14)
        placed.append((cx, cy))
        parts.append(
            f'<g class="dot" data-config="{escape(label)}"><title>{escape(label)}: {escape(y_label)} {quality:.3f}, '
            f"{escape(x_label)} {cost:.2f}</title>"
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5"/>'
            f'<text x="{cx + 8:.1f}" y="{ly:.1f}">{escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
