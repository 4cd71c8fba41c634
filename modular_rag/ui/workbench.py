"""What the page asks of the kit, in Python: the indexes, configs and test sets on offer, a question run node by node
(the same ``flow.stream`` the command line's ``run --stream`` makes), the runs kept for their passages and feedback,
one question through several configs, and a test set through several (``evaluate_flow``, as ``modular-rag eval``).
The web app (:mod:`modular_rag.ui.app`) only renders what this returns, so the page cannot answer or score
differently from Python."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modular_rag.config import ChromaConfig, FlowConfig, load_config
from modular_rag.errors import ConfigError, ModularRagError
from modular_rag.ui.evaluation import (
    DEFAULT_LIMIT,
    DatasetChoice,
    Evaluation,
    check_configs,
    check_limit,
    dataset_choice,
    demo_dataset,
)
from modular_rag.ui.feedback import FEEDBACK_FILE, ExportSummary, Feedback, FeedbackStore

__all__ = ["IndexChoice", "Run", "Workbench", "config_hash", "demo_index", "find_indexes", "highlight"]

OWN_INDEX = "config's own"
"""The index choice that keeps each config's own vector store."""


@dataclass(frozen=True)
class IndexChoice:
    """An index the page offers: a Chroma folder and one collection of it (``path`` empty: each config's own)."""

    name: str
    path: str = ""
    collection: str = ""
    demo: bool = False
    """The bundled demo corpus is indexed into it on first use when it is empty."""


def demo_index(path: str | Path = ".modular_rag/demo") -> IndexChoice:
    """The demo index the templates read (``modular-rag demo``'s), indexed on first use."""
    return IndexChoice("demo", str(path), "demo", demo=True)


def find_indexes(path: str | Path) -> list[IndexChoice]:
    """The collections of a Chroma index folder (its ``<collection>.kit`` folders), or its ``docs`` collection (what
    ``modular-rag template`` writes) when it has none yet.

    Raises:
        ConfigError: If the path exists and is not a folder.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ConfigError("--index", f"{folder} is not a folder; give the folder of a Chroma index")
    found = sorted(p.name[: -len(".kit")] for p in folder.glob("*.kit") if p.is_dir()) if folder.is_dir() else []
    label = folder.name or str(folder)
    return [IndexChoice(f"{label}/{c}" if len(found) > 1 else label, str(folder), c) for c in found or ["docs"]]


def config_hash(config: FlowConfig) -> str:
    """A short content hash of a config (its resolved data), so feedback names the exact flow that answered."""
    data = json.dumps(config.to_dict(), sort_keys=True, default=str)
    return hashlib.sha1(data.encode()).hexdigest()[:12]


@dataclass
class Run:
    """One question's run as the page shows it: the final state (answer, citations, evidence, trace, ledger) and
    where it came from."""

    id: str
    question: str
    config: str
    config_hash: str
    index: str
    index_version: str
    result: dict[str, Any]
    first_node_ms: float
    total_ms: float
    error: str | None = None
    nodes: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The run as JSON for the page: answer, citations (with each passage's title), evidence, ledger, totals."""
        from modular_rag.trace import totals

        result = self.result
        answer = dict(result.get("answer") or {})
        evidence = [
            {
                "ref": e.get("ref"),
                "chunk_id": e.get("chunk_id"),
                "title": str((e.get("metadata") or {}).get("title") or e.get("chunk_id")),
                "doc_id": str((e.get("metadata") or {}).get("doc_id") or ""),
            }
            for e in result.get("evidence") or []
        ]
        titles = {e["ref"]: e["title"] for e in evidence}
        citations = [dict(c, title=titles.get(c.get("ref"), c.get("chunk_id"))) for c in answer.get("citations") or []]
        candidates = [
            {"chunk_id": c.get("chunk_id"), "title": str((c.get("metadata") or {}).get("title") or c.get("chunk_id"))}
            for c in result.get("candidates") or []
        ]
        failed = [e["node"] for e in result.get("trace") or [] if e.get("status") == "error"]
        return {
            "run_id": self.id,
            "question": self.question,
            "config": self.config,
            "config_hash": self.config_hash,
            "index": self.index,
            "index_version": self.index_version,
            "error": self.error,
            "answer": {
                "text": answer.get("text", ""),
                "refused": bool(answer.get("refused")),
                "reason": answer.get("reason", ""),
                "supported": answer.get("supported"),
                "flags": answer.get("flags") or [],
                "citations": citations,
            },
            "evidence": evidence,
            "candidates": candidates,
            "ledger": list(result.get("ledger") or []),
            "trace": list(result.get("trace") or []),
            "totals": totals(result.get("ledger")) if result.get("ledger") else {},
            "failed_steps": failed,
            "first_node_ms": round(self.first_node_ms, 1),
            "total_ms": round(self.total_ms, 1),
        }


_WORD = re.compile(r"\w+")


def highlight(text: str, targets: Sequence[str]) -> tuple[int, int] | None:
    """Where in ``text`` the sentence closest to any of ``targets`` (an answer's sentences, or the sentence an
    extractive answer quoted) lies, as ``(start, end)`` offsets; ``None`` when no sentence shares a word with them."""
    from modular_rag.text import split_sentences, token_f1

    best: tuple[float, int, int] | None = None
    cursor = 0
    for sentence in (s for line in text.split("\n") for s in split_sentences(line)):  # a heading line stands alone
        words = _WORD.findall(sentence)
        if not words:
            continue
        pattern = r"\W+".join(re.escape(w) for w in words) + r"[^\w\s]*"  # the closing punctuation too
        found = re.compile(pattern).search(text, cursor)
        if found is None:
            continue
        cursor = found.end()
        score = max((token_f1(sentence, t) for t in targets if t), default=0.0)
        if score > 0 and (best is None or score > best[0]):
            best = (score, found.start(), found.end())
    return None if best is None else (best[1], best[2])


class Workbench:
    """The indexes, configs and test sets a page offers, the flows built from them (each once), the last runs and
    the last evaluations.

    Args:
        configs: Config name -> config (a file's, or a pattern's template).
        indexes: The index choices; the first is the default.
        datasets: The test sets offered to Evaluate besides the bundled demo set (which comes after them), and the
            feedback exports the page makes as they are made.
        keep: How many runs are kept for their passages and feedback (the oldest go first).
        keep_evaluations: How many evaluations are kept for their tables and cells (the oldest go first).
    """

    def __init__(
        self,
        configs: Mapping[str, FlowConfig],
        indexes: Sequence[IndexChoice],
        *,
        datasets: Sequence[DatasetChoice] = (),
        keep: int = 500,
        keep_evaluations: int = 20,
    ) -> None:
        if not configs:
            raise ConfigError("--config", "no config to offer; give config files or leave --config out for templates")
        if not indexes:
            raise ConfigError("--index", "no index to offer")
        self.configs = dict(configs)
        self.indexes = {i.name: i for i in indexes}
        self.datasets: dict[str, DatasetChoice] = {}
        for choice in (*datasets, demo_dataset()):
            if choice.name in self.datasets and self.datasets[choice.name].path != choice.path:
                raise ConfigError(
                    "--dataset", f"two test sets are named {choice.name!r}; give folders with other names"
                )
            self.datasets.setdefault(choice.name, choice)
        self._evaluations: OrderedDict[str, Evaluation] = OrderedDict()
        self._keep_evaluations = keep_evaluations
        self._evaluating = threading.Lock()  # one evaluation at a time: they share the cores and the index cache
        self._eval_envs: dict[tuple[str, str], Any] = {}
        self._providers: dict[str, Any] = {}
        self._flows: dict[tuple[str, str], tuple[FlowConfig, Any, Any]] = {}
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._keep = keep
        self._lock = threading.RLock()
        self._index_locks: dict[str, threading.Lock] = {}

    @classmethod
    def from_files(
        cls,
        config_files: Sequence[str | Path] = (),
        index_paths: Sequence[str | Path] = (),
        dataset_paths: Sequence[str | Path] = (),
    ) -> Workbench:
        """The workbench of ``modular-rag ui``: the given config files (by file stem) else every pattern's template,
        over the given index folders, else the demo index (with each config's own index offered after them when
        config files are given), with the given test sets (BEIR folders; ``demo``: the bundled set, always offered).

        Raises:
            ConfigError: If a config is invalid (the message names its path), two files share a stem or two test
                sets a folder name.
            DatasetError: If a test set is not a BEIR folder (the message names the missing file).
        """
        from modular_rag import pattern_names, template_path

        configs: dict[str, FlowConfig] = {}
        for file in config_files:
            name = Path(file).stem
            if name in configs:
                raise ConfigError("--config", f"two configs are named {name!r}; give files with different names")
            configs[name] = load_config(file)
        if not configs:
            configs = {p: load_config(template_path(p)) for p in pattern_names()}
        indexes = [c for path in index_paths for c in find_indexes(path)] or [demo_index()]
        if config_files:
            indexes.append(IndexChoice(OWN_INDEX))
        datasets = [dataset_choice(path) for path in dataset_paths if str(path) != "demo"]
        return cls(configs, indexes, datasets=datasets)

    def config(self, name: str) -> FlowConfig:
        """A config by name.

        Raises:
            ConfigError: If there is none of that name (the message lists the names).
        """
        if name not in self.configs:
            raise ConfigError("config", f"unknown config {name!r}; configs: {', '.join(self.configs)}")
        return self.configs[name]

    def index(self, name: str | None) -> IndexChoice:
        """An index choice by name (``None``: the first).

        Raises:
            ConfigError: If there is none of that name (the message lists the names).
        """
        if name is None or name == "":
            return next(iter(self.indexes.values()))
        if name not in self.indexes:
            raise ConfigError("index", f"unknown index {name!r}; indexes: {', '.join(self.indexes)}")
        return self.indexes[name]

    def flow(self, config_name: str, index_name: str | None = None) -> tuple[FlowConfig, Any, Any]:
        """The config over the chosen index, its compiled graph and its providers (built once, then cached; the
        demo index is indexed on first use, as ``modular-rag demo`` does)."""
        from modular_rag.builder import build_flow
        from modular_rag.providers import Providers

        choice = self.index(index_name)
        config = self.config(config_name)
        key = (config_name, choice.name)
        with self._lock:
            built = self._flows.get(key)
            if built is not None:
                return built
            if choice.path:
                config = config.with_vectorstore(ChromaConfig(path=choice.path, collection=choice.collection))
            providers_key = config.providers.model_dump_json()
            env = self._providers.get(providers_key)
            if env is None:
                env = self._providers[providers_key] = Providers(config.providers)
        if choice.demo:
            self._index_demo(choice, env)
        from modular_rag.costs import estimate

        if estimate(config).llm_calls.hi > 0:  # the model server loads while the rest does, as the CLI does
            env.prestart()
        graph = build_flow(config, providers=env)
        with self._lock:
            built = self._flows.setdefault(key, (config, graph, env))
        return built

    def _index_demo(self, choice: IndexChoice, env: Any) -> None:
        from modular_rag import demo_corpus_path
        from modular_rag.ingest import index_paths

        with self._lock:
            lock = self._index_locks.setdefault(choice.name, threading.Lock())
        with lock:
            if env.index.count() == 0:
                index_paths([demo_corpus_path()], env, progress=False)

    def stream(self, question: str, config_name: str, index_name: str | None = None) -> Iterator[dict[str, Any]]:
        """Run a question, yielding an event per node as it finishes (``{"event": "node", "node", "line", "ms",
        "llm_calls"}``), then ``{"event": "result", **run summary}``, or ``{"event": "error", "message"}`` when the
        question, the config or the run fails. Never raises: the page shows the message and the server serves on."""
        from modular_rag.cli_show import format_update

        started = time.perf_counter()
        first = 0.0
        nodes: list[dict[str, Any]] = []
        try:
            check_question(question)
            config, graph, env = self.flow(config_name, index_name)
            yield {"event": "start", "config": config_name, "graph": graph_svg(graph)}
            final: dict[str, Any] = {}
            for mode, chunk in graph.stream({"query": question}, stream_mode=["updates", "values"]):
                if mode == "values":
                    final = chunk
                    continue
                for node, update in chunk.items():
                    if not first:
                        first = (time.perf_counter() - started) * 1000
                    ledger = [e for e in (update or {}).get("ledger") or [] if isinstance(e, Mapping)]
                    event = {
                        "event": "node",
                        "node": node,
                        "line": format_update(node, update),
                        "ms": round(sum(float(e.get("ms", 0.0)) for e in ledger), 1),
                        "llm_calls": sum(int(e.get("llm_calls", 0)) for e in ledger),
                    }
                    nodes.append(event)
                    yield event
            run = self._keep_run(question, config_name, config, index_name, env, final, started, first, nodes)
            yield {"event": "result", **run.summary()}
        except Exception as exc:  # shown on the page; the server serves on
            yield {"event": "error", "message": error_message(exc)}

    def ask(self, question: str, config_name: str, index_name: str | None = None) -> Run:
        """Run a question to its end (what :meth:`stream` yields, kept as a :class:`Run`).

        Raises:
            ModularRagError: If the question is empty, the config or index unknown, or the run fails (the message
                says which).
        """
        result: dict[str, Any] | None = None
        for event in self.stream(question, config_name, index_name):
            if event["event"] == "error":
                raise ModularRagError(event["message"])
            if event["event"] == "result":
                result = event
        if result is None:  # pragma: no cover - the stream ends with a result or an error
            raise ModularRagError(f"the run of {question!r} with {config_name} ended without a result")
        return self.run(result["run_id"])

    def _keep_run(
        self,
        question: str,
        config_name: str,
        config: FlowConfig,
        index_name: str | None,
        env: Any,
        final: dict[str, Any],
        started: float,
        first: float,
        nodes: list[dict[str, Any]],
    ) -> Run:
        total = (time.perf_counter() - started) * 1000
        run = Run(
            uuid.uuid4().hex[:16],
            question,
            config_name,
            config_hash(config),
            self.index(index_name).name,
            index_version(env),
            json.loads(json.dumps(final, default=str)),
            first or total,
            total,
            nodes=nodes,
        )
        self._remember(self._runs, run.id, run, self._keep)
        return run

    def run(self, run_id: str) -> Run:
        """A kept run.

        Raises:
            ConfigError: If no run of that id is kept (an old one, or the server restarted).
        """
        with self._lock:
            run = self._runs.get(run_id)
        if run is None:
            raise ConfigError(
                "run", f"no run {run_id!r} is kept (the last {self._keep} are, since the server started); ask again"
            )
        return run

    def passage(self, run_id: str, ref: int) -> dict[str, Any]:
        """The passage a run's citation ``[ref]`` names: its whole text, the sentence the answer rests on
        (``start``/``end`` offsets, or ``None``) and the attribution check's verdict.

        Raises:
            ConfigError: If the run is not kept or has no citation ``[ref]``.
        """
        from modular_rag.answers import strip_citations
        from modular_rag.text import split_sentences

        run = self.run(run_id)
        answer = run.result.get("answer") or {}
        citation = next((c for c in answer.get("citations") or [] if c.get("ref") == ref), None)
        evidence = next((e for e in run.result.get("evidence") or [] if e.get("ref") == ref), None)
        if citation is None and evidence is None:
            refs = sorted({int(c["ref"]) for c in answer.get("citations") or []})
            raise ConfigError("ref", f"run {run_id} has no citation [{ref}]; its citations: {refs or 'none'}")
        chunk_id = str((citation or evidence or {}).get("chunk_id"))
        _, _, env = self.flow(run.config, run.index)
        hit = env.index.chunks([chunk_id]).get(chunk_id)
        text = str(hit["text"]) if hit else str((evidence or {}).get("text", ""))
        meta = dict(hit["metadata"]) if hit else dict((evidence or {}).get("metadata") or {})
        targets = [str(answer["quote"])] if answer.get("quote") else []
        targets += [strip_citations(s) for s in split_sentences(str(answer.get("text", ""))) if f"[{ref}]" in s] or [
            strip_citations(str(answer.get("text", "")))
        ]
        span = highlight(text, targets)
        return {
            "run_id": run_id,
            "ref": ref,
            "chunk_id": chunk_id,
            "title": str(meta.get("title") or chunk_id),
            "doc_id": str(meta.get("doc_id") or ""),
            "text": text,
            "start": span[0] if span else None,
            "end": span[1] if span else None,
            "method": (citation or {}).get("method", ""),
            "verdict": (citation or {}).get("verdict", "not checked"),
            "reason": (citation or {}).get("reason", ""),
        }

    def feedback_store(self, index_name: str | None = None, config_name: str | None = None) -> FeedbackStore:
        """The feedback store of an index (``feedback.sqlite`` in its folder; for each config's own index, the
        folder of ``config_name``'s)."""
        choice = self.index(index_name)
        if choice.path:
            return FeedbackStore(Path(choice.path) / FEEDBACK_FILE)
        config, _, env = self.flow(config_name or next(iter(self.configs)), index_name)
        return FeedbackStore(_store_folder(config, env)[0] / FEEDBACK_FILE)

    def give_feedback(
        self, run_id: str, verdict: str, right_answer: str = "", right_passage: str = ""
    ) -> tuple[int, Path]:
        """Store a person's judgement of a kept run beside its index, with the question, the config (name and
        hash), the run and the index version; returns its id and the store's file.

        Raises:
            ConfigError: If the run is not kept, the verdict is not right or wrong, or the right passage is not a
                chunk of the index.
        """
        run = self.run(run_id)
        if verdict not in ("right", "wrong"):
            raise ConfigError("verdict", f"{verdict!r}: say right or wrong")
        config, _, env = self.flow(run.config, run.index)
        passage = right_passage.strip()
        if passage and passage not in env.index.chunks([passage]):
            raise ConfigError(
                "right_passage", f"{passage!r} is not a chunk of the index; pick one of the run's passages"
            )
        folder, collection = _store_folder(config, env)
        store = FeedbackStore(folder / FEEDBACK_FILE)
        answer = run.result.get("answer") or {}
        item = Feedback(
            question=run.question,
            config=run.config,
            config_hash=run.config_hash,
            run_id=run.id,
            index_path=str(folder),
            collection=collection,
            index_version=run.index_version,
            answer=str(answer.get("text", "")),
            cited=tuple(str(c["chunk_id"]) for c in answer.get("citations") or []),
            verdict=verdict,  # type: ignore[arg-type]
            right_answer=right_answer,
            right_passage=passage,
        )
        return store.add(item), store.path

    def compare(self, question: str, config_names: Sequence[str], index_name: str | None = None) -> dict[str, Any]:
        """One question through two or three configs: each run's summary (or its error), and the evidence each
        showed its answer, passage by passage (``evidence``: chunk id, title, and the ``[ref]`` it had in each
        config, ``None`` where that config did not have it).

        Raises:
            ConfigError: If fewer than two or more than three configs are named, or the question is empty.
        """
        names = list(dict.fromkeys(config_names))
        if not 2 <= len(names) <= 3:
            raise ConfigError("configs", f"{len(names)} distinct configs chosen; compare two or three")
        check_question(question)
        runs: list[dict[str, Any]] = []
        for name in names:
            try:
                runs.append(self.ask(question, name, index_name).summary())
            except ModularRagError as exc:
                runs.append({"config": name, "error": str(exc)})
        rows: dict[str, dict[str, Any]] = {}
        for n, run in enumerate(runs):
            for e in run.get("evidence") or []:
                row = rows.setdefault(e["chunk_id"], {"chunk_id": e["chunk_id"], "title": e["title"], "refs": []})
                row["refs"] += [None] * (n - len(row["refs"])) + [e["ref"]]
        for row in rows.values():
            row["refs"] += [None] * (len(runs) - len(row["refs"]))
            row["shared"] = all(r is not None for r in row["refs"])
        return {"question": question, "configs": names, "runs": runs, "evidence": list(rows.values())}

    def export_feedback(self, index_name: str | None, out: str | Path, *, overwrite: bool = False) -> ExportSummary:
        """Write an index's feedback as a labelled BEIR folder (:func:`~modular_rag.ui.feedback.export_feedback`)
        and offer it to Evaluate (named ``<folder> (feedback)``).

        Raises:
            DatasetError: If there is nothing to export or ``out`` holds a dataset and ``overwrite`` is off.
        """
        from modular_rag.ui.feedback import export_feedback

        summary = export_feedback(self.feedback_store(index_name).path, out, overwrite=overwrite)
        choice = dataset_choice(summary.out, "feedback export", f"{Path(summary.out).resolve().name} (feedback)")
        with self._lock:
            self.datasets[choice.name] = choice
        return summary

    def dataset(self, name: str | None) -> DatasetChoice:
        """A test set by name (``None``: the first).

        Raises:
            ConfigError: If there is none of that name (the message lists the names).
        """
        if not name:
            return next(iter(self.datasets.values()))
        if name not in self.datasets:
            raise ConfigError("dataset", f"unknown test set {name!r}; test sets: {', '.join(self.datasets)}")
        return self.datasets[name]

    def start_evaluation(
        self, dataset_name: str | None, config_names: Sequence[str], limit: object = DEFAULT_LIMIT
    ) -> Evaluation:
        """Check the choices, then evaluate in a worker thread (see :meth:`evaluate`); the page polls
        :meth:`evaluation` for how far it is.

        Raises:
            ConfigError: If the test set or a config is unknown, fewer than one or more than four configs are
                named, or the limit is not 1 to 1000.
        """
        job = self._new_evaluation(dataset_name, config_names, limit)
        threading.Thread(target=self._run_evaluation, args=(job,), name=f"evaluate-{job.id}", daemon=True).start()
        return job

    def evaluate(
        self, dataset_name: str | None, config_names: Sequence[str], limit: object = DEFAULT_LIMIT
    ) -> Evaluation:
        """A test set's first ``limit`` questions (the demo set's evenly spaced, as ``modular-rag eval --limit``
        takes them) through each config: ``evaluate_flow`` over the dataset's index, built and chunked as ``eval``
        and ``recommend`` build it (``dataset_providers`` with ``config_chunker``), so every figure is the command
        line's. A config that cannot run (its index or model fails to load) is reported and the others run.

        Raises:
            ConfigError: If the choices are bad (see :meth:`start_evaluation`).
        """
        job = self._new_evaluation(dataset_name, config_names, limit)
        self._run_evaluation(job)
        return job

    def evaluation(self, evaluation_id: str) -> Evaluation:
        """A kept evaluation.

        Raises:
            ConfigError: If none of that id is kept (an old one, or the server restarted).
        """
        with self._lock:
            job = self._evaluations.get(evaluation_id)
        if job is None:
            raise ConfigError(
                "evaluation",
                f"no evaluation {evaluation_id!r} is kept (the last {self._keep_evaluations} are, since the server "
                "started); run it again",
            )
        return job

    def _new_evaluation(self, dataset_name: str | None, config_names: Sequence[str], limit: object) -> Evaluation:
        choice = self.dataset(dataset_name)
        names = check_configs(config_names, self.configs)
        job = Evaluation(uuid.uuid4().hex[:12], choice, names, check_limit(limit))
        self._remember(self._evaluations, job.id, job, self._keep_evaluations)
        return job

    def _remember(self, kept: OrderedDict[str, Any], key: str, value: Any, limit: int) -> None:
        """Keep ``value`` under ``key`` in ``kept``, forgetting the oldest beyond ``limit`` (under the lock)."""
        with self._lock:
            kept[key] = value
            while len(kept) > limit:
                kept.popitem(last=False)

    def _run_evaluation(self, job: Evaluation) -> None:
        from modular_rag.eval.runner import evaluate_flow

        with self._evaluating:
            start = time.perf_counter()
            try:
                data = job.dataset.load(job.limit)
            except Exception as exc:  # the folder changed since it was offered: said on the page
                with job.lock:
                    job.state, job.error, job.step = "error", error_message(exc), ""
                return
            with job.lock:
                job.data, job.state, job.total = data, "running", len(data.queries) * len(job.configs)
            for n, name in enumerate(job.configs):
                config = self.configs[name]
                try:
                    job.step = f"{name}: indexing {data.name} (once per corpus, embedder and chunker)"
                    env = self._eval_env(data, config)
                    job.step = f"{name}: {len(data.queries)} questions"
                    result = evaluate_flow(config, data, env, name=name, on_record=job.advance)
                except Exception as exc:  # this config's column says why; the others run
                    job.failed[name] = error_message(exc)
                else:
                    job.results[name], job.envs[name] = result, env
                with job.lock:
                    job.done = (n + 1) * len(data.queries)
            with job.lock:
                job.state, job.step, job.seconds = "done", "", time.perf_counter() - start

    def _eval_env(self, data: Any, config: FlowConfig) -> Any:
        """Providers over the dataset's index for a config (``dataset_providers``, as ``eval`` and ``recommend``
        call it), kept for the next evaluation of the same corpus, chunker and providers."""
        from modular_rag.eval.runner import config_chunker, dataset_providers, index_folder

        chunker = config_chunker(config, data.default_chunker)
        key = (str(index_folder(data, config.providers, chunker)), config.providers.model_dump_json())
        env = self._eval_envs.get(key)
        if env is None:
            env = self._eval_envs[key] = dataset_providers(data, config.providers, chunker=chunker, progress=False)
        return env


def _store_folder(config: FlowConfig, env: Any) -> tuple[Path, str]:
    """The folder feedback on a config's index is kept in (a Chroma index's folder; else the one holding the kit's
    catalog) and the collection it names."""
    store = config.providers.vectorstore
    if isinstance(store, ChromaConfig) and store.path:
        return Path(store.path), store.collection
    folder = Path(env.index.folder)
    return folder.parent, folder.name.removesuffix(".kit")


def check_question(question: str) -> None:
    """Refuse a question with no words (as the command line does).

    Raises:
        ConfigError: If the question has no letter or digit.
    """
    if not any(ch.isalnum() for ch in question or ""):
        raise ConfigError("question", f"{question!r} has no words: ask a question in words")


def error_message(exc: BaseException) -> str:
    """What the page says about a failed run: the kit's own message, or the exception's type and text."""
    if isinstance(exc, ModularRagError):
        return str(exc)
    return f"the run failed: {type(exc).__name__}: {exc}"


def index_version(env: Any) -> str:
    """The index as a run read it: its chunk count and write generation (every write to the index changes it)."""
    try:
        stats = env.index.catalog.stat_values()
    except Exception:  # a LangChain store without the kit's catalog
        return "unknown"
    return f"{int(stats.get('chunks', 0))} chunks, generation {int(stats.get('generation', 0))}"


def graph_svg(graph: Any) -> str:
    """The compiled graph drawn as SVG (see :func:`modular_rag.ui.drawing.svg`)."""
    from modular_rag.ui.drawing import svg

    return svg(graph.get_graph())
