"""Answers from real manuals: the kit's answers to questions written as each manual's users ask them, scored on
whether they hold the gold value with a citation to a gold page, and whether the unanswerable ones are refused.

    .venv/bin/python benchmarks/manuals.py [--manuals git,django,texworks] [--configs default,...] [--split all]
                                           [--show-misses] [--reindex] [--save]

Manuals and questions: ``benchmarks/manuals/`` (three Debian documentation packages: git-doc's HTML pages (AsciiDoc),
Django's API reference (Sphinx HTML), TeXworks' PDF manual; 206 questions written before the kit was tuned on them,
README there). Each manual's folder is indexed as a user would point ``modular-rag index`` at it (git-doc's folder
also holds the AsciiDoc sources as ``.txt``; a citation of ``x.txt`` counts as one of ``x.html``), once per config
(kept under ``--scratch`` and reused while the kit's loaders, chunker and embedder settings are the same), then
every question runs through the config's flow. ``--split`` keeps half of each set: ``fit`` the odd-numbered
questions (on which the kit was tuned), ``check`` the even-numbered ones (not looked at while tuning), ``all``.

Scored per question: **right**: the answer holds a gold value (case-insensitive, not inside a longer word) and
cites a gold page (every value and page for a two-page question); **value**: it holds a gold value; **cited**: it
cites a gold page; **page@10**: a gold page is among the first 10 candidates; **refused**: an unanswerable question
is refused. A miss is put down to the first stage that lost it: ``loader`` (no chunk of a gold page holds the
evidence sentence whole), ``retrieval`` (no gold page among the candidates), ``pack`` (the evidence pack holds no
sentence of the gold evidence), ``choice`` (it does, and another sentence was quoted), ``refused`` (a refusal).
Configs: ``default`` (the linear template as shipped) and the names of YAML files in ``configs/``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "manuals"))

from common import main as common_main  # noqa: E402

from modular_rag.eval.recommend import VARIANTS as PATTERN_VARIANTS  # noqa: E402

QUESTIONS = ROOT / "benchmarks" / "manuals"
_TOK = re.compile(r"\w+")


def load_questions(manual: str, split: str = "all") -> list[dict[str, Any]]:
    """A manual's questions, all or one half (``fit``: odd-numbered ids, ``check``: even-numbered)."""
    rows = [json.loads(line) for line in (QUESTIONS / f"{manual}.jsonl").read_text(encoding="utf-8").splitlines()]
    if split == "all":
        return rows
    parity = 1 if split == "fit" else 0
    return [q for q in rows if int(q["id"].rsplit("-", 1)[1]) % 2 == parity]


VARIANTS: dict[str, dict[str, Any]] = {
    "multihop": PATTERN_VARIANTS["linear"]["linear-multihop"]["operators"],  # recommend's linear-multihop
    "dense": {"retrieve": {"name": "dense", "params": {"k": 10}}},
    "bm25": {"retrieve": {"name": "bm25", "params": {"k": 10}}},
    "narrow": {"context": {"name": "evidence_first", "params": {"max_chunks": 2, "sentences": 1}}},
    "wide": {"context": {"name": "evidence_first", "params": {"max_chunks": 8, "sentences": 4}}},
    "quotes2": {"generate": {"name": "cited_answer", "params": {"mode": "extractive", "quotes": 2}}},
    "quotes1": {"generate": {"name": "cited_answer", "params": {"mode": "extractive", "quotes": 1}}},
    "small": {"_chunker": {"name": "recursive", "params": {"chunk_size": 400, "chunk_overlap": 60}}},
}
"""Operator overrides of the default template a config name may add after a ``+`` (``default+dense``): LLM-free
flows whose answers differ, the candidates ``benchmarks/manual_testset.py`` ranks."""


def config_of(name: str, index: Path) -> dict[str, Any]:
    """A config by name (``default``: the linear template; ``+int8``/``+fp32``: that embedder; ``+alone``: sentence
    vectors embedded one by one, not read from their chunk's pass; ``+<variant>``: :data:`VARIANTS`), its Chroma
    index moved to ``index``."""
    import yaml

    from modular_rag import template_path

    base, *variants = name.split("+")
    path = template_path("linear") if base == "default" else ROOT / "configs" / f"{base}.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["name"] = name
    if "int8" in variants:
        config["providers"]["embeddings"] = {"name": "minilm", "precision": "int8"}
    if "fp32" in variants:
        config["providers"]["embeddings"] = {"name": "minilm", "precision": "fp32"}
    for variant in variants:
        for slot, operator in VARIANTS.get(variant, {}).items():
            if slot == "_chunker":
                config["indexing"] = {**config.get("indexing", {}), "chunker": operator}
            else:
                config["operators"][slot] = copy.deepcopy(operator)  # shared with recommend's variants
    config["_alone"] = "alone" in variants
    config["providers"]["vectorstore"] = {"name": "chroma", "path": str(index), "collection": "manual"}
    return config


def page_of(meta: Mapping[str, Any]) -> str:
    """The page a chunk's metadata names, as the question sets write it (``x.html``, ``manual.pdf#page=3``)."""
    path = str(meta.get("path") or "")
    if path.endswith(".txt"):
        path = path[: -len(".txt")] + ".html"
    return f"{path}#page={meta['page']}" if "page" in meta and path.endswith(".pdf") else path


def holds(text: str, value: str) -> bool:
    """Whether ``text`` holds ``value``: case-insensitive, whitespace squeezed, not inside a longer word."""
    squeezed, want = " ".join(text.split()).lower(), " ".join(value.split()).lower()
    for m in re.finditer(re.escape(want), squeezed):
        before = squeezed[m.start() - 1] if m.start() else " "
        after = squeezed[m.end()] if m.end() < len(squeezed) else " "
        if not (want[0].isalnum() and (before.isalnum() or before == "_")) and not (
            want[-1].isalnum() and (after.isalnum() or after == "_")
        ):
            return True
    return False


def _tokens(text: str) -> str:
    return " ".join(_TOK.findall(text.lower()))


def score(question: Mapping[str, Any], out: Mapping[str, Any]) -> dict[str, Any]:
    """One question's result: right, value, cited, page ranks, refused, and the stage a miss is put down to."""
    from modular_rag.text import split_sentences

    answer = out.get("answer") or {}
    evidence = {e["ref"]: e for e in out.get("evidence") or []}
    cited_pages = {
        page_of(evidence[c["ref"]]["metadata"]) for c in answer.get("citations") or [] if c["ref"] in evidence
    }
    candidates = [page_of(h["metadata"]) for h in out.get("candidates") or []]
    gold, values = list(question["gold"]), list(question["answers"])
    refused = bool(answer.get("refused")) or not answer
    text = str(answer.get("text") or "")
    row: dict[str, Any] = {"id": question["id"], "answerable": question["answerable"], "refused": refused}
    if not question["answerable"]:
        return row
    if question.get("hops") == 2:
        value = all(holds(text, v) for v in values)
        cited = set(gold) <= cited_pages
    else:
        value = any(holds(text, v) for v in values)
        cited = bool(cited_pages & set(gold))
    rank = next((i for i, p in enumerate(candidates) if p in gold), None)
    ev_sentences = [_tokens(s) for s in split_sentences(question["evidence"].replace("\n", "\n\n"))]
    packed = any(any(e and e in _tokens(ev["text"]) for e in ev_sentences) for ev in evidence.values())
    row.update(
        right=value and cited and not refused,
        value=value and not refused,
        cited=cited and not refused,
        rank=rank,
        packed=packed,
        answer=text,
        cited_pages=sorted(cited_pages),
    )
    return row


def _fingerprint(config: Mapping[str, Any]) -> str:
    """What makes an index what it is: the indexing settings, the embedder, and the kit's loader and chunker code."""
    code = b"".join(
        (ROOT / f).read_bytes()
        for f in ("operators/indexing.py", "modular_rag/ingest/files.py", "modular_rag/ingest/chunks.py")
        if (ROOT / f).exists()
    )
    code += b"".join(p.read_bytes() for p in sorted((ROOT / "modular_rag" / "ingest").glob("*.py")))
    wanted = {
        "indexing": config.get("indexing"),
        "embeddings": config["providers"].get("embeddings"),
        "alone": config.get("_alone"),
    }
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode() + code).hexdigest()[:12]


def index_manual(manual: str, config: dict[str, Any], scratch: Path, reindex: bool) -> tuple[Path, float | None]:
    """The manual indexed with the config's indexing settings (reused when already made with the same ones); the
    index folder and the seconds indexing took (``None`` when reused)."""
    from fetch import manual_path

    from modular_rag.config import load_config
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    index = scratch / f"{manual}-{_fingerprint(config)}"
    config["providers"]["vectorstore"]["path"] = str(index)
    done = index / "done.json"
    if done.exists() and not reindex:
        return index, None
    import shutil

    shutil.rmtree(index, ignore_errors=True)
    flow = load_config({k: v for k, v in config.items() if not k.startswith("_")})
    env = Providers(flow.providers)
    if config.get("_alone"):  # the sentences embedded one by one, as before late chunking (for comparison)
        type(env.index.sentences).late = property(lambda self: False)  # type: ignore[assignment,method-assign]
    start = time.perf_counter()
    summary = index_paths(
        [manual_path(manual)],
        env,
        chunker=flow.indexing.chunker,
        batch_size=flow.indexing.batch_size,
        max_file_mb=flow.indexing.max_file_mb,
        progress=False,
    )
    seconds = time.perf_counter() - start
    done.write_text(json.dumps({"chunks": summary.chunks, "seconds": seconds}))
    return index, seconds


def _stage(row: Mapping[str, Any]) -> str:
    if row.get("right"):
        return "right"
    if row["refused"]:
        return "refused"
    if row.get("rank") is None or row["rank"] >= 10:
        return "retrieval"
    if not row.get("packed"):
        return "pack"
    return "choice"


def answer(config: Mapping[str, Any], questions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each question run through the config's flow (over its index, already made) and scored (:func:`score`)."""
    from modular_rag.builder import build_flow

    flow = build_flow({k: v for k, v in config.items() if not k.startswith("_")})
    return [score(q, flow.invoke({"query": q["question"]})) for q in questions]


def right_share(results: Sequence[Mapping[str, Any]]) -> float:
    """The share judged right: answerable questions answered right with a gold citation, unanswerable ones refused."""
    return sum(bool(r.get("right")) if r["answerable"] else r["refused"] for r in results) / max(1, len(results))


def run(args: argparse.Namespace) -> int:
    """Index each manual per config, answer its questions, print the table (and the misses with --show-misses)."""
    scratch = Path(args.scratch)
    manuals = [m for m in args.manuals.split(",") if m]
    configs = [c for c in args.configs.split(",") if c]
    print(f"split: {args.split} (fit: odd-numbered questions, tuned on; check: even-numbered, not looked at)")
    rows_out = []
    for manual in manuals:
        questions = load_questions(manual, args.split)
        for name in configs:
            config = config_of(name, scratch)
            index, seconds = index_manual(manual, config, scratch, args.reindex)
            chunks = json.loads((index / "done.json").read_text())["chunks"]
            started = time.perf_counter()
            results = answer(config, questions)
            per_q = (time.perf_counter() - started) / max(1, len(questions)) * 1000
            answerable = [r for r in results if r["answerable"]]
            unanswerable = [r for r in results if not r["answerable"]]
            stages = Counter(_stage(r) for r in answerable)
            rows_out.append(
                [
                    manual,
                    name,
                    f"{sum(r['right'] for r in answerable)}/{len(answerable)}",
                    f"{sum(r['right'] for r in answerable) / max(1, len(answerable)):.2f}",
                    f"{sum(r['value'] for r in answerable)}",
                    f"{sum(r['cited'] for r in answerable)}",
                    f"{sum(r['rank'] is not None and r['rank'] < 10 for r in answerable)}",
                    f"{sum(r['refused'] for r in unanswerable)}/{len(unanswerable)}",
                    " ".join(f"{k} {stages[k]}" for k in ("retrieval", "pack", "choice", "refused") if stages[k]),
                    f"{chunks}",
                    "reused" if seconds is None else f"{seconds:.0f}",
                    f"{per_q:.0f}",
                ]
            )
            if args.show_misses:
                by_id = {q["id"]: q for q in questions}
                for r in results:
                    q = by_id[r["id"]]
                    if r["answerable"] and not r["right"]:
                        print(f"  MISS {r['id']} [{_stage(r)}] rank={r['rank']} Q: {q['question']}")
                        print(f"       gold {q['answers']} in {q['gold']}; evidence: {q['evidence'][:160]}")
                        print(f"       A: {r['answer'][:240]}  cites {r['cited_pages']}")
                    elif not r["answerable"] and not r["refused"]:
                        print(f"  ANSWERED-UNANSWERABLE {r['id']} Q: {q['question']}")
    from modular_rag.tables import format_table

    headers = ["manual", "config", "right", "share", "value", "cited", "page@10", "refused", "misses by stage"]
    headers += ["chunks", "index s", "ms/q"]
    print(format_table(headers, rows_out, max_width=10_000))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manuals", default="git,django,texworks")
    parser.add_argument("--configs", default="default", help="default (the linear template) and configs/ names")
    parser.add_argument("--split", choices=("all", "fit", "check"), default="all")
    parser.add_argument("--scratch", default=str(ROOT / ".modular_rag" / "manuals"), help="where the indexes go")
    parser.add_argument("--reindex", action="store_true", help="index again even when an index is kept")
    parser.add_argument("--show-misses", action="store_true", help="print each missed question")


def main() -> int:
    """The command."""
    return common_main("manuals.py", __doc__ or "", run, _arguments, "manuals.txt")


if __name__ == "__main__":
    sys.exit(main())


__all__: Sequence[str] = [
    "load_questions",
    "score",
    "holds",
    "page_of",
    "main",
    "answer",
    "right_share",
    "config_of",
    "index_manual",
    "VARIANTS",
]
