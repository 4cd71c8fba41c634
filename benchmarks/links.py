"""Link hops without titles or hand-written aliases: the link table's anchors come from the documents themselves
(``modular_rag/links.py``), and this command measures what that keeps of the hops' gain.

    .venv/bin/python benchmarks/links.py [--root ../shared/datasets] [--skip-demo] [--skip-hotpotqa] [--save]

1. The demo corpus (36 Markdown documents, 24 questions, 5 multi-hop) as shipped (no ``aliases:``) and with the
   hand-written ``aliases:`` it used to carry put back: the default (single shot, extractive answer) against the
   default after ``link_hop`` (``benchmarks/answers.py``'s two configs). All@5 on the 5 multi-hop questions and on
   all 24, answers containing the gold with a supported citation on all 24 (``answers.py``'s scoring).
2. HotpotQA dev (all 350 questions, and the 230 outside the fit split the pair weights were chosen on) with titles,
   with the BEIR ``title`` field emptied in the corpus (each paragraph still names its subject in its first
   sentence), and with every question lowercased (titles kept): single shot (``configs/hotpotqa-linear.yaml``)
   against every shipped link config, and the share of the with-titles gain the others keep.
3. The link table of each corpus: documents with an outlink, gold pairs it links, build time.

Modified corpora are written under ``.modular_rag/links-bench/`` (never into the repository); the titles-emptied
corpus is embedded once (several minutes) and cached like any other. ``--save`` writes the output to
``benchmarks/results/links.txt``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import main as common_main  # noqa: E402

WORK = ROOT / ".modular_rag" / "links-bench"
LINK_CONFIGS = [
    "hotpotqa-multihop",
    "hotpotqa-iterative-links",
    "hotpotqa-recursive-links",
    "hotpotqa-branching-passages",
]
DEMO_ALIASES = {  # the hand-written front matter the demo carried before its anchors came from the documents
    "harbor-20-kids-bike-manual": "Harbor 20",
    "tp-4410-brake-pads": "TP-4410",
    "tw-300-commuter-manual": "TW-300 Commuter, TW-300",
    "tw-550-gravel-spec-sheet": "TW-550 Gravel, TW-550",
    "tw-900-carbon-road-manual": "TW-900 Carbon Road, TW-900",
    "tw-e1-ebike-manual": "TW-E1",
    "tw-e2-cargo-manual": "TW-E2 Cargo, TW-E2",
    "tw-f2-skiff-folding-manual": "TW-F2 Skiff, TW-F2",
}


def _fit_ids(dataset: Any) -> set[str]:
    """The 120 HotpotQA questions the pair weights were chosen on (first by sha256 of ``hotpot-fit:<id>``)."""
    ids = [q.id for q in dataset.queries]
    return set(sorted(ids, key=lambda q: hashlib.sha256(f"hotpot-fit:{q}".encode()).hexdigest())[:120])


def _all_at_5(result: Any, qrels: dict[str, dict[str, int]], keep: set[str] | None = None) -> float:
    records = [r for r in result.records if keep is None or r.qid in keep]
    return sum(all(d in r.docs[:5] for d in qrels[r.qid]) for r in records) / max(len(records), 1)


def _link_stats(env: Any, dataset: Any, seconds: float) -> list[str]:
    """Documents with an outlink, gold pairs linked (either way), anchors, seconds to build the table in memory."""
    held = [c for part in env.index.catalog.scan() for c in part]
    docs = {c.id: c.doc_id for c in held}
    outlinks = env.index.links.outlinks(list(docs))
    linked_docs = {docs[c] for c, out in outlinks.items() if out}
    graph = {(docs[a], docs[b]) for a, out in outlinks.items() for b in out}
    pairs = [sorted(g) for g in dataset.qrels.values() if len(g) == 2]
    joined = sum((a, b) in graph or (b, a) in graph for a, b in pairs)
    anchors = env.index.catalog.anchor_count()
    return [f"{len(linked_docs)}/{len(set(docs.values()))}", f"{joined}/{len(pairs)}", f"{anchors:,}", f"{seconds:.1f}"]


def _timed_links(env: Any) -> float:
    """Seconds to build the link table in memory over the index's chunks (``LinkTable.build``, the reference the
    index's stored table equals)."""
    from modular_rag.links import LinkTable

    held = [c for part in env.index.catalog.scan() for c in part]
    start = time.perf_counter()
    LinkTable.build([c.text for c in held], [c.metadata for c in held])
    return time.perf_counter() - start


def _demo_copy(with_aliases: bool) -> Path:
    """The demo (corpus and questions) under ``.modular_rag/links-bench/``, with or without the old aliases."""
    from modular_rag import demo_corpus_path

    source = demo_corpus_path()
    folder = WORK / ("demo-aliases" if with_aliases else "demo")
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "corpus").mkdir(parents=True)
    shutil.copy2(source.parent / "questions.jsonl", folder / "questions.jsonl")
    for file in sorted(source.glob("*.md")):
        text = re.sub(r"(?m)^aliases:.*\n", "", file.read_text(encoding="utf-8"))
        if with_aliases and file.stem in DEMO_ALIASES:
            text = text.replace("\nyear:", f"\naliases: {DEMO_ALIASES[file.stem]}\nyear:", 1)
        (folder / "corpus" / file.name).write_text(text, encoding="utf-8")
    return folder


def _hotpotqa_copies(source: Path) -> dict[str, Path]:
    """HotpotQA as shared, with the corpus's titles emptied, and with its questions lowercased (same corpus)."""
    notitles, lower = WORK / "hotpotqa-notitles", WORK / "lowercase" / "hotpotqa"
    for folder in (notitles, lower):
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("qrels.tsv",) + (("queries.jsonl",) if folder == notitles else ("corpus.jsonl",)):
            if not (folder / name).exists():
                (folder / name).symlink_to((source / name).resolve())
    if not (notitles / "corpus.jsonl").exists():
        with open(source / "corpus.jsonl", encoding="utf-8") as fh, open(notitles / "corpus.jsonl", "w") as out:
            for line in fh:
                out.write(json.dumps({**json.loads(line), "title": ""}, ensure_ascii=False) + "\n")
    if not (lower / "queries.jsonl").exists():
        with open(source / "queries.jsonl", encoding="utf-8") as fh, open(lower / "queries.jsonl", "w") as out:
            for line in fh:
                row = json.loads(line)
                out.write(json.dumps({**row, "text": row["text"].lower()}, ensure_ascii=False) + "\n")
    return {"titles": source, "titles emptied": notitles, "questions lowercased": lower}


def run(args: argparse.Namespace) -> int:
    import yaml

    from modular_rag import template_path
    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import load_beir, load_documents
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    if not args.skip_demo:
        default = yaml.safe_load(template_path("linear").read_text(encoding="utf-8"))
        hop = json.loads(json.dumps(default))  # benchmarks/answers.py's "default+multihop"
        hop["operators"]["retrieve"] = {"name": "hybrid", "params": {"k": 20, "pool": 20}}
        hop["operators"]["rerank"] = {"name": "link_hop", "params": {"k": 10}}
        rows, stats = [], []
        for label, with_aliases in (("shipped (no aliases)", False), ("+ the old hand-written aliases", True)):
            dataset = load_documents(_demo_copy(with_aliases))
            multi = {q.id for q in dataset.queries if q.extra.get("kind") == "multi-hop"}
            env = None
            for name, data in (("default (single shot)", default), ("default + link_hop", hop)):
                config = load_config({**data, "name": name})
                env = dataset_providers(
                    dataset, config.providers, chunker=OperatorSpec(name="recursive"), progress=False
                )
                result = evaluate_flow(config, dataset, env, name=name)
                s = result.summary()
                rows.append(
                    [
                        label,
                        name,
                        f"{_all_at_5(result, dataset.qrels, multi):.3f}",
                        f"{_all_at_5(result, dataset.qrels):.3f}",
                        f"{s['contains']:.3f}",
                        f"{s['contains_backed']:.3f}",
                        f"{s['ms']:.0f}",
                    ]
                )
            stats.append([label, *_link_stats(env, dataset, _timed_links(env))])
        print("1. the demo corpus: 24 questions (5 multi-hop), answers scored as benchmarks/answers.py does")
        print(
            format_table(
                [
                    "corpus",
                    "config",
                    "all@5, 5 multi-hop",
                    "all@5, 24",
                    "contains gold",
                    "+ supported citation",
                    "ms/q",
                ],
                rows,
            )
        )
        print(format_table(["corpus", "documents with an outlink", "gold pairs linked", "anchors", "build s"], stats))
        print()
    if not args.skip_hotpotqa:
        configs = {
            name: yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text(encoding="utf-8"))
            for name in ["hotpotqa-linear", *LINK_CONFIGS]
        }
        rows, stats, gains = [], [], []
        for label, folder in _hotpotqa_copies(Path(args.root) / "hotpotqa").items():
            dataset = load_beir(folder)
            fit = _fit_ids(dataset)
            rest = {q.id for q in dataset.queries} - fit
            scores: dict[str, tuple[float, float]] = {}
            env = None
            for name, data in configs.items():
                config = load_config(data)
                env = dataset_providers(
                    dataset, config.providers, chunker=OperatorSpec(name="document"), progress=False
                )
                result = evaluate_flow(config, dataset, env, name=name)
                s = result.summary()
                scores[name] = (_all_at_5(result, dataset.qrels), _all_at_5(result, dataset.qrels, rest))
                rows.append(
                    [
                        label,
                        name,
                        f"{scores[name][0]:.3f}",
                        f"{scores[name][1]:.3f}",
                        f"{_all_at_5(result, dataset.qrels, fit):.3f}",
                        f"{s['retrievals']:.2f}",
                        f"{s['ms']:.0f}",
                    ]
                )
            if label != "questions lowercased":
                stats.append([label, *_link_stats(env, dataset, _timed_links(env))])
            gains.append((label, scores))
        print("2. HotpotQA dev, retrieval only (no LLM): all@5")
        print(
            format_table(
                ["corpus / questions", "config", "all@5 (350)", "230 unseen", "120 fit", "retrievals/q", "ms/q"], rows
            )
        )
        base = dict(gains)["titles"]
        out = []
        for label, scores in gains:
            for name in LINK_CONFIGS:
                share = [
                    (scores[name][k] - scores["hotpotqa-linear"][k])
                    / max(base[name][k] - base["hotpotqa-linear"][k], 1e-9)
                    for k in (0, 1)
                ]
                out.append(
                    [
                        label,
                        name,
                        f"{scores[name][0] - scores['hotpotqa-linear'][0]:+.3f}",
                        f"{share[0]:.0%}",
                        f"{scores[name][1] - scores['hotpotqa-linear'][1]:+.3f}",
                        f"{share[1]:.0%}",
                    ]
                )
        print("\nthe link configs' gain over single shot on the same corpus, and its share of the with-titles gain")
        print(
            format_table(
                [
                    "corpus / questions",
                    "config",
                    "gain (350)",
                    "of titles' gain",
                    "gain (230)",
                    "of titles' gain (230)",
                ],
                out,
            )
        )
        print("\n3. the link table (built from the index's chunks)")
        print(format_table(["corpus", "documents with an outlink", "gold pairs linked", "anchors", "build s"], stats))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--skip-demo", action="store_true", help="leave out the demo corpus")
    parser.add_argument("--skip-hotpotqa", action="store_true", help="leave out HotpotQA")


def main() -> int:
    return common_main("links.py", __doc__ or "", run, _arguments, "links.txt")


if __name__ == "__main__":
    raise SystemExit(main())
