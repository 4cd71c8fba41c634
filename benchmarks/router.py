"""The learned router on mixed workloads: single-passage questions and HotpotQA's two-passage ones in one BEIR folder.

    .venv/bin/python benchmarks/router.py [--root ../shared/datasets] [--max-cost-ratio 0.7] \
        [--features "question;evidence"] [--save]

Two mixes, each of every dev question of two sets over both corpora, each set split by a seeded hash into a
training half (``train_*`` files) and an evaluation half (the dev files):

* ``nq+hotpotqa``: NQ-open (1,858 questions, all lower case without a question mark) and HotpotQA (350, cased).
  Letter case alone tells the two apart here, which is why the router never sees it.
* ``squad+hotpotqa``: SQuAD (351, cased, with question marks, like HotpotQA's) and HotpotQA: the mix where only
  what a question asks can tell a single-passage question from a multi-hop one.

1. Trains learned routers on each mix's training half (``modular-rag train-router``) over two routes:
   ``configs/hotpotqa-linear.yaml`` (2 retrievals) and ``configs/hotpotqa-multihop.yaml`` (4, no LLM), one per
   feature set of ``--features``: ``question`` (the question alone: it routes before retrieving) and ``evidence``
   (what the shared first hybrid retrieval found: the routed flow retrieves once, then hops only where routed, so a
   question costs 2 or 4 retrievals); the operating point is the best cross-validated all@5 within
   ``--max-cost-ratio`` of the multi-hop route's cost.
2. On each mix's evaluation half: always-linear, always-multi-hop, an oracle that knows which route each question
   needs (the cheapest that reaches the best all@5 on it), and the flow routed by each router (trained on this mix
   and on the other), end to end; and each router's routing accuracy (against the oracle's choice) on the questions
   as asked, lower-cased and title-cased.
3. Prints the targets for every router, on both mixes, trained on either: routed all@5 within 0.02 of
   always-multi-hop at <= 70% of its retrievals.

``--save`` writes the output to ``benchmarks/results/router-mixed.txt``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import main as common_main  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MIXES = {
    "nq+hotpotqa": ("nq_open_oracle", "hotpotqa", "mix-nq"),
    "squad+hotpotqa": ("squad_expmrc", "hotpotqa", "mix-squad"),
}
ROUTES = ("hotpotqa-linear", "hotpotqa-multihop")


def _part_figures(dev: Any, quality: dict[str, float]) -> list[str]:
    """all@5 on each source of the mix."""
    sources = {q.id: q.extra.get("source", "") for q in dev.queries}
    cells = []
    for source in sorted(set(sources.values())):
        ids = [q for q, s in sources.items() if s == source]
        cells.append(f"{sum(quality[q] for q in ids) / len(ids):.3f}")
    return cells


def _accuracy(model: Any, env: Any, config: Any, texts: list[str], truth: list[str]) -> list[str]:
    """Routing accuracy against the oracle's choice on the questions as asked, lower-cased and title-cased (a router
    reading evidence sees each variant's own first retrieval), at the trained cost weight (no budget)."""
    import numpy as np

    from modular_rag.eval.router import first_evidence

    cells = []
    for variant in (texts, [t.lower() for t in texts], [t.title() for t in texts]):
        hits = None
        if model.reads_evidence:
            retrieve = config.operators["retrieve"]
            hits = first_evidence(variant, config, retrieve, env)
        chosen = model.route(env.encoder, variant, hits, getattr(env.index, "links", None))
        cells.append(f"{np.mean(np.asarray(chosen) == np.asarray(truth)):.3f}")
    return cells


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import load_beir, mixed_dataset
    from modular_rag.eval.router import query_quality, train_router
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.tables import format_table
    from operators.routing import RouterModel

    feature_sets = [f for f in args.features.split(";") if f]
    routes = {name: load_config(ROOT / "configs" / f"{name}.yaml") for name in ROUTES}
    data: dict[str, tuple[Any, Any]] = {}
    routers: dict[str, Any] = {}
    mixes = {m: MIXES[m] for m in args.mixes.split(",")}
    for mix, (single, multi, folder) in mixes.items():
        parts = [load_beir(Path(args.root) / name) for name in (single, multi)]
        train, dev = mixed_dataset(
            parts, ROOT / ".modular_rag" / "datasets" / folder, train_fraction=0.5, seed=args.seed
        )
        data[mix] = (train, dev)
        print(f"\n== {mix}: {len(train.queries)} training and {len(dev.queries)} evaluation questions")
        for features in feature_sets:
            key = f"{features} ({mix})"
            print(f"\n-- router reading the {features}, trained on {mix}")
            folder = ROOT / ".modular_rag" / "routers" / f"{mix}-{features.replace(',', '+')}"
            if args.reuse and (folder / "router.json").is_file() and (folder / "routed.yaml").is_file():
                routers[key] = SimpleNamespace(model_file=folder / "router.json", config_file=folder / "routed.yaml")
                print(f"router {key}: reused from {folder} (trained by an earlier run of this command)")
                continue
            routers[key] = r = train_router(
                train,
                routes,
                folder,
                quality="all@5",
                features=features.split(","),
                classes=args.classes,
                seed=args.seed,
                max_cost_ratio=args.max_cost_ratio,
                log=print,
            )
            print(
                f"router {key}: classes {r.classes}, cross-validated route accuracy {r.accuracy:.3f}, question-kind "
                f"accuracy {r.class_accuracy:.3f}; cost weight {r.cost_weight}, l2 {r.l2}"
            )
    checks = []
    for mix, (_, dev) in data.items():
        if args.evaluate and mix not in args.evaluate.split(","):
            continue
        print(f"\n== evaluation half of {mix} ({len(dev.queries)} questions, never seen by any router's training)")
        sources = sorted({q.extra.get("source", "") for q in dev.queries})
        env = None
        runs, configs = {}, {}
        for name in (*ROUTES, *(f"routed {key}" for key in routers)):
            config = routes[name] if name in routes else load_config(routers[name[7:]].config_file)
            configs[name] = config
            env = dataset_providers(
                dev, config.providers, chunker=OperatorSpec(name=dev.default_chunker), progress=False
            )
            env.encoder.clear_cache()  # every flow embeds its questions itself: latencies are comparable
            runs[name] = evaluate_flow(config, dev, env, name=name)
        assert env is not None
        quality = {
            name: {rec.qid: query_quality(rec, dev.qrels[rec.qid], "all@5") for rec in res.records}
            for name, res in runs.items()
        }
        retrievals = {name: float(res.summary()["retrievals"]) for name, res in runs.items()}
        lin, mh = ROUTES
        best = {q.id: max(quality[lin][q.id], quality[mh][q.id]) for q in dev.queries}
        oracle_pick = {q.id: lin if quality[lin][q.id] >= best[q.id] else mh for q in dev.queries}
        oracle_retr = float(np.mean([retrievals[oracle_pick[q]] for q in oracle_pick]))
        rows = []
        texts = [q.text for q in dev.queries]
        truth = [oracle_pick[q.id] for q in dev.queries]
        for name, res in runs.items():
            s = res.summary()
            share = f"{s['retrievals']:.2f} ({s['retrievals'] / retrievals[mh]:.0%})"
            accuracy = ["–", "–", "–"]
            if name.startswith("routed"):
                model = RouterModel.load(routers[name[7:]].model_file)
                accuracy = _accuracy(model, env, configs[name], texts, truth)
            rows.append(
                [name, f"{s['all@5']:.3f}", *_part_figures(dev, quality[name]), share, f"{s['ms']:.0f}", *accuracy]
            )
        rows.append(
            [
                "oracle",
                f"{np.mean(list(best.values())):.3f}",
                *[
                    f"{np.mean([best[q.id] for q in dev.queries if q.extra.get('source') == src]):.3f}"
                    for src in sources
                ],
                f"{oracle_retr:.2f} ({oracle_retr / retrievals[mh]:.0%})",
                "–",
                "–",
                "–",
                "–",
            ]
        )
        print(
            format_table(
                [
                    "config",
                    "all@5",
                    *[f"all@5 {s}" for s in sources],
                    "retrievals/q (of multi-hop)",
                    "ms/q",
                    "routing acc.",
                    "lower-cased",
                    "title-cased",
                ],
                rows,
            )
        )
        top = runs[mh].summary()
        for key in routers:
            s = runs[f"routed {key}"].summary()
            met = s["all@5"] >= top["all@5"] - 0.02 - 1e-9 and s["retrievals"] <= 0.7 * top["retrievals"] + 1e-9
            checks.append(
                [
                    f"{mix}, router {key}",
                    "yes" if met else "NO",
                    f"{s['all@5']:.3f} vs {top['all@5']:.3f} ({s['all@5'] - top['all@5']:+.3f})",
                    f"{s['retrievals']:.2f} vs {top['retrievals']:.2f} ({s['retrievals'] / top['retrievals']:.0%})",
                ]
            )
    print()
    print(
        format_table(
            [
                "evaluation half, router (features, trained on)",
                "within 0.02 at <= 70%",
                "all@5 vs multi-hop",
                "retrievals vs multi-hop",
            ],
            checks,
            max_width=100,
        )
    )
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-cost-ratio",
        type=float,
        default=0.7,
        help="the routers' cost ceiling, a share of the multi-hop route's (0.7)",
    )
    parser.add_argument(
        "--features",
        default="question;evidence",
        help="the routers' feature sets, ';' between routers, ',' within one (question;evidence)",
    )
    parser.add_argument(
        "--classes",
        default=None,
        choices=["auto", "passages", "outcome", "both"],
        help="the routers' kinds of questions (default: train-router's, both with evidence; auto: cross-validation "
        "chooses)",
    )
    parser.add_argument("--mixes", default=",".join(MIXES), help=f"the mixes ({','.join(MIXES)})")
    parser.add_argument(
        "--reuse", action="store_true", help="reuse the routers an earlier run saved under .modular_rag/routers"
    )
    parser.add_argument("--evaluate", default="", help="only these mixes' evaluation halves (default: every mix)")
    parser.add_argument("--seed", type=int, default=0)


def main() -> int:
    return common_main("router.py", __doc__ or "", run, _arguments, "router-mixed.txt")


if __name__ == "__main__":
    raise SystemExit(main())
