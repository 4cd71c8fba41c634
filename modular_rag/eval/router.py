"""Train the learned router (``modular-rag train-router``): run every candidate flow on the training questions, fit per
flow a logistic regression predicting its quality on a question (from the question's embedding and cheap lexical
features), and choose on held-out training questions how much cost counts against expected quality. Each question's
label (for the reported accuracy) is the cheapest flow that reached the best quality on it.

The training split is divided into fit and validation parts (seeded); the regularisation and the cost weight are
chosen on validation, then the model is fitted again on the whole training split. Nothing here reads the split the
flows are finally reported on (``modular-rag eval`` on dev does that).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from modular_rag.config import FlowConfig, OperatorSpec
from modular_rag.errors import ConfigError
from modular_rag.eval.datasets import BeirDataset
from modular_rag.eval.runner import FlowResult, QueryRecord, dataset_providers, evaluate_flow

__all__ = ["query_quality", "RouterTraining", "train_router", "fit_logistic", "routed_config"]


def query_quality(record: QueryRecord, relevant: Mapping[str, int], metric: str) -> float:
    """One question's quality: ``all@5`` (every relevant document in the first 5 returned), ``recall@5``, or an
    answer metric of the record (``f1``, ``em``, ``contains``)."""
    gold = {d for d, s in relevant.items() if s > 0}
    if metric in ("all@5", "recall@5"):
        top = set(record.docs[:5])
        if not gold:
            return 0.0
        return float(gold <= top) if metric == "all@5" else len(gold & top) / len(gold)
    if metric in ("f1", "em", "contains"):
        return float(getattr(record, metric))
    raise ConfigError("--quality", f"unknown quality {metric!r}; use all@5, recall@5, f1, em or contains")


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, float]:
    """Logistic regression with an L2 penalty on the weights (L-BFGS), on targets in [0, 1] (soft targets allowed):
    ``(weights d, bias)``."""
    from scipy.optimize import minimize

    n, d = x.shape

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:d], theta[d]
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w + b, -30.0, 30.0)))
        value = -float(np.sum(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))) / n + l2 * float(w @ w)
        grad = np.concatenate([x.T @ (p - y) / n + 2 * l2 * w, [float(np.sum(p - y)) / n]])
        return value, grad

    theta = minimize(loss, np.zeros(d + 1), jac=True, method="L-BFGS-B", options={"maxiter": 500}).x
    return theta[:d], float(theta[d])


def _fit_routes(x: np.ndarray, targets: np.ndarray, l2: float) -> tuple[np.ndarray, np.ndarray]:
    """One logistic regression per route (column of ``targets``): ``(weights k x d, bias k)``."""
    fits = [fit_logistic(x, targets[:, k], l2) for k in range(targets.shape[1])]
    return np.vstack([w for w, _ in fits]), np.asarray([b for _, b in fits])


@dataclass
class RouterTraining:
    """What ``train_router`` measured: per config its quality and cost on the training questions, the validation
    figures of the chosen router next to each config's, and where it wrote the model."""

    routes: list[str]
    costs: dict[str, float]
    labels: dict[str, int]
    l2: float
    cost_weight: float
    validation: dict[str, dict[str, float]]
    accuracy: float
    model_file: Path
    config_file: Path
    grid: list[dict[str, float]] = field(default_factory=list)


def _split(ids: Sequence[str], fraction: float, seed: int) -> set[str]:
    """A seeded share of the ids (by hash), for validation."""
    order = sorted(ids, key=lambda q: hashlib.sha256(f"router:{seed}:{q}".encode()).hexdigest())
    return set(order[: max(1, round(len(order) * fraction))])


def routed_config(routes: Mapping[str, FlowConfig], model_file: Path, fallback: str, name: str) -> dict[str, Any]:
    """A conditional flow config routing between the candidate flows with the learned router (self-contained: the
    first route's providers are the flow's)."""
    first = next(iter(routes.values()))
    return {
        "pattern": "conditional",
        "name": name,
        "providers": first.to_dict()["providers"],
        "operators": {"route": {"name": "learned", "params": {"model": str(model_file)}}},
        "params": {"fallback": fallback, "routes": {
            r: {"description": cfg.name or r, "flow": {k: v for k, v in cfg.to_dict().items() if k != "providers"}}
            for r, cfg in routes.items()}},
    }  # fmt: skip


def train_router(
    dataset: BeirDataset,
    configs: Mapping[str, FlowConfig],
    out: str | Path,
    *,
    quality: str = "all@5",
    validation: float = 0.3,
    seed: int = 0,
    max_cost_ratio: float | None = 0.6,
    max_quality_loss: float | None = None,
    progress: bool = False,
    log: Any = None,
) -> RouterTraining:
    """Label, fit, choose and save a learned router over the candidate flows.

    Args:
        dataset: The training split (never the one reported on).
        configs: Route name -> candidate flow config (cheapest first is not required: costs are measured).
        out: Folder for ``router.json`` and ``routed.yaml``.
        quality: What a route must achieve for a question (:func:`query_quality`).
        validation: Share of the training questions held out to choose the regularisation and the cost weight.
        seed: Seeds that split.
        max_cost_ratio: The operating point chosen on validation is the best quality whose mean cost is at most
            this share of the costliest flow's (when ``max_quality_loss`` is not given).
        max_quality_loss: Instead, the cheapest operating point whose validation quality is within this of the best
            single flow's.
        progress: Progress bars while the flows run.
        log: Receives one line per step.

    Returns:
        The measurements and the files written.
    """
    from modular_rag.tables import format_table
    from operators.routing import RouterModel, lexical_features

    say = log or (lambda line: None)
    names = list(configs)
    if len(names) < 2:
        raise ConfigError("--config", "a router needs at least two candidate flows")
    results: dict[str, FlowResult] = {}
    env = None
    for name, config in configs.items():
        env = dataset_providers(dataset, config.providers, chunker=OperatorSpec(name=dataset.default_chunker),
                                progress=progress, log=say)  # fmt: skip
        say(f"running {name} on {len(dataset.queries)} training questions")
        results[name] = evaluate_flow(config, dataset, env, name=name, progress=progress)
    assert env is not None
    qids = [q.id for q in dataset.queries]
    quality_of = {n: {r.qid: query_quality(r, dataset.qrels.get(r.qid, {}), quality) for r in res.records}
                  for n, res in results.items()}  # fmt: skip
    costs = {n: float(res.summary()["retrievals"]) + float(res.summary()["llm_calls"]) for n, res in results.items()}
    ms = {n: float(res.summary()["ms"]) for n, res in results.items()}
    by_cost = sorted(names, key=lambda n: (costs[n], ms[n]))
    labels = {}
    for q in qids:
        top = max(quality_of[n][q] for n in names)
        labels[q] = names.index(next(n for n in by_cost if quality_of[n][q] >= top))
    vectors = env.encoder.encode([q.text for q in dataset.queries]).astype(np.float64)
    lexical = np.asarray([lexical_features(q.text) for q in dataset.queries])
    mean, scale = lexical.mean(axis=0), lexical.std(axis=0) + 1e-6
    x = np.hstack([vectors, (lexical - mean) / scale])
    y = np.asarray([labels[q] for q in qids])
    targets = np.asarray([[quality_of[n][q] for n in names] for q in qids])
    held = _split(qids, validation, seed)
    val = np.asarray([q in held for q in qids])

    def measure(choice: np.ndarray, mask: np.ndarray) -> dict[str, float]:
        ids = [q for q, m in zip(qids, mask, strict=True) if m]
        picks = [names[c] for c in choice]
        return {"quality": float(np.mean([quality_of[p][q] for p, q in zip(picks, ids, strict=True)])),
                "cost": float(np.mean([costs[p] for p in picks]))}  # fmt: skip

    singles = {n: {"quality": float(np.mean([quality_of[n][q] for q in held])), "cost": costs[n]} for n in names}
    best_single = max(v["quality"] for v in singles.values())
    grid = []
    for l2 in (1e-3, 1e-2, 1e-1):
        w, b = _fit_routes(x[~val], targets[~val], l2)
        model = RouterModel(names, w, b, mean, scale, costs)
        probs = model.probabilities(x[val])
        for cost_weight in np.round(np.arange(0.0, 1.001, 0.02), 2).tolist():
            model.cost_weight = cost_weight
            got = measure(model.decide(probs), val)
            grid.append({"l2": l2, "cost_weight": cost_weight, **got})
    if max_quality_loss is not None:
        within = [g for g in grid if g["quality"] >= best_single - max_quality_loss]
        pick = lambda pool: min(pool, key=lambda g: (g["cost"], -g["quality"]))  # noqa: E731
    else:
        ceiling = (max_cost_ratio if max_cost_ratio is not None else 1.0) * max(costs.values())
        within = [g for g in grid if g["cost"] <= ceiling + 1e-9]
        pick = lambda pool: max(pool, key=lambda g: (g["quality"], -g["cost"]))  # noqa: E731
    chosen = pick(within) if within else max(grid, key=lambda g: (g["quality"], -g["cost"]))
    say(f"chosen on validation: l2 {chosen['l2']}, cost weight {chosen['cost_weight']}: quality "
        f"{chosen['quality']:.3f} at cost {chosen['cost']:.2f} (best single flow {best_single:.3f})")  # fmt: skip
    w, b = _fit_routes(x[~val], targets[~val], chosen["l2"])
    check = RouterModel(names, w, b, mean, scale, costs, chosen["cost_weight"])
    accuracy = float(np.mean(check.decide(check.probabilities(x[val])) == y[val]))
    w, b = _fit_routes(x, targets, chosen["l2"])  # the shipped model learns from every training question
    model = RouterModel(names, w, b, mean, scale, costs, chosen["cost_weight"],
                        embeddings=configs[names[0]].providers.embeddings.model_dump_json(),
                        trained={"dataset": dataset.name, "split": dataset.split, "questions": len(qids),
                                 "quality": quality, "labels": {n: int(np.sum(y == i)) for i, n in enumerate(names)},
                                 "validation": {"questions": int(val.sum()), "chosen": chosen, "singles": singles,
                                                "accuracy": accuracy}})  # fmt: skip
    folder = Path(out)
    model_file = model.save(folder)
    import yaml

    config_file = folder / "routed.yaml"
    routed = routed_config(configs, model_file.resolve(), fallback=by_cost[0], name="routed")
    config_file.write_text(yaml.safe_dump(routed, sort_keys=False), encoding="utf-8")
    rows = [[n, f"{singles[n]['quality']:.3f}", f"{singles[n]['cost']:.2f}"] for n in names]
    rows.append(["routed", f"{chosen['quality']:.3f}", f"{chosen['cost']:.2f}"])
    say(format_table(["on validation", quality, "retrievals + LLM calls / q"], rows))
    return RouterTraining(names, costs, {n: int(np.sum(y == i)) for i, n in enumerate(names)}, chosen["l2"],
                          chosen["cost_weight"], {**singles, "routed": {"quality": chosen["quality"],
                                                                         "cost": chosen["cost"]}},
                          accuracy, model_file, config_file, grid)  # fmt: skip
