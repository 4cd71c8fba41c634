"""A flow's graph drawn as SVG on the server, so the page needs no drawing library: nodes in layers by their longest
path from the start (loops drawn back up as dashed edges), conditional edges dashed, each node an element
``id="node-<name>"`` the page lights up as the node runs. The Mermaid text (``modular-rag draw``) is shown beside."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

__all__ = ["svg", "layers"]

_W, _H, _GAP_X, _GAP_Y = 150, 34, 24, 40


def layers(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Nodes in layers: each one below every node that reaches it without a loop (depth-first from the first
    node; edges closing a loop are ignored), in the order given within a layer."""
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        if a in out and b in out:
            out[a].append(b)
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}

    def visit(node: str) -> None:  # iterative depth-first search: 1 on the path, 2 done
        stack = [(node, iter(out[node]))]
        state[node] = 1
        while stack:
            current, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[current] = 2
                stack.pop()
            elif state.get(child) == 1:
                back.add((current, child))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(out[child])))

    for n in nodes:
        if n not in state:
            visit(n)
    depth = {n: 0 for n in nodes}
    for _ in nodes:  # longest path over the acyclic edges (at most len(nodes) rounds)
        changed = False
        for a, targets in out.items():
            for b in targets:
                if (a, b) not in back and depth[b] < depth[a] + 1:
                    depth[b], changed = depth[a] + 1, True
        if not changed:
            break
    rows: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n in nodes:
        rows[depth[n]].append(n)
    return rows


def svg(graph: Any) -> str:
    """A LangChain ``Graph`` (``compiled.get_graph()``) as an SVG element."""
    names = [str(n) for n in graph.nodes]
    edges = [(str(e.source), str(e.target), bool(e.conditional)) for e in graph.edges]
    rows = layers(names, [(a, b) for a, b, _ in edges])
    width = max((len(r) for r in rows), default=1) * (_W + _GAP_X) + _GAP_X
    height = len(rows) * (_H + _GAP_Y) + _GAP_Y
    at: dict[str, tuple[float, float]] = {}
    for line, row in enumerate(rows):
        left = (width - len(row) * (_W + _GAP_X) + _GAP_X) / 2
        for col, name in enumerate(row):
            at[name] = (left + col * (_W + _GAP_X), _GAP_Y / 2 + line * (_H + _GAP_Y))
    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="the flow\'s graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>',
    ]
    for a, b, conditional in edges:
        if a not in at or b not in at:
            continue
        (xa, ya), (xb, yb) = at[a], at[b]
        x1, y1, x2, y2 = xa + _W / 2, ya + _H, xb + _W / 2, yb
        if yb <= ya:  # a loop back up: leave from the side
            x1, y1, x2, y2 = xa + _W, ya + _H / 2, xb + _W, yb + _H / 2
            path = f"M{x1:.0f},{y1:.0f} C{x1 + 40:.0f},{y1:.0f} {x2 + 40:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
        else:
            path = f"M{x1:.0f},{y1:.0f} L{x2:.0f},{y2:.0f}"
        dash = ' stroke-dasharray="5,4"' if conditional or yb <= ya else ""
        parts.append(f'<path class="edge" d="{path}"{dash} marker-end="url(#arrow)"/>')
    for name, (x, y) in at.items():
        label = {"__start__": "start", "__end__": "end"}.get(name, name)
        kind = "terminal" if name in ("__start__", "__end__") else "step"
        parts.append(
            f'<g class="node {kind}" id="node-{escape(name, quote=True)}"><rect x="{x:.0f}" y="{y:.0f}" '
            f'width="{_W}" height="{_H}" rx="8"/><text x="{x + _W / 2:.0f}" y="{y + _H / 2 + 5:.0f}" '
            f'text-anchor="middle">{escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
