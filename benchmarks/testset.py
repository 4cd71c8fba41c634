"""Does choosing a flow by a test set made from the corpus alone pick what real questions would?

    .venv/bin/python benchmarks/testset.py [--datasets scifact hotpotqa squad_expmrc] [--size 400]
        [--tune-budget 10m] [--skip-tune] [--llm-sample 24] [--fit] [--save]

For each dataset, ``make_testset`` makes a set from its ``corpus.jsonl`` alone (the LLM-free makers: inverse cloze,
fact questions, bridge questions; default settings), then every flow of a fixed list (:data:`FLOWS`: the shipped
``configs/`` and variants, retrieval only, no LLM) is scored on the set's dev split and on the real dev questions.
Printed per dataset: each flow's quality on both, the Kendall tau (tau-b) between the two rankings, whether the top
flow is the same; ``recommend`` over the same flows on the synthetic set and ``tune`` on it (its training split,
``--tune-budget``, LLM-free flows: ``--max-llm-calls 0``), each pick scored on the real dev questions against the
best flow by real labels.

Metrics: SciFact nDCG@10, HotpotQA all@5 (both gold passages in the top 5), SQuAD nDCG@10 (one gold paragraph in a
319-paragraph corpus: every flow's recall@5 is near its ceiling, 0.91 to 0.97, printed beside it; nDCG@10 says how
high the paragraph lands, which separates the flows).

``--fit`` instead compares a grid of maker settings on SciFact's *training* claims (never the dev claims reported
here), which is how the makers' defaults were chosen. ``--llm-sample N`` runs the LLM maker with the local
SmolLM2-135M (llama-server) on N HotpotQA candidates, with the closed-book check, and reports what survives.
``--save`` writes the output to ``benchmarks/results/testset.txt`` and the reports under
``benchmarks/results/testset/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import main as common_main  # noqa: E402

FLOWS: dict[str, tuple[str, dict[str, Any]]] = {
    "bm25": ("scifact-bm25", {}),
    "dense": ("scifact-dense", {}),
    "hybrid-rrf": ("scifact-hybrid", {}),
    "hybrid-weighted": ("scifact-grid-tuned", {}),
    "hybrid-dense-heavy": ("scifact-hybrid", {"retrieve": {"name": "hybrid", "params": {
        "k": 100, "pool": 100, "fusion": "weighted", "weights": [0.8, 0.2]}}}),
    "hybrid-sparse-heavy": ("scifact-hybrid", {"retrieve": {"name": "hybrid", "params": {
        "k": 100, "pool": 100, "fusion": "weighted", "weights": [0.2, 0.8]}}}),
    "hybrid-rescore": ("scifact-hybrid", {"rerank": {"name": "embedding", "params": {"weight": 1.0}}}),
    "link-hop": ("hotpotqa-multihop", {}),
    "iterative-links": ("hotpotqa-iterative-links", {}),
    "branching-passages": ("hotpotqa-branching-passages", {}),
}  # fmt: skip
"""The fixed list of flows ranked on every dataset: (config in configs/, operator overrides); plus ``router``, the
learned router over ``hybrid-rrf`` and ``link-hop`` that ``train-router`` fits on the test set's train split."""
ROUTES = ("hybrid-rrf", "link-hop")
METRIC = {"scifact": "ndcg@10", "hotpotqa": "all@5", "squad_expmrc": "ndcg@10"}
SPACE = {"scifact": "benchmarks/spaces/retrieval-documents.yaml", "squad_expmrc":
         "benchmarks/spaces/retrieval-documents.yaml", "hotpotqa": None}  # fmt: skip
FIT_GRID: list[dict[str, Any]] = [{"drop": 0.0, "max_words": 16}] + [
    {"drop": d, "max_words": w, "focus": f} for f in ("random", "rare") for d in (0.25, 0.5) for w in (10, 16)] + [
    {"drop": 0.5, "max_words": 16, "lead": 3}, {"drop": 0.5, "max_words": 16, "title_words": 4}] + [
    {"drop": d, "max_words": 16, "swap": w, **extra} for d, w, extra in (
        (0.25, 0.3, {}), (0.25, 0.5, {}), (0.5, 0.5, {}), (0.0, 0.5, {}), (0.25, 0.7, {}),
        (0.25, 0.5, {"bridge_share": 0.5}))]  # fmt: skip
"""Maker settings compared by ``--fit`` (on SciFact's training claims); ``bridge_share`` is the bridge maker's share
against 1 for each of the others."""
WORK = ROOT / ".modular_rag" / "testset-bench"


def flow_config(name: str) -> Any:
    """The flow's config: its file in configs/ with the overrides, named ``name``."""
    import yaml

    from modular_rag.config import load_config

    base, overrides = FLOWS[name]
    data = yaml.safe_load((ROOT / "configs" / f"{base}.yaml").read_text(encoding="utf-8"))
    data["operators"] = {**data.get("operators", {}), **overrides}
    data["name"] = name
    return load_config(data)


def makers_config(settings: dict[str, Any] | None = None, size: int = 400) -> dict[str, Any]:
    """The LLM-free makers with ``settings`` (drop, max_words) applied to each; the default settings when None."""
    settings = dict(settings or {})
    share = settings.pop("bridge_share", 1.0)
    bridge = {k: v for k, v in settings.items() if k not in ("max_words", "lead")}  # its max_words: B's words
    return {"makers": [{"name": "inverse_cloze", "params": settings}, {"name": "fact_question", "params": settings},
                       {"name": "bridge", "params": bridge, "share": share}], "size": size}


def score(configs: dict[str, Any], datasets: dict[str, Any], metric: str,
          also: dict[str, dict[str, dict[str, float]]] | None = None) -> dict[str, dict[str, float]]:  # fmt: skip
    """Each flow's ``metric`` on each dataset (all share the corpus, so one cached index per setting); with
    ``also``, every flow's whole summary per dataset is put there too."""
    from modular_rag.eval.runner import config_chunker, dataset_providers, evaluate_flow

    first = next(iter(datasets.values()))
    out: dict[str, dict[str, float]] = {}
    for name, cfg in configs.items():
        env = dataset_providers(first, cfg.providers, chunker=config_chunker(cfg, first.default_chunker),
                                progress=False)  # fmt: skip
        summaries = {label: evaluate_flow(cfg, ds, env, name=name).summary() for label, ds in datasets.items()}
        out[name] = {label: summary[metric] for label, summary in summaries.items()}
        if also is not None:
            also[name] = summaries
    return out


def agreement(table: dict[str, dict[str, float]], a: str, b: str) -> tuple[float, bool]:
    """Kendall tau-b between the flows' rankings by ``a`` and by ``b``, and whether their top flows are the same."""
    from scipy.stats import kendalltau

    names = list(table)
    tau = kendalltau([table[n][a] for n in names], [table[n][b] for n in names]).statistic
    return float(tau), max(names, key=lambda n: table[n][a]) == max(names, key=lambda n: table[n][b])


def fit(args: argparse.Namespace) -> int:
    """Maker settings compared on SciFact's training claims."""
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.testset import make_testset

    real = load_beir(Path(args.root) / "scifact", split="train").limited(400, spread=True)
    configs = {n: flow_config(n) for n in FLOWS}
    print(f"maker settings on SciFact train ({len(real.queries)} of its claims, spread), nDCG@10, {len(FLOWS)} flows, "
          f"synthetic sets of {args.size} (scored on their dev split)")
    base = score(configs, {"real": real}, "ndcg@10")
    print("  real train: " + ", ".join(f"{n} {v['real']:.3f}" for n, v in base.items()))
    for settings in FIT_GRID[args.fit_from:]:
        out = WORK / "fit" / "-".join(f"{k}{v}" for k, v in settings.items())
        make_testset(Path(args.root) / "scifact", out, makers_config(settings, args.size))
        syn = load_beir(out)
        table = score(configs, {"syn": syn}, "ndcg@10")
        for n in table:
            table[n]["real"] = base[n]["real"]
        tau, same = agreement(table, "syn", "real")
        print(f"  {settings}: tau {tau:.3f}, same top {same}, synthetic mean {_mean(table, 'syn'):.3f}")
    return 0


def _mean(table: dict[str, dict[str, float]], key: str) -> float:
    return sum(v[key] for v in table.values()) / len(table)


def _router(ds: str, syn: Path, configs: dict[str, Any], metric: str) -> Any:
    """The learned router over :data:`ROUTES`, trained on the synthetic set's train split (``train-router``)."""
    from modular_rag.config import load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.router import train_router

    training = train_router(load_beir(syn, split="train"), {n: configs[n] for n in ROUTES}, WORK / f"router-{ds}",
                            quality="all@5" if metric == "all@5" else "recall@5")  # fmt: skip
    return load_config(training.config_file)


def _tune(ds: str, syn: Path, metric: str, budget: str) -> Path:
    """``modular-rag tune`` on the synthetic set (its train split); the run's best.yaml."""
    out = WORK / f"tune-{ds}"
    command = [str(ROOT / ".venv" / "bin" / "modular-rag"), "tune", "--dataset", str(syn), "--out", str(out),
               "--budget", budget, "--objective", metric, "--max-llm-calls", "0", "--quiet"]  # fmt: skip
    if SPACE[ds]:
        command += ["--space", str(ROOT / SPACE[ds])]
    subprocess.run(command, check=True, cwd=ROOT)
    return out / "best.yaml"


def run(args: argparse.Namespace) -> int:
    if args.fit:
        return fit(args)
    from modular_rag.config import load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.recommend import recommend
    from modular_rag.eval.testset import make_testset

    keep = ROOT / "benchmarks" / "results" / "testset"
    configs = {n: flow_config(n) for n in FLOWS}
    summary = []
    for ds in args.datasets:
        metric = METRIC[ds]
        out = WORK / ds
        t0 = time.perf_counter()
        result = make_testset(Path(args.root) / ds, out, makers_config(None, args.size))
        made_s = time.perf_counter() - t0
        syn, real = load_beir(out), load_beir(Path(args.root) / ds)
        print(f"\n== {ds}: {metric}; synthetic dev {len(syn.queries)} questions (made in {made_s:.0f}s: "
              + ", ".join(f"{k} {c.get('kept', 0)}" for k, c in result.counts.items())
              + f"), real dev {len(real.queries)}")  # fmt: skip
        if args.save:
            (keep / ds).mkdir(parents=True, exist_ok=True)
            shutil.copy(out / "report.md", keep / ds / "report.md")
        flows = {**configs, "router": _router(ds, out, configs, metric)}
        full: dict[str, dict[str, dict[str, float]]] = {}
        table = score(flows, {"synthetic": syn, "real": real}, metric, full)
        ranked = sorted(table, key=lambda n: -table[n]["real"])
        syn_rank = {n: i + 1 for i, n in enumerate(sorted(table, key=lambda n: -table[n]["synthetic"]))}
        print(f"{'flow':<20} {'synthetic':>9} {'rank':>4} {'real':>7} {'rank':>4}   real recall@5, ms/q")
        for i, n in enumerate(ranked, 1):
            print(f"{n:<20} {table[n]['synthetic']:>9.3f} {syn_rank[n]:>4} {table[n]['real']:>7.3f} {i:>4}   "
                  f"{full[n]['real']['recall@5']:.3f}, {full[n]['real']['ms']:.0f}")  # fmt: skip
        tau, same = agreement(table, "synthetic", "real")
        best_real = table[ranked[0]]["real"]
        print(f"Kendall tau {tau:.3f}; same top flow: {same}; best by real labels: {ranked[0]} {best_real:.3f}")
        rec = recommend(syn, list(flows.items()), quality=metric, progress=False)
        assert rec.best is not None
        pick = table[rec.best.name]["real"]
        print(f"recommend on the synthetic set picks {rec.best.name}: real {pick:.3f} ({pick - best_real:+.3f})")
        row = [ds, metric, f"{tau:.2f}", "yes" if same else "no", f"{_mean(table, 'synthetic'):.3f}",
               f"{_mean(table, 'real'):.3f}", f"{rec.best.name} {pick:.3f} ({pick - best_real:+.3f})"]  # fmt: skip
        if not args.skip_tune:
            t0 = time.perf_counter()
            best_file = _tune(ds, out, metric, args.tune_budget)
            tuned = load_config(best_file)
            real_tuned = score({"tuned": tuned}, {"real": real}, metric)["tuned"]["real"]
            minutes = (time.perf_counter() - t0) / 60
            print(f"tune on the synthetic train split ({args.tune_budget}, {minutes:.0f} min): {tuned.pattern}, "
                  f"real {real_tuned:.3f} ({real_tuned - best_real:+.3f})")  # fmt: skip
            row.append(f"{real_tuned:.3f} ({real_tuned - best_real:+.3f})")
            if args.save:
                for name in ("best.yaml", "report.txt"):
                    if (best_file.parent / name).exists():
                        shutil.copy(best_file.parent / name, keep / ds / f"tune-{name}")
        summary.append(row)
    print("\n| dataset | metric | Kendall tau | same top | mean synthetic | mean real | recommend (synthetic) -> real"
          + (" | tune (synthetic) -> real |" if not args.skip_tune else " |"))  # fmt: skip
    for row in summary:
        print("| " + " | ".join(row) + " |")
    if args.llm_sample:
        llm_sample(args)
    return 0


def llm_sample(args: argparse.Namespace) -> None:
    """The LLM maker on the local model: what it makes, what the checks drop, how long it takes."""
    from modular_rag.eval.testset import make_testset

    out = WORK / "llm-hotpotqa"
    config = {"makers": [{"name": "llm"}], "size": args.llm_sample, "oversample": 1.0,
              "checks": ["answer_in_passage", "closed_book", "not_verbatim", "dedup"],
              "providers": {"llm": {"name": "local"}}}  # fmt: skip
    t0 = time.perf_counter()
    result = make_testset(Path(args.root) / "hotpotqa", out, config)
    seconds = time.perf_counter() - t0
    print(f"\n== LLM maker, local SmolLM2-135M (llama-server), HotpotQA corpus, {args.llm_sample} asked: "
          f"{seconds:.0f}s ({seconds / max(args.llm_sample, 1):.1f}s per question, closed-book check included)")
    print("\n".join(result.lines()[1:-1]))
    if args.save:
        (ROOT / "benchmarks" / "results" / "testset" / "llm").mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "report.md", ROOT / "benchmarks" / "results" / "testset" / "llm" / "report.md")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--datasets", nargs="+", default=list(METRIC), choices=list(METRIC))
    parser.add_argument("--size", type=int, default=400, help="questions per test set, train and dev (400)")
    parser.add_argument("--tune-budget", default="10m", help="tune's budget per dataset (10m)")
    parser.add_argument("--skip-tune", action="store_true")
    parser.add_argument("--llm-sample", type=int, default=0, help="LLM-maker questions on the local model (0: none)")
    parser.add_argument("--fit", action="store_true", help="compare maker settings on SciFact's training claims")
    parser.add_argument("--fit-from", type=int, default=0, help="start --fit at this entry of FIT_GRID")


if __name__ == "__main__":
    sys.exit(common_main("testset.py", __doc__ or "", run, add_arguments, "testset.txt"))
