"""Train the learned router (``modular-rag train-router``), in the manner of Adaptive-RAG: run every candidate flow
on the training questions, learn to tell what kind of question each is, and measure what each flow achieves for each
kind; at run time a route's expected quality is its quality per kind weighted by the question's kind probabilities.

The kinds (``classes``) are, by default, how many relevant passages a training question has in the qrels: one, or
two and more (``passages``): a property of the question's information need, which its wording shows (Adaptive-RAG
labels the questions no strategy answers by the same inductive bias: single-hop or multi-hop). When every training
question has one relevant passage, the kinds are the routes themselves (``outcome``): a question's kind is the
cheapest flow that reached the best quality on it, Adaptive-RAG's own labels. The classifier is a softmax regression
over the embedding of the normalised question (:func:`modular_rag.text.normalize_question`: no letter case, no
punctuation) and case-free lexical features, so a mix whose sources differ by letter case cannot teach it case.

With ``features`` ``evidence`` (by default, with ``question``, when the candidate flows share a first retrieval)
the classifier also reads what the first retrieval found (:mod:`modular_rag.evidence`): the candidate flows must be
linear flows making the same first retrieval (up to its ``k``); the routed flow then retrieves once before the
router, and each route starts from those candidates (``retrieve: given``), so a route that hops pays only the hop.

The L2 penalty, the cost weight and (under ``auto``) the kinds of questions are chosen by k-fold cross-validation over
the training questions (every question is scored by a model that did not see it), then the model is fitted again on
all of them. Nothing here reads the split the flows are finally reported on (``modular-rag eval`` on dev does that).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from modular_rag.config import FlowConfig, OperatorSpec
from modular_rag.errors import ConfigError
from modular_rag.eval.datasets import BeirDataset
from modular_rag.eval.router_fit import choose_operating_point, fit_logistic, fit_softmax
from modular_rag.eval.runner import FlowResult, QueryRecord, dataset_providers, evaluate_flow

__all__ = [
    "query_quality",
    "RouterTraining",
    "train_router",
    "fit_logistic",
    "fit_softmax",
    "routed_config",
    "question_classes",
    "choose_operating_point",
    "shared_retrieval",
    "first_evidence",
    "DEFAULT_FEATURES",
]

DEFAULT_FEATURES = ("question", "evidence")
"""What ``train-router`` reads by default: the question and its first retrieval's evidence (the question alone when
the candidate flows share no first retrieval)."""


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


ClassKind = Literal["auto", "passages", "outcome", "both"]


def question_classes(relevant: Sequence[int], labels: Sequence[str], kind: ClassKind = "auto") -> dict[str, list[str]]:
    """Each training question's kind, under each definition to try.

    Args:
        relevant: How many relevant passages each question has (from the qrels).
        labels: Each question's cheapest route that reached the best quality.
        kind: ``passages`` (one passage / two and more), ``outcome`` (the label), ``both`` (the pair: a question
            of several passages that the single shot already answers is a kind of its own), or ``auto``: all three,
            for cross-validation to choose (outcome alone when every question has one relevant passage).

    Returns:
        Definition -> class per question.
    """
    passages = ["1 passage" if r <= 1 else "2+ passages" for r in relevant]
    both = [f"{p}, {label}" for p, label in zip(passages, labels, strict=True)]
    if kind == "passages":
        return {"passages": passages}
    if kind == "outcome" or len(set(passages)) < 2:
        return {"outcome": list(labels)}
    if kind == "both":
        return {"both": both}
    return {"passages": passages, "outcome": list(labels), "both": both}


def shared_retrieval(configs: Mapping[str, FlowConfig]) -> tuple[OperatorSpec, dict[str, int]]:
    """The first retrieval every candidate flow makes, for a router that decides from its evidence.

    Returns:
        The shared retrieval (with the largest ``k`` of the candidates') and each candidate's own ``k``.

    Raises:
        ConfigError: If a candidate is not a linear flow, rewrites the query first, or retrieves otherwise than the
            others (another operator, or other params than ``k``).
    """
    specs: dict[str, OperatorSpec] = {}
    for name, config in configs.items():
        slots = config.operators
        rewrite = slots.get("rewrite")
        if (
            config.pattern != "linear"
            or isinstance(slots.get("retrieve"), list)
            or (rewrite is not None and (isinstance(rewrite, list) or rewrite.name != "none"))
        ):
            raise ConfigError(
                f"--config {name}",
                "evidence features need candidate flows that retrieve first: linear "
                "flows with rewrite: none and one retrieve operator (so the router can decide after "
                "their shared first retrieval); use --features question for other flows",
            )
        spec = slots.get("retrieve")
        specs[name] = spec if isinstance(spec, OperatorSpec) else OperatorSpec(name="hybrid")
    ks = {name: int(spec.params.get("k", 10)) for name, spec in specs.items()}
    bare = {name: (spec.name, {k: v for k, v in spec.params.items() if k != "k"}) for name, spec in specs.items()}
    first = next(iter(bare.values()))
    differ = [name for name, b in bare.items() if b != first]
    if differ:
        raise ConfigError(
            "--config",
            f"evidence features need one first retrieval shared by every candidate flow (up to its k): "
            f"{', '.join(differ)} retrieve otherwise than {next(iter(bare))} ({first[0]} {first[1]}); align their "
            "retrieve operators or use --features question",
        )
    shared = OperatorSpec(name=first[0], params={**first[1], "k": max(ks.values())})
    return shared, ks


@dataclass
class RouterTraining:
    """What ``train_router`` measured: per config its quality and cost on the training questions, the cross-validated
    figures of the chosen router next to each config's, the kinds of questions, and where it wrote the model."""

    routes: list[str]
    costs: dict[str, float]
    labels: dict[str, int]
    l2: float
    cost_weight: float
    validation: dict[str, dict[str, float]]
    accuracy: float
    model_file: Path
    config_file: Path
    grid: list[dict[str, Any]] = field(default_factory=list)
    question_labels: dict[str, str] = field(default_factory=dict)
    classes: str = "passages"
    class_accuracy: float = 0.0


def _folds(ids: Sequence[str], k: int, seed: int) -> np.ndarray:
    """A seeded fold number per id (by hash), 0 to k-1."""
    return np.asarray([int(hashlib.sha256(f"router:{seed}:{q}".encode()).hexdigest(), 16) % k for q in ids])


def _class_quality(targets: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    """Each route's mean quality per class (``k x c``); a class with no questions gets the routes' overall mean."""
    counts = onehot.sum(axis=0)
    overall = targets.mean(axis=0)
    per = (targets.T @ onehot) / np.where(counts > 0, counts, 1.0)
    return np.where(counts[None, :] > 0, per, overall[:, None])


def routed_config(
    routes: Mapping[str, FlowConfig],
    model_file: Path,
    fallback: str,
    name: str,
    shared: tuple[OperatorSpec, Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """A conditional flow config routing between the candidate flows with the learned router (self-contained: the
    first route's providers are the flow's). With ``shared`` (:func:`shared_retrieval`), the flow retrieves once
    before the router and each route takes the first ``k`` of those candidates (``retrieve: given``)."""
    first = next(iter(routes.values()))

    def flow(route: str, config: FlowConfig) -> dict[str, Any]:
        out = {k: v for k, v in config.to_dict().items() if k != "providers"}
        if shared is not None:
            out["operators"] = {
                **out.get("operators", {}),
                "retrieve": {"name": "given", "params": {"k": shared[1][route]}},
            }
        return out

    operators: dict[str, Any] = {"route": {"name": "learned", "params": {"model": str(model_file)}}}
    if shared is not None:
        operators = {"retrieve": shared[0].model_dump(include={"name", "params"}), **operators}
    return {
        "pattern": "conditional",
        "name": name,
        "providers": first.to_dict()["providers"],
        "operators": operators,
        "params": {
            "fallback": fallback,
            "routes": {r: {"description": cfg.name or r, "flow": flow(r, cfg)} for r, cfg in routes.items()},
        },
    }


def first_evidence(questions: Sequence[str], config: FlowConfig, retrieve: OperatorSpec, env: Any) -> list[list[Any]]:
    """Each question's candidates from the shared first retrieval (what a routed flow's router sees), on ``env``
    (``config`` gives the providers)."""
    from modular_rag.builder import build_flow

    probe = {
        "pattern": "linear",
        "providers": config.to_dict()["providers"],
        "operators": {
            "retrieve": retrieve.model_dump(include={"name", "params"}),
            "context": "none",
            "generate": "none",
        },
    }
    flow = build_flow(probe, providers=env)
    return [list(flow.invoke({"query": q}).get("candidates") or []) for q in questions]


Features = Sequence[str]
"""Feature blocks of a router: some of ``question`` and ``evidence`` (checked by :func:`train_router`)."""


def train_router(
    dataset: BeirDataset,
    configs: Mapping[str, FlowConfig],
    out: str | Path,
    *,
    quality: str = "all@5",
    classes: ClassKind | None = None,
    features: Features | None = None,
    folds: int = 5,
    seed: int = 0,
    max_cost_ratio: float | None = 0.7,
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
        classes: The kinds of questions the classifier tells apart (:func:`question_classes`); by default ``both``
            for a router that reads the evidence, else ``auto``. (Measured on the mixed workloads: with
            ``passages``, P(several passages) ranks the multi-passage questions by how multi-passage they look,
            not by whether the hop pays, so a budget spends its hops on the wrong ones; ``both`` separates those the
            single shot already answers.)
        features: What the classifier reads: ``question`` (its normalised embedding and lexical features) or
            ``wording`` (the lexical features alone), and/or
            ``evidence`` (:func:`~modular_rag.evidence.evidence_features` of the shared first retrieval: see
            :func:`shared_retrieval`). By default :data:`DEFAULT_FEATURES` when the candidates share a first
            retrieval, else the question alone (said in the log).
        folds: Cross-validation folds over the training questions, to choose the L2 penalty and the cost weight.
        seed: Seeds the folds.
        max_cost_ratio: The operating point is the best cross-validated quality whose mean cost is at most this
            share of the costliest flow's (when ``max_quality_loss`` is not given); the model keeps it as its
            budget, which the routed flow holds over the questions it serves
            (:class:`~modular_rag.route_budget.RouteBudget`).
        max_quality_loss: Instead, the cheapest operating point whose cross-validated quality is within this of the
            best single flow's.
        progress: Progress bars while the flows run.
        log: Receives one line per step.

    Returns:
        The measurements and the files written.

    Raises:
        ConfigError: With fewer than two candidate flows, fewer than two folds, fewer questions than folds, no or
            unknown features, or (with evidence) candidates that share no first retrieval.
    """
    from modular_rag.evidence import evidence_features
    from modular_rag.router_model import FEATURE_BLOCKS, RouterModel, lexical_features
    from modular_rag.tables import format_table
    from modular_rag.text import normalize_question

    say = log or (lambda line: None)
    names = list(configs)
    if len(names) < 2:
        raise ConfigError("--config", "a router needs at least two candidate flows")
    if features is None:
        features = DEFAULT_FEATURES
        try:
            shared_retrieval(configs)
        except ConfigError as exc:
            features = ("question",)
            say(f"features: the question only ({exc})")
    if folds < 2 or len(dataset.queries) < folds:
        raise ConfigError(
            "--folds",
            f"cross-validation needs at least 2 folds and a question per fold (got {folds} "
            f"folds, {len(dataset.queries)} questions)",
        )
    blocks = tuple(b for b in FEATURE_BLOCKS if b in features and not (b == "wording" and "question" in features))
    if not blocks or set(features) - set(FEATURE_BLOCKS):
        raise ConfigError(
            "--features", f"features must be some of {', '.join(FEATURE_BLOCKS)} (got {', '.join(features) or 'none'})"
        )
    shared = shared_retrieval(configs) if "evidence" in blocks else None
    results: dict[str, FlowResult] = {}
    env = None
    for name, config in configs.items():
        env = dataset_providers(
            dataset, config.providers, chunker=OperatorSpec(name=dataset.default_chunker), progress=progress, log=say
        )
        say(f"running {name} on {len(dataset.queries)} training questions")
        results[name] = evaluate_flow(config, dataset, env, name=name, progress=progress)
    assert env is not None
    qids = [q.id for q in dataset.queries]
    quality_of = {
        n: {r.qid: query_quality(r, dataset.qrels.get(r.qid, {}), quality) for r in res.records}
        for n, res in results.items()
    }
    costs = {n: float(res.summary()["retrievals"]) + float(res.summary()["llm_calls"]) for n, res in results.items()}
    ms = {n: float(res.summary()["ms"]) for n, res in results.items()}
    by_cost = sorted(names, key=lambda n: (costs[n], ms[n]))
    labels = {}
    for q in qids:
        top = max(quality_of[n][q] for n in names)
        labels[q] = names.index(next(n for n in by_cost if quality_of[n][q] >= top))
    relevant = [sum(1 for s in dataset.qrels.get(q, {}).values() if s > 0) for q in qids]
    kind_of = classes or ("both" if "evidence" in blocks else "auto")
    kinds = question_classes(relevant, [names[labels[q]] for q in qids], kind_of)
    lexical = np.asarray([lexical_features(q.text) for q in dataset.queries])
    mean, scale = lexical.mean(axis=0), lexical.std(axis=0) + 1e-6
    parts = []
    if "question" in blocks:
        vectors = env.encoder.encode([normalize_question(q.text) for q in dataset.queries]).astype(np.float64)
        parts.append(vectors)
    if "question" in blocks or "wording" in blocks:
        parts.append((lexical - mean) / scale)
    ev_mean, ev_scale = np.zeros(0), np.ones(0)
    if shared is not None:
        say(f"reading the shared first retrieval ({shared[0].name} {shared[0].params}) of every training question")
        hits = first_evidence([q.text for q in dataset.queries], configs[names[0]], shared[0], env)
        links = getattr(env.index, "links", None)
        evidence = np.asarray([evidence_features(q.text, h, links) for q, h in zip(dataset.queries, hits, strict=True)])
        ev_mean, ev_scale = evidence.mean(axis=0), evidence.std(axis=0) + 1e-6
        parts.append((evidence - ev_mean) / ev_scale)
    x = np.hstack(parts)
    y = np.asarray([labels[q] for q in qids])
    targets = np.asarray([[quality_of[n][q] for n in names] for q in qids])
    fold = _folds(qids, folds, seed)

    def model_of(
        class_names: list[str],
        w: np.ndarray,
        b: np.ndarray,
        quality_per: np.ndarray,
        cost_weight: float = 0.0,
        **extra: Any,
    ) -> RouterModel:
        return RouterModel(
            names,
            class_names,
            w,
            b,
            quality_per,
            mean,
            scale,
            costs,
            cost_weight,
            blocks=blocks,
            evidence_mean=ev_mean,
            evidence_scale=ev_scale,
            **extra,
        )

    def measure(choice: np.ndarray) -> dict[str, float]:
        return {
            "quality": float(np.mean(targets[np.arange(len(choice)), choice])),
            "cost": float(np.mean([costs[names[c]] for c in choice])),
        }

    singles = {n: {"quality": float(np.mean(targets[:, i])), "cost": costs[n]} for i, n in enumerate(names)}
    best_single = max(v["quality"] for v in singles.values())
    grid: list[dict[str, Any]] = []
    held_out: dict[tuple[str, float], tuple[np.ndarray, np.ndarray]] = {}
    onehots = {}
    for kind, per_question in kinds.items():
        class_names = sorted(set(per_question))
        onehot = onehots[kind] = np.asarray([[float(k == c) for c in class_names] for k in per_question])
        say(
            f"question kinds ({kind}): "
            + ", ".join(f"{c} {int(onehot[:, i].sum())}" for i, c in enumerate(class_names))
        )
        for l2 in (1e-3, 1e-2, 1e-1):
            expected = np.zeros_like(targets)
            kind_p = np.zeros_like(onehot)
            for f in range(folds):
                fit, test = fold != f, fold == f
                if not test.any():
                    continue
                w, b = fit_softmax(x[fit], onehot[fit], l2)
                model = model_of(class_names, w, b, _class_quality(targets[fit], onehot[fit]))
                kind_p[test] = model.class_probabilities(x[test])
                expected[test] = model.probabilities(x[test])
            held_out[kind, l2] = (expected, kind_p)
            model = model_of(
                class_names,
                np.zeros((len(class_names), x.shape[1])),
                np.zeros(len(class_names)),
                np.zeros((len(names), len(class_names))),
            )
            for cost_weight in np.round(np.arange(0.0, 1.0005, 0.005), 3).tolist():
                model.cost_weight = cost_weight
                grid.append({"classes": kind, "l2": l2, "cost_weight": cost_weight, **measure(model.decide(expected))})
    chosen = choose_operating_point(
        grid, costs, best_single, max_cost_ratio=max_cost_ratio, max_quality_loss=max_quality_loss
    )
    kind = str(chosen["classes"])
    say(
        f"chosen by {folds}-fold cross-validation: classes {kind}, l2 {chosen['l2']}, cost weight "
        f"{chosen['cost_weight']}: quality {chosen['quality']:.3f} at cost {chosen['cost']:.2f} (best single flow "
        f"{best_single:.3f})"
    )
    onehot = onehots[kind]
    class_names = sorted(set(kinds[kind]))
    expected, kind_p = held_out[kind, float(chosen["l2"])]
    check = model_of(class_names, np.zeros((1, 1)), np.zeros(1), np.zeros((1, 1)), float(chosen["cost_weight"]))
    accuracy = float(np.mean(check.decide(expected) == y))
    class_accuracy = float(np.mean(kind_p.argmax(axis=1) == onehot.argmax(axis=1)))
    w, b = fit_softmax(x, onehot, float(chosen["l2"]))  # the shipped model learns from every training question
    model = model_of(
        class_names,
        w,
        b,
        _class_quality(targets, onehot),
        float(chosen["cost_weight"]),
        embeddings=configs[names[0]].providers.embeddings.model_dump_json(),
        budget=max_cost_ratio if max_quality_loss is None else None,
        trained={
            "dataset": dataset.name,
            "split": dataset.split,
            "questions": len(qids),
            "quality": quality,
            "classes": kind,
            "features": list(blocks),
            "labels": {n: int(np.sum(y == i)) for i, n in enumerate(names)},
            "cross_validation": {
                "folds": folds,
                "chosen": chosen,
                "singles": singles,
                "accuracy": accuracy,
                "class_accuracy": class_accuracy,
            },
        },
    )
    folder = Path(out)
    model_file = model.save(folder)
    import yaml

    config_file = folder / "routed.yaml"
    routed = routed_config(configs, model_file.resolve(), fallback=by_cost[0], name="routed", shared=shared)
    config_file.write_text(yaml.safe_dump(routed, sort_keys=False), encoding="utf-8")
    rows = [[n, f"{singles[n]['quality']:.3f}", f"{singles[n]['cost']:.2f}"] for n in names]
    rows.append(["routed", f"{chosen['quality']:.3f}", f"{chosen['cost']:.2f}"])
    say(format_table([f"{folds}-fold cross-validation", quality, "retrievals + LLM calls / q"], rows))
    return RouterTraining(
        names,
        costs,
        {n: int(np.sum(y == i)) for i, n in enumerate(names)},
        float(chosen["l2"]),
        float(chosen["cost_weight"]),
        {**singles, "routed": {"quality": chosen["quality"], "cost": chosen["cost"]}},
        accuracy,
        model_file,
        config_file,
        grid,
        {q: names[labels[q]] for q in qids},
        kind,
        class_accuracy,
    )
