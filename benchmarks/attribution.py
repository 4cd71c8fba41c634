"""The attribution check's two error rates: the misreadings it passes, and the correct answers it rejects.

    .venv/bin/python benchmarks/attribution.py [--root ../shared/datasets] [--judge] [--save]

1. **Misreadings** (``tests/operators/data/misreadings.jsonl``): answers written from demo and SQuAD passages' own
   words that misread them (subject bound to another value, negation, comparison direction, unit, rival value,
   roles), and correct quotes, paraphrases and short answers of the same passages; the share of each the check
   rejects. The rules were written with this set in view: it is in-sample, a regression set more than a measure.
2. **False rejections on SQuAD** (``squad_expmrc``: 351 dev questions with gold answers and the gold passage in the
   qrels), three kinds of correct answers, each citing the passage it comes from as ``[1]``: ``quote`` (the gold
   passage's sentence holding the gold answer span), ``short`` (the gold answer span itself) and ``extractive`` (the
   default flow's answers, the linear template, that contain a gold answer, against the evidence they cite). Split
   as ``benchmarks/answers.py`` splits SQuAD (``bench holdout``, seed 0): ``tune`` (100 questions, whose rejections
   were read while writing the rules) and ``report`` (the other 251; read after the first run, which rejected 19 of
   its 251 short answers, 0.076, and fixed: see benchmarks/README.md).
3. **False rejections on NQ-open** (``nq_open_oracle``, 1,858 dev questions, never read while writing the rules):
   the quote and the short answer of every question whose gold answer is in its gold passage.
4. **Cost**: the check's time per answer (no model call; the embedding fallback is on, as in the operators).
5. With ``--judge``, **the judge model alone** (``judge: llm``'s question, asked of the template's chat model, the
   bundled SmolLM2-135M by default) on every answer of the misreadings set, against its whole passage and whatever
   the rules say: the share it says "no" to, misreadings and correct answers apart (one LLM call each).

The check runs with the operators' defaults (``support_threshold`` 0.6, ``semantic_threshold`` 0.8 with the
bundled embedder); misreadings are also checked on words alone (``semantic_threshold: null``).

``--save`` writes the output to ``benchmarks/results/attribution.txt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import main as common_main  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _rejected(answer: str, question: str, evidence: list[Any], env: Any, semantic: float | None = 0.8) -> bool:
    from modular_rag.attribution.claims import check_claims

    verdicts = check_claims(answer, question, evidence, semantic_threshold=semantic, providers=env)
    return not verdicts or not all(v.supported for v in verdicts)


def _misreadings(env: Any) -> list[list[Any]]:
    """Per kind of answer of the fixture: how many, and the share rejected on words alone and by default."""
    from tests.operators.misreadings import cases, evidence_for

    groups: dict[tuple[str, str], list[Any]] = {}
    for case in cases():
        label = "correct" if case.correct else "misreading"
        groups.setdefault((label, case.kind), []).append(case)
        groups.setdefault((label, "all"), []).append(case)
    rows = []
    for (label, kind), chosen in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] == "all", g[0][1])):
        words = sum(_rejected(c.answer, c.question, evidence_for(c.passage), env, None) for c in chosen)
        default = sum(_rejected(c.answer, c.question, evidence_for(c.passage), env) for c in chosen)
        rows.append([label, kind, len(chosen), f"{words / len(chosen):.3f}", f"{default / len(chosen):.3f}"])
    return rows


def _gold_sentence(text: str, start: int, gold: str) -> str | None:
    """The sentences of ``text`` (as the kit splits it) that hold the gold answer at offset ``start``."""
    from modular_rag.text import split_sentences

    placed: list[tuple[int, int, str]] = []
    cursor = 0
    for sentence in split_sentences(text):
        at = text.find(sentence[:25], cursor)
        if at < 0:
            return None
        placed.append((at, at + len(sentence), sentence))
        cursor = at + 1
    for i, (begin, end, _) in enumerate(placed):
        if begin <= start < end + 1:
            joined = [s for _, _, s in placed[i:]]
            for n in range(1, len(joined) + 1):
                if gold in " ".join(joined[:n]):
                    return " ".join(joined[:n])
    return None


def _with_marker(text: str) -> str:
    text = text.strip()
    return f"{text[:-1].rstrip()} [1]{text[-1]}" if text[-1:] in ".!?" else f"{text} [1]"


def _gold_answers(dataset: Any, split: dict[str, str], env: Any, spans: bool) -> tuple[Counter, Counter, int, float]:
    """Check the quote and the short answer of every question against its gold passage: answers and rejections per
    (kind, split), the questions left out (no gold answer inside the passage's sentences), seconds per check."""
    corpus = {row["id"]: row for row in dataset.corpus()}
    counts: Counter[tuple[str, str]] = Counter()
    rejected: Counter[tuple[str, str]] = Counter()
    spent, checks, missing = 0.0, 0, 0
    for query in dataset.queries:
        doc = corpus[next(iter(dataset.qrels[query.id]))]
        evidence = [
            {
                "ref": 1,
                "chunk_id": doc["id"],
                "text": f"{doc['title']}\n{doc['text']}",
                "score": 1.0,
                "metadata": {"title": doc["title"], "doc_id": doc["id"]},
            }
        ]
        if spans:  # SQuAD: the first annotated span, at its offset
            span = query.extra["answer_spans"][0]
            gold, start = str(span["text"]), int(span["answer_start"])
        else:  # NQ-open: the first gold answer found in the passage
            found = [(doc["text"].find(a), a) for a in query.answers if a and a in doc["text"]]
            start, gold = found[0] if found else (-1, "")
        sentence = _gold_sentence(doc["text"], start, gold) if gold else None
        if sentence is None:
            missing += 1
            continue
        for kind, answer in (("quote", _with_marker(sentence)), ("short", f"{gold} [1]")):
            begin = time.perf_counter()
            bad = _rejected(answer, query.text, evidence, env)
            spent, checks = spent + time.perf_counter() - begin, checks + 1
            counts[kind, split.get(query.id, "all")] += 1
            rejected[kind, split.get(query.id, "all")] += bad
    return counts, rejected, missing, spent / max(checks, 1)


def _rows(counts: Counter, rejected: Counter, kinds: tuple[str, ...], parts: tuple[str, ...]) -> list[list[Any]]:
    rows = []
    for kind in kinds:
        for part in parts:
            keys = [(kind, p) for p in parts if p != "all"] if part == "all" and len(parts) > 1 else [(kind, part)]
            n, r = sum(counts[k] for k in keys), sum(rejected[k] for k in keys)
            rows.append([kind, part, n, r, f"{r / n:.3f}" if n else "-"])
    return rows


def run(args: argparse.Namespace) -> int:
    from modular_rag import template_path
    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import holdout_split, load_beir
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.tables import format_table

    dataset = load_beir(Path(args.root) / "squad_expmrc")
    home = ROOT / ".modular_rag" / "datasets" / "squad-answers"  # the split benchmarks/answers.py reports on
    if not (home / "report_queries.jsonl").exists():
        holdout_split(dataset, home, fraction=0.285, seed=0, names=("report", "tune"))
    split = {q.id: name for name in ("tune", "report") for q in load_beir(home, split=name).queries}
    config = load_config(template_path("linear"))
    env = dataset_providers(dataset, config.providers, chunker=OperatorSpec(name="document"), progress=False)

    print("Misreadings and correct answers of the same passages (tests/operators/data/misreadings.jsonl):")
    print(format_table(["answers", "kind", "n", "rejected (words only)", "rejected (default)"], _misreadings(env)))

    counts, rejected, missing, seconds = _gold_answers(dataset, split, env, spans=True)
    flow = evaluate_flow(config, dataset, env, name="default")
    for record in flow.records:
        if record.contains and not record.refused:
            counts["extractive", split[record.qid]] += 1
            rejected["extractive", split[record.qid]] += (record.supported or 0.0) < 1.0
    rows = _rows(counts, rejected, ("quote", "short", "extractive"), ("tune", "report", "all"))
    for part in ("report", "all"):
        n = sum(v for (_, p), v in counts.items() if part == "all" or p == part)
        r = sum(v for (_, p), v in rejected.items() if part == "all" or p == part)
        rows.append(["all three", part, n, r, f"{r / n:.3f}"])
    print(
        f"\nFalse rejections of correct answers on SQuAD dev ({len(dataset.queries)} questions; {missing} whose gold "
        "span is not inside the passage's sentences as the kit splits them are left out of quote and short):"
    )
    print(format_table(["answer", "split", "answers", "rejected", "share"], rows))

    nq = load_beir(Path(args.root) / "nq_open_oracle")
    nq_env = dataset_providers(nq, config.providers, chunker=OperatorSpec(name="document"), progress=False)
    counts, rejected, missing, _ = _gold_answers(nq, {}, nq_env, spans=False)
    print(
        f"\nThe same on NQ-open dev, never read while writing the rules ({len(nq.queries)} questions; {missing} "
        "whose gold answers are not in the gold passage's sentences are left out):"
    )
    print(
        format_table(
            ["answer", "split", "answers", "rejected", "share"], _rows(counts, rejected, ("quote", "short"), ("all",))
        )
    )
    print(f"\nthe check's time: {1000 * seconds:.2f} ms per answer (SQuAD quote and short, no model call)")
    if args.judge:
        _judge_alone(env)
    return 0


def _judge_alone(env: Any) -> None:
    """The judge's question about every fixture answer (against its whole passage), without the rules."""
    from modular_rag.answers import (
        DATA_RULE,
        JUDGE_PROMPT,
        SUPPORTED_QUESTION,
        ask_model_yes_no,
        format_evidence,
        strip_citations,
    )
    from modular_rag.tables import format_table
    from modular_rag.trace import metered
    from tests.operators.misreadings import cases, evidence_for

    said: dict[bool, Counter[str]] = {False: Counter(), True: Counter()}
    start = time.perf_counter()
    with metered() as meter:
        for case in cases():
            prompt = JUDGE_PROMPT.format(
                context=f"{format_evidence(evidence_for(case.passage))}\n{DATA_RULE}\n\n",
                query=case.question,
                answer=f"Answer: {strip_citations(case.answer)}",
                ask=SUPPORTED_QUESTION,
            )
            reply, _ = ask_model_yes_no(env, prompt)
            said[case.correct][reply or "unclear"] += 1
    rows = [
        [
            "correct" if correct else "misreading",
            sum(c.values()),
            c["no"],
            c["yes"],
            c["unclear"],
            f"{c['no'] / max(sum(c.values()), 1):.3f}",
        ]
        for correct, c in sorted(said.items())
    ]
    print(
        f"\nThe judge alone ({env.config.llm.name} chat model, {meter.llm_calls} calls, "
        f"{(time.perf_counter() - start) / max(meter.llm_calls, 1):.1f} s each), whole passage, without the rules:"
    )
    print(format_table(["answers", "n", "no", "yes", "unclear", "rejected"], rows))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--judge",
        action="store_true",
        help="also ask the template's chat model the judge's question about every answer of the misreadings set",
    )


def main() -> int:
    return common_main("attribution.py", __doc__ or "", run, _arguments, "attribution.txt")


if __name__ == "__main__":
    raise SystemExit(main())
