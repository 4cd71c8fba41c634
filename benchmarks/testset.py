"""Does choosing a flow by a test set made from the corpus alone pick what real questions would?

    .venv/bin/python benchmarks/testset.py [--datasets scifact hotpotqa squad_expmrc] [--size 400]
        [--tune-budget 10m] [--skip-tune] [--llm-sample 24] [--fit] [--save]

For each dataset, ``make_testset`` makes a set from its ``corpus.jsonl`` alone (the LLM-free makers with their
default settings), then every flow of a fixed list (:data:`FLOWS` and a router: the shipped ``configs/`` and
variants, retrieval only, no LLM) is scored on the set's dev split (over the set's own corpus, which lacks the
held-out sentences) and on real questions: SciFact's dev claims; for HotpotQA and SQuAD the odd-numbered half of the
dev questions (the even half is fit data, used by ``--fit`` to choose the makers' settings, never reported).

Printed per dataset: each flow's quality on both; Kendall tau-b between the two rankings; whether the top flow is
the same and what the synthetic top flow loses on the real questions (its regret); the pairs of flows whose real
means differ by more than the questions' noise (paired difference beyond 1.96 standard errors) and how the synthetic
set orders them; **the ceiling**: the same figures between two random halves of the real questions (200 halvings:
mean and spread of tau), which says how well real labels of this size agree with themselves; for SciFact also its
training claims against its dev claims; ``recommend`` over the same flows on the synthetic set and ``tune`` on it
(its training split, ``--tune-budget``, LLM-free flows: ``--max-llm-calls 0``), each pick scored on the real
questions against the best flow by them.

Metrics: SciFact nDCG@10, HotpotQA all@5 (both gold passages in the top 5), SQuAD nDCG@10 (one gold paragraph in a
319-paragraph corpus: every flow's recall@5 is near its ceiling, 0.91 to 0.97, printed beside it; nDCG@10 says how
high the paragraph lands, which separates the flows).

``--fit`` compares the maker settings of :data:`FIT_GRID` on fit data only (SciFact's training claims, the even half
of the others' dev questions), which is how the makers' defaults were chosen. ``--llm-sample N`` runs the LLM maker
with the local SmolLM2-135M (llama-server) on N HotpotQA candidates, with the closed-book check, and reports what
survives. ``--save`` writes the output to ``benchmarks/results/testset.txt`` (``--fit``: ``testset-fit.txt``) and the
reports under ``benchmarks/results/testset/``.

A set whose corpus lacks held-out sentences gets its own index; it is made from the real corpus's cached index by a
sync (:func:`environment`: only the changed passages are embedded). Checked once on a 60-question SQuAD set: the
synced and a fresh index gave bm25, dense and hybrid-rrf the same nDCG@10 on its 30 dev questions, and the same top
10 on 85 of the 90 runs (the other 5 order tied scores differently).
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

import numpy as np

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
    "hybrid-dense-heavy": (
        "scifact-hybrid",
        {
            "retrieve": {
                "name": "hybrid",
                "params": {"k": 100, "pool": 100, "fusion": "weighted", "weights": [0.8, 0.2]},
            }
        },
    ),
    "hybrid-sparse-heavy": (
        "scifact-hybrid",
        {
            "retrieve": {
                "name": "hybrid",
                "params": {"k": 100, "pool": 100, "fusion": "weighted", "weights": [0.2, 0.8]},
            }
        },
    ),
    "link-hop": ("hotpotqa-multihop", {}),
    "branching-passages": ("hotpotqa-branching-passages", {}),
}
"""The fixed list of flows ranked on every dataset: (config in configs/, operator overrides); plus ``router``, the
learned router over ``hybrid-rrf`` and ``link-hop`` that ``train-router`` fits on the test set's train split. Two
flows of the earlier list of eleven are left out because they rank as copies and a tie counts in Kendall's tau:
``hotpotqa-iterative-links`` (its round 2 is link-hop's step; the same figures on every dataset) and ``dense``
rescored by the embedder (the same order as dense)."""
ROUTES = ("hybrid-rrf", "link-hop")
METRIC = {"scifact": "ndcg@10", "hotpotqa": "all@5", "squad_expmrc": "ndcg@10"}
SPACE = {
    "scifact": "benchmarks/spaces/retrieval-documents.yaml",
    "squad_expmrc": "benchmarks/spaces/retrieval-documents.yaml",
    "hotpotqa": None,
}
SPLITS = 200
"""Random halvings of the real questions the ceiling is measured over."""


def _makers(ict: dict[str, Any], fact: dict[str, Any] | None, bridge: dict[str, Any], share: Any) -> list[Any]:
    out: list[Any] = [{"name": "inverse_cloze", "params": ict}]
    if fact is not None:
        out.append({"name": "fact_question", "params": fact})
    return out + [{"name": "bridge", "params": bridge, "share": share}]


_OLD = {"drop": 0.5, "max_words": 16}
_WHOLE = {"remove": 0.9, "drop": 0.0, "max_words": 100}
FIT_GRID: dict[str, list[Any]] = {
    "as before (drop 0.5, bridge share 1, any anchor)": _makers(_OLD, _OLD, {"drop": 0.5, "anchor": "any"}, 1.0),
    "kind mix from the corpus (bridge: title links, share read)": _makers(_OLD, _OLD, {"drop": 0.5}, "corpus"),
    "+ held out 0.9, whole sentence": _makers(_WHOLE, _OLD, {"drop": 0.5}, "corpus"),
    "+ held out 0.9, drop 0.5": _makers({**_OLD, "remove": 0.9}, _OLD, {"drop": 0.5}, "corpus"),
    "+ held out 0.9, whole sentence, no fact questions": _makers(_WHOLE, None, {"drop": 0.5}, "corpus"),
}
"""Maker settings compared by ``--fit`` on fit data only: SciFact's training claims, the even-numbered half of
HotpotQA's and SQuAD's dev questions (the odd half is what the main run reports for those two)."""
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


def half(dataset: Any, part: int) -> Any:
    """Every other question of ``dataset`` from position ``part`` (0: the fit half, 1: the report half)."""
    from modular_rag.eval.datasets import BeirDataset

    queries = dataset.queries[part::2]
    keep = {q.id for q in queries}
    return BeirDataset(dataset.root, dataset.split, queries, {k: v for k, v in dataset.qrels.items() if k in keep})


def real_sets(root: Path, ds: str, fit: bool) -> Any:
    """The real questions a dataset is scored on: for ``fit``, SciFact's training claims or the fit half of the dev
    questions; else SciFact's dev claims or the report half (the dev questions never used to choose settings)."""
    from modular_rag.eval.datasets import load_beir

    if ds == "scifact":
        return load_beir(root / ds, split="train" if fit else "dev")
    return half(load_beir(root / ds), 0 if fit else 1)


def environment(dataset: Any, cfg: Any, like: Any = None) -> Any:
    """Providers over ``dataset``'s cached index for ``cfg``; when that index is missing and ``like`` (a dataset
    whose corpus differs in a few passages: a test set with held-out sentences) has one, it is copied and synced to
    ``dataset``'s corpus, so only the changed passages are embedded (``index_paths(sync=True)``)."""
    import json

    from modular_rag.config import ChromaConfig
    from modular_rag.eval.runner import config_chunker, dataset_providers, index_folder
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    chunker = config_chunker(cfg, dataset.default_chunker)
    folder = index_folder(dataset, cfg.providers, chunker)
    if like is not None and not (folder / "complete.json").exists():
        base = index_folder(like, cfg.providers, chunker)
        if (base / "complete.json").exists() and dataset.fingerprint() != like.fingerprint():
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(base, folder, ignore=shutil.ignore_patterns("complete.json"))
            store = ChromaConfig(path=str(folder), collection="beir")
            env = Providers(cfg.providers.model_copy(update={"vectorstore": store}))
            env.index.sentences.store = False  # retrieval-only flows read no sentence vectors: none are embedded
            summary = index_paths(dataset.corpus_paths, env, chunker=chunker, progress=False, sync=True)
            (folder / "complete.json").write_text(
                json.dumps(
                    {
                        "chunks": summary.index_chunks,
                        "synced_from": base.name,
                        "added": summary.added,
                        "sentences": False,
                    }
                )
            )
            env.close()
    return dataset_providers(dataset, cfg.providers, chunker=chunker, progress=False, sentences=False)


def per_query(
    configs: dict[str, Any],
    dataset: Any,
    metric: str,
    like: Any = None,
    full: dict[str, dict[str, float]] | None = None,
    keep: str = "",
) -> dict[str, np.ndarray]:
    """Each flow's ``metric`` per question of ``dataset`` (in its order); with ``full``, each flow's summary there.
    With ``keep``, the values are kept under that name in the work folder and read back by a later run for the same
    flow config, questions and metric (real questions only: ``--fit`` and the main run share SciFact's training
    claims)."""
    import hashlib
    import json

    from modular_rag.eval.metrics import retrieval_metrics
    from modular_rag.eval.runner import evaluate_flow

    store = WORK / f"per-query-{keep}.json"
    kept = json.loads(store.read_text()) if keep and store.exists() else {}
    out: dict[str, np.ndarray] = {}
    for name, cfg in configs.items():
        key = hashlib.sha1(
            json.dumps(
                [cfg.model_dump(mode="json"), [q.id for q in dataset.queries], metric], sort_keys=True, default=str
            ).encode()
        ).hexdigest()
        if full is None and key in kept:
            out[name] = np.array(kept[key])
            continue
        result = evaluate_flow(cfg, dataset, environment(dataset, cfg, like), name=name)
        docs = {r.qid: r.docs for r in result.records}
        if metric == "all@5":
            values = [
                float(all(d in docs.get(q.id, [])[:5] for d, s in dataset.qrels.get(q.id, {}).items() if s > 0))
                for q in dataset.queries
            ]
        else:
            run = {qid: {d: float(len(ds) - i) for i, d in enumerate(ds)} for qid, ds in docs.items()}
            scores = retrieval_metrics(dataset.qrels, run)
            values = [scores.get(q.id, {}).get(metric, 0.0) for q in dataset.queries]
        out[name] = np.array(values)
        kept[key] = values
        if full is not None:
            full[name] = result.summary()
    if keep:
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(kept))
    return out


def tau(a: dict[str, float], b: dict[str, float]) -> float:
    """Kendall tau-b between the flows' rankings by ``a`` and by ``b``."""
    from scipy.stats import kendalltau

    names = list(a)
    return float(kendalltau([a[n] for n in names], [b[n] for n in names]).statistic)


def apart(real: dict[str, np.ndarray], z: float = 1.96) -> list[tuple[str, str]]:
    """The pairs of flows whose real means differ by more than the questions' noise: the paired difference's mean
    beyond ``z`` standard errors (over the questions)."""
    out = []
    names = list(real)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            d = real[x] - real[y]
            se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else 0.0
            if abs(d.mean()) > z * se and d.mean() != 0:
                out.append((x, y))
    return out


def pair_agreement(a: dict[str, float], b: dict[str, float], pairs: list[tuple[str, str]]) -> float:
    """Over ``pairs``: (pairs ordered alike - pairs ordered oppositely) / pairs (a tie in ``a`` counts 0)."""
    if not pairs:
        return float("nan")
    return sum(float(np.sign(a[x] - a[y]) * np.sign(b[x] - b[y])) for x, y in pairs) / len(pairs)


def regret(pick_by: dict[str, float], real: dict[str, float]) -> float:
    """The real quality lost by taking the flow ``pick_by`` ranks first (its first in order among equals)."""
    pick = max(pick_by, key=lambda n: pick_by[n])
    return real[pick] - max(real.values())


def ceiling(real: dict[str, np.ndarray], pairs: list[tuple[str, str]], splits: int = SPLITS) -> dict[str, float]:
    """How far real questions agree with themselves: over ``splits`` random halvings of the questions, the mean and
    spread of Kendall tau between the halves' rankings, the share with the same top flow, the mean regret of the
    flow one half ranks first on the other half, and the agreement over ``pairs`` (flows apart by more than noise)."""
    rng = np.random.default_rng(0)
    n = len(next(iter(real.values())))
    taus, same, lost, agree = [], [], [], []
    for _ in range(splits):
        order = rng.permutation(n)
        a = {f: float(v[order[: n // 2]].mean()) for f, v in real.items()}
        b = {f: float(v[order[n // 2 :]].mean()) for f, v in real.items()}
        taus.append(tau(a, b))
        same.append(max(a, key=lambda f: a[f]) == max(b, key=lambda f: b[f]))
        lost.append(regret(a, b))
        agree.append(pair_agreement(a, b, pairs))
    return {
        "tau": float(np.mean(taus)),
        "tau_sd": float(np.std(taus)),
        "same": float(np.mean(same)),
        "regret": float(np.mean(lost)),
        "pairs": float(np.nanmean(agree)) if pairs else float("nan"),
    }


def fit(args: argparse.Namespace) -> int:
    """Maker settings compared on fit data only (never the questions the main run reports)."""
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.testset import make_testset

    configs = {n: flow_config(n) for n in FLOWS}
    print(
        f"maker settings on fit data ({', '.join(args.datasets)}): SciFact's training claims, the even half of the "
        f"others' dev questions; {len(configs)} flows (no router); synthetic sets of {args.size}, scored on "
        "their dev split"
    )
    grid = list(FIT_GRID.items())[args.fit_from :]
    rows: dict[str, list[str]] = {label: [] for label, _ in grid}
    for ds in args.datasets:
        metric = METRIC[ds]
        base = load_beir(Path(args.root) / ds)
        real_q = per_query(configs, real_sets(Path(args.root), ds, fit=True), metric, keep=f"{ds}-fit")
        real = {f: float(v.mean()) for f, v in real_q.items()}
        pairs = apart(real_q)
        ceil = ceiling(real_q, pairs)
        print(
            f"\n== {ds} ({metric}), real fit questions: {len(next(iter(real_q.values())))}; "
            + ", ".join(f"{f} {v:.3f}" for f, v in real.items())
            + f"; pairs apart: {len(pairs)}; real half vs "
            f"real half: tau {ceil['tau']:.2f} +- {ceil['tau_sd']:.2f}, regret {ceil['regret']:+.3f}"
        )
        for label, makers in grid:
            out = WORK / "fit" / ds
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            make_testset(Path(args.root) / ds, out, {"makers": makers, "size": args.size})
            syn_q = per_query(configs, load_beir(out), metric, like=base)
            syn = {f: float(v.mean()) for f, v in syn_q.items()}
            t, agree, lost = tau(syn, real), pair_agreement(syn, real, pairs), regret(syn, real)
            rows[label].append(f"{t:.2f}/{agree:.2f}/{lost:+.3f}")
            print(
                f"  {label}: tau {t:.3f}, over pairs apart {agree:.2f}, regret {lost:+.3f}, top "
                f"{max(syn, key=lambda f: syn[f])}, synthetic mean {np.mean(list(syn.values())):.3f} "
                f"({time.perf_counter() - t0:.0f}s)"
            )
    print("\n| maker settings | " + " | ".join(f"{d}: tau / pairs apart / regret" for d in args.datasets) + " |")
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


def _router(ds: str, syn: Path, configs: dict[str, Any], metric: str) -> Any:
    """The learned router over :data:`ROUTES`, trained on the synthetic set's train split (``train-router``)."""
    from modular_rag.config import load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.router import train_router

    training = train_router(
        load_beir(syn, split="train"),
        {n: configs[n] for n in ROUTES},
        WORK / f"router-{ds}",
        quality="all@5" if metric == "all@5" else "recall@5",
    )
    return load_config(training.config_file)


def _tune(ds: str, syn: Path, metric: str, budget: str) -> Path:
    """``modular-rag tune`` on the synthetic set (its train split); the run's best.yaml."""
    out = WORK / f"tune-{ds}"
    shutil.rmtree(out, ignore_errors=True)  # a study left by an earlier set would be continued on this one
    command = [
        str(ROOT / ".venv" / "bin" / "modular-rag"),
        "tune",
        "--dataset",
        str(syn),
        "--out",
        str(out),
        "--budget",
        budget,
        "--objective",
        metric,
        "--max-llm-calls",
        "0",
        "--quiet",
    ]
    space = SPACE[ds]
    if space:
        command += ["--space", str(ROOT / space)]
    subprocess.run(command, check=True, cwd=ROOT)
    return out / "best.yaml"


def tune_only(args: argparse.Namespace) -> int:
    """``tune`` on the sets the last run made (``WORK/<dataset>``), each pick scored on the same real questions."""
    from modular_rag.config import load_config
    from modular_rag.eval.datasets import load_beir

    configs = {n: flow_config(n) for n in FLOWS}
    for ds in args.datasets:
        metric, out = METRIC[ds], WORK / ds
        real = real_sets(Path(args.root), ds, fit=False)
        best_real = max(float(v.mean()) for v in per_query(configs, real, metric, keep=f"{ds}-report").values())
        t0 = time.perf_counter()
        tuned = load_config(_tune(ds, out, metric, args.tune_budget))
        real_tuned = float(per_query({"tuned": tuned}, real, metric)["tuned"].mean())
        print(
            f"{ds}: tune on the synthetic train split of {out} ({args.tune_budget}, "
            f"{(time.perf_counter() - t0) / 60:.0f} min): {tuned.pattern}, real {real_tuned:.3f} "
            f"({real_tuned - best_real:+.3f} against the best of the {len(configs)} fixed flows, {best_real:.3f}; "
            f"{len(load_beir(out, split='train').queries)} synthetic training questions)"
        )
        if args.save:
            for name in ("best.yaml", "report.txt"):
                if (WORK / f"tune-{ds}" / name).exists():
                    shutil.copy(
                        WORK / f"tune-{ds}" / name, ROOT / "benchmarks" / "results" / "testset" / ds / f"tune-{name}"
                    )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.fit:
        return fit(args)
    if args.tune_only:
        return tune_only(args)
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
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        result = make_testset(Path(args.root) / ds, out, {"size": args.size})
        made_s = time.perf_counter() - t0
        base, syn, real = load_beir(Path(args.root) / ds), load_beir(out), real_sets(Path(args.root), ds, fit=False)
        print(
            f"\n== {ds}: {metric}; synthetic dev {len(syn.queries)} questions (made in {made_s:.0f}s: "
            + ", ".join(f"{k} {c.get('kept', 0)}" for k, c in result.counts.items())
            + f"), real: {'dev' if ds == 'scifact' else 'the report half of dev'}, {len(real.queries)} questions"
        )
        if args.save:
            (keep / ds).mkdir(parents=True, exist_ok=True)
            shutil.copy(out / "report.md", keep / ds / "report.md")
        for cfg in configs.values():
            environment(syn, cfg, like=base)  # the set's index before the router trains on it
        flows = {**configs, "router": _router(ds, out, configs, metric)}
        full: dict[str, dict[str, float]] = {}
        syn_q = per_query(flows, syn, metric, like=base)
        real_q = per_query(flows, real, metric, full=full)
        table = {f: {"synthetic": float(syn_q[f].mean()), "real": float(real_q[f].mean())} for f in flows}
        synthetic = {f: v["synthetic"] for f, v in table.items()}
        reals = {f: v["real"] for f, v in table.items()}
        ranked = sorted(table, key=lambda n: -table[n]["real"])
        syn_rank = {n: i + 1 for i, n in enumerate(sorted(table, key=lambda n: -table[n]["synthetic"]))}
        print(f"{'flow':<20} {'synthetic':>9} {'rank':>4} {'real':>7} {'rank':>4}   real recall@5, ms/q")
        for i, n in enumerate(ranked, 1):
            print(
                f"{n:<20} {table[n]['synthetic']:>9.3f} {syn_rank[n]:>4} {table[n]['real']:>7.3f} {i:>4}   "
                f"{full[n]['recall@5']:.3f}, {full[n]['ms']:.0f}"
            )
        t, same = tau(synthetic, reals), max(synthetic, key=lambda f: synthetic[f]) == ranked[0]
        pairs = apart(real_q)
        agree, lost = pair_agreement(synthetic, reals, pairs), regret(synthetic, reals)
        ceil = ceiling(real_q, pairs)
        best_real = reals[ranked[0]]
        print(
            f"Kendall tau {t:.3f}; same top flow: {same}; best by real labels: {ranked[0]} {best_real:.3f}; "
            f"the synthetic top loses {lost:+.3f}"
        )
        print(
            f"flow pairs apart by more than the real questions' noise (paired, 1.96 standard errors): {len(pairs)} "
            f"of {len(flows) * (len(flows) - 1) // 2}; synthetic orders them {agree:.2f} (+1 all alike, -1 all "
            "opposite)"
        )
        print(
            f"ceiling, real half vs real half ({SPLITS} random halvings of these {len(real.queries)} questions): "
            f"tau {ceil['tau']:.2f} +- {ceil['tau_sd']:.2f}, same top {ceil['same']:.0%}, the top of one half loses "
            f"{ceil['regret']:+.3f} on the other, pairs apart ordered {ceil['pairs']:.2f}"
        )
        cross = ""
        if ds == "scifact":
            train_q = per_query(configs, real_sets(Path(args.root), ds, fit=True), metric, keep=f"{ds}-fit")
            train = {f: float(v.mean()) for f, v in train_q.items()}
            dev = {f: reals[f] for f in train}
            cross = f"{tau(train, dev):.2f}"
            print(
                f"real train claims ({len(next(iter(train_q.values())))}) vs real dev, the {len(train)} flows "
                f"without the router (trained on the synthetic set): tau {cross}, same top "
                f"{max(train, key=lambda f: train[f]) == max(dev, key=lambda f: dev[f])}, the train top loses "
                f"{regret(train, dev):+.3f}"
            )
        rec = recommend(syn, list(flows.items()), quality=metric, progress=False)
        assert rec.best is not None
        pick = reals[rec.best.name]
        print(f"recommend on the synthetic set picks {rec.best.name}: real {pick:.3f} ({pick - best_real:+.3f})")
        row = [
            ds,
            metric,
            str(len(real.queries)),
            f"{t:.2f}",
            f"{ceil['tau']:.2f} ± {ceil['tau_sd']:.2f}" + (f"; train vs dev {cross}" if cross else ""),
            f"{agree:.2f} ({len(pairs)})",
            f"{ceil['pairs']:.2f}",
            "yes" if same else "no",
            f"{lost:+.3f}",
            f"{ceil['regret']:+.3f}",
            f"{rec.best.name} {pick:.3f} ({pick - best_real:+.3f})",
        ]
        if not args.skip_tune:
            t0 = time.perf_counter()
            best_file = _tune(ds, out, metric, args.tune_budget)
            tuned = load_config(best_file)
            real_tuned = float(per_query({"tuned": tuned}, real, metric)["tuned"].mean())
            minutes = (time.perf_counter() - t0) / 60
            print(
                f"tune on the synthetic train split ({args.tune_budget}, {minutes:.0f} min): {tuned.pattern}, "
                f"real {real_tuned:.3f} ({real_tuned - best_real:+.3f})"
            )
            row.append(f"{real_tuned:.3f} ({real_tuned - best_real:+.3f})")
            if args.save:
                for name in ("best.yaml", "report.txt"):
                    if (best_file.parent / name).exists():
                        shutil.copy(best_file.parent / name, keep / ds / f"tune-{name}")
        summary.append(row)
    print(
        "\n| dataset | metric | real questions | Kendall tau, synthetic vs real | real half vs real half (mean ± sd) "
        "| pairs apart: synthetic agrees (pairs) | real halves agree | same top | regret of the synthetic top "
        "| regret, real half | recommend (synthetic) -> real"
        + (" | tune (synthetic) -> real |" if not args.skip_tune else " |")
    )
    for row in summary:
        print("| " + " | ".join(row) + " |")
    if args.llm_sample:
        llm_sample(args)
    return 0


def llm_sample(args: argparse.Namespace) -> None:
    """The LLM maker on the local model: what it makes, what the checks drop, how long it takes."""
    from modular_rag.eval.testset import make_testset

    out = WORK / "llm-hotpotqa"
    config = {
        "makers": [{"name": "llm"}],
        "size": args.llm_sample,
        "oversample": 1.0,
        "checks": ["answer_in_passage", "closed_book", "not_verbatim", "dedup"],
        "providers": {"llm": {"name": "local"}},
    }
    t0 = time.perf_counter()
    result = make_testset(Path(args.root) / "hotpotqa", out, config)
    seconds = time.perf_counter() - t0
    print(
        f"\n== LLM maker, local SmolLM2-135M (llama-server), HotpotQA corpus, {args.llm_sample} asked: "
        f"{seconds:.0f}s ({seconds / max(args.llm_sample, 1):.1f}s per question, closed-book check included)"
    )
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
    parser.add_argument("--fit", action="store_true", help="compare maker settings (FIT_GRID) on fit data only")
    parser.add_argument("--fit-from", type=int, default=0, help="start --fit at this entry of FIT_GRID")
    parser.add_argument("--tune-only", action="store_true", help="only tune on the sets the last run made")


if __name__ == "__main__":
    sys.exit(
        common_main(
            "testset.py",
            __doc__ or "",
            run,
            add_arguments,
            "testset-fit.txt"
            if "--fit" in sys.argv
            else "testset-tune.txt"
            if "--tune-only" in sys.argv
            else "testset.txt",
        )
    )
