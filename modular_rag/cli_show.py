"""How a flow's run is shown on a terminal: streamed node by node, the result as text or JSON, the steps that failed."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["stream_run", "format_update", "print_result", "failed_steps"]


def stream_run(flow: Any, state: Mapping[str, Any], *, out: Any = None) -> dict[str, Any]:
    """Run a flow, printing one line per node update as it happens (``stream_mode="updates"``); returns the
    final state."""
    out = out or sys.stdout
    final: dict[str, Any] = {}
    for mode, chunk in flow.stream(dict(state), stream_mode=["updates", "values"]):
        if mode == "values":
            final = chunk
            continue
        for node, update in chunk.items():
            print(format_update(node, update), file=out, flush=True)
    if out is sys.stdout:
        print(file=out)
    return final


def format_update(node: str, update: Mapping[str, Any] | None) -> str:
    """One line for a node's update: ``[generate] 1403 ms, 1 LLM call  answer('Error E07 means...')``."""
    from modular_rag.builder import summarise

    update = update or {}
    ledger = [e for e in update.get("ledger") or [] if isinstance(e, Mapping)]
    ms = sum(float(e.get("ms", 0.0)) for e in ledger)
    calls = sum(int(e.get("llm_calls", 0)) for e in ledger)
    cost = f"{ms:.0f} ms" + (f", {calls} LLM call{'s' if calls != 1 else ''}" if calls else "")
    return f"[{node}] {cost}  {summarise(update) or '(no state change)'}"


def print_result(result: Mapping[str, Any], *, as_json: bool = False, out: Any = None) -> None:
    """Print a run's answer, citations and per-node trace/cost table (or the whole result as JSON)."""
    from modular_rag.tables import format_table
    from modular_rag.trace import totals

    out = out or sys.stdout
    if as_json:
        print(json.dumps(dict(result), indent=2, default=str), file=out)
        return
    answer = result.get("answer") or {}
    print(f"Q: {result.get('query', '')}", file=out)
    print(f"A: {answer.get('text', '(no answer: generation is disabled)')}", file=out)
    if answer.get("refused") and answer.get("reason"):
        print(f"   refused: {answer['reason']}", file=out)
    elif answer and not answer.get("refused") and answer.get("supported") is not None and answer["supported"] < 1.0:
        print(
            f"   marked: {answer['supported']:.0%} of its sentences are supported by what they cite"
            + (f" ({answer['reason']})" if answer.get("reason") else ""),
            file=out,
        )
    for flag in answer.get("flags") or []:
        print(f"   FLAG: {flag}", file=out)
    evidence = {e["ref"]: e for e in result.get("evidence") or []}
    for cit in answer.get("citations") or []:
        ev = evidence.get(cit["ref"], {})
        meta = ev.get("metadata", {})
        label = str(meta.get("title") or meta.get("doc_id") or cit["chunk_id"])
        if meta.get("page"):
            label += f", p. {meta['page']}"
        how = ", ".join(
            x
            for x in (cit.get("method") if cit.get("method") != "model" else "", cit.get("verdict"), cit.get("reason"))
            if x
        )
        print(f"  [{cit['ref']}] {label}  chunk {cit['chunk_id']}" + (f" ({how})" if how else ""), file=out)
    ledger = {(e["node"], e["operator"], i): e for i, e in enumerate(result.get("ledger") or [])}
    rows = []
    for (node, op, _), entry in ledger.items():
        rows.append(
            [
                node,
                op,
                entry["ms"],
                entry["llm_calls"],
                entry["prompt_tokens"],
                entry["completion_tokens"],
                entry["retrievals"],
                entry["embed_calls"],
            ]
        )
    statuses = [(e["node"], e["status"], e.get("error", ""), e["summary"]) for e in result.get("trace") or []]
    if rows:
        print("\ntrace:", file=out)
        headers = ["node", "operator", "ms", "llm", "tok_in", "tok_out", "retr", "embed"]
        print(format_table(headers, rows), file=out)
        t = totals(result.get("ledger"))
        print(
            f"total: {t['ms']:.0f} ms, {int(t['llm_calls'])} LLM calls, {int(t['prompt_tokens'])}+"
            f"{int(t['completion_tokens'])} tokens, {int(t['retrievals'])} retrievals",
            file=out,
        )
    said: dict[str, list[str]] = {}  # one line per distinct error: a dead model fails every step that calls it
    for node, status, error, summary in statuses:
        if status != "ok":
            said.setdefault(f"{status} {error or summary}", []).append(node)
    for what, nodes in said.items():
        print(f"  {', '.join(nodes)}: {what}", file=out)


def failed_steps(result: Mapping[str, Any]) -> list[str]:
    """The nodes whose operator raised and whose ``on_error: skip`` let the flow go on (their trace status
    ``error``): a run with any answered from a fallback, so the command exits 1."""
    return [e["node"] for e in result.get("trace") or [] if e.get("status") == "error"]
