"""How much the blind figures of the learned router could move, and what its budget does: ``train-router``'s fit and
the routed flow's budget replayed on the routes' per-question results, over many seeded splits.

    .venv/bin/python benchmarks/router_replay.py [--outer 10] [--inner 8] [--save]

Runs always-linear and always-multi-hop once on the 701 SQuAD + HotpotQA dev questions of
``benchmarks/router_blind.py``'s mix and reads every question's features (the normalised question's embedding, its
wording, the first retrieval's evidence), then replays what ``train_router`` does with them (the ``both`` kinds, the
L2 penalties and cost weights chosen by 5-fold cross-validation under the cost ceiling, the refit on every training
question) and what the routed flow does (the learned router's decisions under
:class:`~modular_rag.route_budget.RouteBudget`, questions in a seeded interleaved order). The routed flow retrieves
once and each route starts from those candidates, so a routed question scores as its route did: on
``router_blind.py``'s split (seed 58) the replay gives its end-to-end figures.

* ``--outer N``: N other seeded splits of the 701 questions into 401 training and 300 held-out ones (as
  ``router_blind.py`` splits them), the old defaults (question, 0.6) and the new (question + evidence, 0.7).
* ``--inner N``: on ``router_blind.py``'s training part only (401 questions), N seeded 3-fold splits (train on two
  thirds, score on the third): the budget as it is (the cost weight never below the trained one) against a budget
  allowed to lower it to spend its whole share, with and without its cap on what was spent.

``--save`` writes the output to ``benchmarks/results/router-replay.txt``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import main as common_main  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROUTES = ("hotpotqa-linear", "hotpotqa-multihop")


def _collect(root: str) -> dict[str, np.ndarray]:
    """Every question of the blind mix (seed 58): both routes' all@5, retrievals, features, source, qrels size."""
    from router_blind import blind_mix

    from modular_rag.config import OperatorSpec, load_config
    from modular_rag.eval.datasets import load_beir
    from modular_rag.eval.router import first_evidence, query_quality, shared_retrieval
    from modular_rag.eval.runner import dataset_providers, evaluate_flow
    from modular_rag.evidence import evidence_features
    from modular_rag.router_model import lexical_features
    from modular_rag.text import normalize_question

    folder, _, _ = blind_mix(root, 58)
    routes = {name: load_config(ROOT / "configs" / f"{name}.yaml") for name in ROUTES}
    shared = shared_retrieval(routes)
    columns: dict[str, list[Any]] = {}
    for split in ("train", "dev"):
        data = load_beir(folder, split=split)
        env = None
        quality, cost = {}, {}
        for name, config in routes.items():
            env = dataset_providers(data, config.providers, chunker=OperatorSpec(name=data.default_chunker))
            result = evaluate_flow(config, data, env, name=name)
            quality[name] = {r.qid: query_quality(r, data.qrels[r.qid], "all@5") for r in result.records}
            cost[name] = {r.qid: float(r.retrievals) for r in result.records}
        assert env is not None
        texts = [q.text for q in data.queries]
        hits = first_evidence(texts, routes[ROUTES[0]], shared[0], env)
        links = getattr(env.index, "links", None)
        ids = [q.id for q in data.queries]
        rows = {
            "embedding": env.encoder.encode([normalize_question(t) for t in texts]).astype(np.float64),
            "wording": [lexical_features(t) for t in texts],
            "evidence": [evidence_features(t, h, links) for t, h in zip(texts, hits, strict=True)],
            "quality": [[quality[n][i] for n in ROUTES] for i in ids],
            "cost": [[cost[n][i] for n in ROUTES] for i in ids],
            "relevant": [sum(1 for s in data.qrels[i].values() if s > 0) for i in ids],
            "source": [q.extra.get("source", "") for q in data.queries],
            "id": ids,
            "held_out": [split == "dev"] * len(ids),
        }
        for key, value in rows.items():
            columns.setdefault(key, []).extend(list(value))  # type: ignore[call-overload]
    return {key: np.asarray(value) for key, value in columns.items()}


def _rows(data: dict[str, np.ndarray], blocks: tuple[str, ...], norm: Any = None) -> tuple[np.ndarray, Any]:
    """Feature rows as train_router builds them (standardised wording and evidence, with the training's moments)."""
    wording, evidence = data["wording"], data["evidence"]
    if norm is None:
        norm = (wording.mean(0), wording.std(0) + 1e-6, evidence.mean(0), evidence.std(0) + 1e-6)
    parts = []
    if "question" in blocks:
        parts.append(data["embedding"])
    parts.append((wording - norm[0]) / norm[1])
    if "evidence" in blocks:
        parts.append((evidence - norm[2]) / norm[3])
    return np.hstack(parts), norm


def _fit(data: dict[str, np.ndarray], blocks: tuple[str, ...], kind: str, ratio: float) -> dict[str, Any]:
    """train_router's choice and refit on these questions."""
    from modular_rag.eval.router import question_classes
    from modular_rag.eval.router_fit import choose_operating_point, fit_softmax
    from modular_rag.router_model import softmax

    x, norm = _rows(data, blocks)
    targets = data["quality"]
    costs = dict(zip(ROUTES, data["cost"].mean(axis=0).tolist(), strict=True))
    penalty = np.array([costs[r] for r in ROUTES]) / max(costs.values())
    labels = [ROUTES[0] if t[0] >= t.max() else ROUTES[1] for t in targets]
    fold = np.asarray([int(hashlib.sha256(f"router:0:{q}".encode()).hexdigest(), 16) % 5 for q in data["id"]])

    def per_class(t: np.ndarray, onehot: np.ndarray) -> np.ndarray:
        counts = onehot.sum(axis=0)
        per = (t.T @ onehot) / np.where(counts > 0, counts, 1.0)
        return np.where(counts[None, :] > 0, per, t.mean(axis=0)[:, None])

    grid, onehots, held = [], {}, {}
    for name, kinds in question_classes(list(data["relevant"]), labels, kind).items():  # type: ignore[arg-type]
        classes = sorted(set(kinds))
        onehot = onehots[name] = np.asarray([[float(k == c) for c in classes] for k in kinds])
        for l2 in (1e-3, 1e-2, 1e-1):
            expected = np.zeros_like(targets)
            for f in range(5):
                w, b = fit_softmax(x[fold != f], onehot[fold != f], l2)
                expected[fold == f] = (
                    softmax(x[fold == f] @ w.T + b) @ per_class(targets[fold != f], onehot[fold != f]).T
                )
            held[name, l2] = expected
            for weight in np.round(np.arange(0.0, 1.0005, 0.005), 3).tolist():
                choice = np.argmax(expected - weight * penalty, axis=1)
                grid.append(
                    {
                        "classes": name,
                        "l2": l2,
                        "cost_weight": weight,
                        "quality": float(targets[np.arange(len(choice)), choice].mean()),
                        "cost": float(np.mean([costs[ROUTES[c]] for c in choice])),
                    }
                )
    best = max(float(v) for v in targets.mean(axis=0))
    chosen = choose_operating_point(grid, costs, best, max_cost_ratio=ratio, max_quality_loss=None)
    onehot = onehots[str(chosen["classes"])]
    w, b = fit_softmax(x, onehot, float(chosen["l2"]))
    return {
        "w": w,
        "b": b,
        "q": per_class(targets, onehot),
        "norm": norm,
        "blocks": blocks,
        "chosen": chosen,
        "cross_validated": held[str(chosen["classes"]), float(chosen["l2"])],
    }


def _serve(model: dict[str, Any], data: dict[str, np.ndarray], share: float, floor: float | None, cap: bool) -> Any:
    """The routed flow over ``data`` in its order: each question's route under the budget; its all@5 and retrievals."""
    from modular_rag.route_budget import RouteBudget
    from modular_rag.router_model import softmax

    x, _ = _rows(data, model["blocks"], model["norm"])
    expected = softmax(x @ model["w"].T + model["b"]) @ model["q"].T
    costs = dict(zip(ROUTES, data["cost"].mean(axis=0).tolist(), strict=True))
    budget = RouteBudget(ROUTES, costs, share, model["chosen"]["cost_weight"] if floor is None else floor)
    chosen = []
    for row in expected:
        if cap:
            chosen.append(budget.decide(row)[0])
        else:  # the cost weight the budget would take, without its cap on what the decisions taken spent
            budget.rows.append(np.asarray(row))
            weight = budget.weight(np.vstack(budget.rows)) if len(budget.rows) >= budget.warm else budget.floor
            chosen.append(int(np.argmax(row - weight * budget.penalty)))
    pick = np.asarray(chosen)
    n = np.arange(len(pick))
    return data["quality"][n, pick], data["cost"][n, pick]


def _subset(data: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    return {key: value[index] for key, value in data.items()}


def _split(data: dict[str, np.ndarray], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """401 training and 300 held-out indexes, per source by a seeded hash (as mixed_dataset), held-out interleaved."""
    from router_blind import TRAIN_FRACTION

    train, held = [], []
    for source in sorted(set(data["source"].tolist())):
        mine = [i for i in range(len(data["id"])) if data["source"][i] == source]
        mine.sort(key=lambda i: hashlib.sha256(f"{source}:{data['id'][i]}:{seed}".encode()).hexdigest())
        cut = round(len(mine) * TRAIN_FRACTION)
        train += mine[:cut]
        held += mine[cut:]
    held.sort(key=lambda i: hashlib.sha256(f"order:{data['id'][i]}:{seed}".encode()).hexdigest())
    return np.asarray(train), np.asarray(held)


def _auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The area under the ROC curve of ``scores`` for ``labels`` (ties count half)."""
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return float("nan")
    return float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))


def _diagnose(data: dict[str, np.ndarray], blind: dict[str, np.ndarray], routers: dict[str, Any]) -> None:
    """Why a router under-hops: how its expected gain of the hop ranks and measures the gain, on the held-out part
    (diagnosis only: nothing is chosen by it) and in cross-validation on the training part; the link features'
    coverage on the training part."""
    from modular_rag.evidence import EVIDENCE_NAMES
    from modular_rag.router_model import softmax
    from modular_rag.tables import format_table

    train, held = _subset(data, blind["train"]), _subset(data, blind["held"])
    rows = []
    for name, (blocks, kind, ratio) in routers.items():
        model = _fit(train, blocks, kind, ratio)
        for label, part in (("held-out", held), ("training, cross-validated", train)):
            x, _ = _rows(part, blocks, model["norm"])
            expected = (
                softmax(x @ model["w"].T + model["b"]) @ model["q"].T if part is held else model["cross_validated"]
            )
            gain = part["quality"][:, 1] - part["quality"][:, 0]
            guess = expected[:, 1] - expected[:, 0]
            hot = part["source"] == "hotpotqa"
            rows.append(
                [
                    name,
                    label,
                    f"{_auc(gain[hot] > 0, guess[hot]):.2f}",
                    f"{guess[hot].mean():.3f} / {gain[hot].mean():.3f}",
                    f"{guess[~hot].mean():.3f} / {gain[~hot].mean():.3f}",
                    f"{model['chosen']['cost_weight']}",
                ]
            )
    print(
        format_table(
            [
                "router",
                "questions",
                "AUC: expected gain, hop gains (HotpotQA)",
                "HotpotQA: expected / actual gain",
                "SQuAD: expected / actual gain",
                "cost weight",
            ],
            rows,
        )
    )
    gain = train["quality"][:, 1] - train["quality"][:, 0]
    hot = train["source"] == "hotpotqa"
    rows = []
    for i, name in enumerate(EVIDENCE_NAMES[-5:], start=len(EVIDENCE_NAMES) - 5):
        value = train["evidence"][:, i]
        rows.append(
            [
                name,
                f"{np.mean(value[hot] > 0):.2f}",
                f"{np.mean(value[~hot] > 0):.2f}",
                f"{_auc(gain[hot] > 0, value[hot]):.2f}",
            ]
        )
    print(
        f"link features on the training part (the hop gains on {int(np.sum(gain[hot] > 0))} of {int(hot.sum())} "
        f"HotpotQA questions there, on {int(np.sum(gain[~hot] > 0))} of {int((~hot).sum())} SQuAD ones)"
    )
    print(format_table(["feature", "non-zero: HotpotQA", "SQuAD", "AUC, hop gains (HotpotQA)"], rows))


def run(args: argparse.Namespace) -> int:
    from modular_rag.tables import format_table

    data = _collect(args.root)
    routers = {
        "old defaults (question, 0.6)": (("question",), "auto", 0.6),
        "defaults (question + evidence, 0.7)": (
            ("question", "evidence"),
            "both",
            0.7,
        ),
    }
    blind = {"train": np.flatnonzero(~data["held_out"]), "held": np.flatnonzero(data["held_out"])}
    rows = []
    for name, (blocks, kind, ratio) in routers.items():
        model = _fit(_subset(data, blind["train"]), blocks, kind, ratio)
        held = _subset(data, blind["held"])
        quality, cost = _serve(model, held, ratio, None, True)
        top = held["quality"][:, 1].mean()
        rows.append([name, f"{quality.mean():.3f} ({quality.mean() - top:+.3f})", f"{cost.mean() / 4:.0%}"])
    print("\nreplay of router_blind.py's split (seed 58; its end-to-end figures are in router-blind.txt)")
    print(format_table(["router", "held-out all@5 (vs multi-hop)", "retrievals (of multi-hop)"], rows))
    _diagnose(data, blind, routers)
    if args.outer:
        print(f"\n{args.outer} other seeded splits of the 701 questions (401 training, 300 held out)")
        rows = []
        for name, (blocks, kind, ratio) in routers.items():
            deltas, shares = [], []
            for seed in range(1, args.outer + 1):
                train_index, held_index = _split(data, seed)
                model = _fit(_subset(data, train_index), blocks, kind, ratio)
                part = _subset(data, held_index)
                quality, cost = _serve(model, part, ratio, None, True)
                deltas.append(quality.mean() - part["quality"][:, 1].mean())
                shares.append(cost.mean() / part["cost"][:, 1].mean())
            d = np.asarray(deltas)
            rows.append(
                [
                    name,
                    f"{d.mean():+.3f} ({d.min():+.3f} to {d.max():+.3f})",
                    f"{int(np.sum(d >= -0.02 - 1e-9))} of {len(d)}",
                    f"{min(shares):.0%}-{max(shares):.0%}",
                ]
            )
        print(format_table(["router", "all@5 vs multi-hop: mean (range)", "within 0.02", "retrievals"], rows))
    if args.inner:
        print(f"\nthe training part only (401): {args.inner} seeded 3-fold splits, defaults, budgets compared")
        training = _subset(data, blind["train"])
        variants = {
            "budget as is (weight >= trained)": (None, True),
            "budget may lower the weight": (0.0, True),
            "budget may lower the weight, no cap": (0.0, False),
        }
        scores: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
        for seed in range(args.inner):
            fold = np.asarray(
                [int(hashlib.sha256(f"inner:{seed}:{q}".encode()).hexdigest(), 16) % 3 for q in training["id"]]
            )
            for k in range(3):
                model = _fit(_subset(training, np.flatnonzero(fold != k)), ("question", "evidence"), "both", 0.7)
                part = _subset(training, np.flatnonzero(fold == k))
                for name, (floor, cap) in variants.items():
                    quality, cost = _serve(model, part, 0.7, floor, cap)
                    scores[name].append((quality.mean() - part["quality"][:, 1].mean(), cost.mean() / 4))
        base = np.asarray(scores["budget as is (weight >= trained)"])
        rows = []
        for name, s in scores.items():
            a = np.asarray(s)
            diff = a[:, 0] - base[:, 0]
            rows.append(
                [
                    name,
                    f"{a[:, 0].mean():+.3f}",
                    f"{diff.mean():+.3f} ± {diff.std() / np.sqrt(len(diff)):.3f}",
                    f"{int(np.sum(a[:, 0] >= -0.02 - 1e-9))} of {len(a)}",
                    f"{a[:, 1].mean():.0%} (max {a[:, 1].max():.0%})",
                ]
            )
        print(format_table(["budget", "all@5 vs multi-hop", "vs as is", "within 0.02", "retrievals"], rows))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--outer", type=int, default=10, help="other seeded splits of the 701 questions (10)")
    parser.add_argument("--inner", type=int, default=8, help="seeded 3-fold splits of the training part (8)")


def main() -> int:
    return common_main("router_replay.py", __doc__ or "", run, _arguments, "router-replay.txt")


if __name__ == "__main__":
    raise SystemExit(main())
