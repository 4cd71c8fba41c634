"""``report.md`` beside a test set: questions per kind (candidates, what each check dropped, kept, per split),
answer types, passage coverage, and a sample of each kind to read."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modular_rag.questions import PassageSet

if TYPE_CHECKING:
    from modular_rag.eval.testset.build import TestsetConfig, TestsetResult

__all__ = ["write_report"]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [f"| {' | '.join(head)} |", f"|{'---|' * len(head)}", *(f"| {' | '.join(r)} |" for r in rows)]


def _short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def write_report(
    file: Path,
    result: TestsetResult,
    config: TestsetConfig,
    passages: PassageSet,
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    sample: int = 3,
) -> None:
    """Write the report of a test set (Markdown)."""
    checks = [c.name for c in config.checks]
    head = ["kind", "candidates", *(f"dropped: {c}" for c in checks), "kept", "train", "dev"]
    table = [[kind, *(str(c.get(k, 0)) for k in head[1:])] for kind, c in result.counts.items()]
    kept = sum(c.get("kept", 0) for c in result.counts.values()) or 1
    types = [[t, str(n), f"{n / kept:.0%}"] for t, n in sorted(result.answer_types.items(), key=lambda kv: -kv[1])]
    all_rows = [r for split in rows.values() for r in split]
    per_passage = Counter(g for r in all_rows for g in r["gold"])
    docs = {passages[passages.position[g]].doc or g for g in per_passage}
    all_docs = {p.doc or p.id for p in passages.passages}
    makers = ", ".join(
        f"{m.name} (share {m.share if isinstance(m.share, str) else format(m.share, 'g')}"
        f"{', ' + str(m.params) if m.params else ''})"
        for m in config.makers
    )
    lines = [
        f"# Test set ({sum(len(s) for s in rows.values())} questions)",
        "",
        f"Made from {result.passages} passages ({len(all_docs)} documents) by {makers}; checks: "
        f"{', '.join(checks) or 'none'}; seed {config.seed}. Splits: `train_queries.jsonl` "
        f"({len(rows.get('train', []))}) for `tune` and `train-router`, `queries.jsonl` "
        f"({len(rows.get('dev', []))}) for `eval` and `recommend`.",
        "",
        "## Questions per kind",
        "",
        *_table(head, table),
        "",
        "## Answer types",
        "",
        *_table(["answer type", "questions", "share"], types),
        "",
        "## Passage coverage",
        "",
        f"Gold passages: {len(per_passage)} of {result.passages} ({len(per_passage) / max(result.passages, 1):.1%}); "
        f"documents: {len(docs)} of {len(all_docs)} ({len(docs) / max(len(all_docs), 1):.1%}); at most "
        f"{max(per_passage.values(), default=0)} questions per passage. Questions with two gold passages: "
        f"{sum(1 for r in all_rows if len(r['gold']) > 1)}.",
    ]
    if result.unanswerable:
        lines += ["", f"Unanswerable questions (no gold passage, in `unanswerable.jsonl`): {result.unanswerable}."]
    if result.notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in result.notes)]
    lines += ["", "## Sample", ""]
    rng = random.Random(config.seed)
    for kind in result.counts:
        pool = [r for r in all_rows if r["kind"] == kind]
        for r in rng.sample(pool, min(sample, len(pool))):
            answer = f" → **{r['answers'][0]}** ({r['answer_type']})" if r.get("answers") else ""
            evidence = "; ".join(f'{e["doc"]}: "{_short(e["text"], 120)}"' for e in r["evidence"])
            if r.get("held_out"):
                evidence = f'held out of {r["held_out"]["doc"]}: "{_short(r["held_out"]["text"], 120)}"'
            lines.append(
                f"- [{kind}] {_short(r['text'], 200)}{answer} — gold {', '.join(r['gold'])}"
                + (f" — evidence {evidence}" if evidence else "")
            )
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
