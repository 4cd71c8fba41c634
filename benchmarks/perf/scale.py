"""``python -m benchmarks.perf scale``: the knowledge index at a client's scale, today's code against an earlier
commit's in one run.

A synthetic corpus (deterministic: pseudo-words drawn by a Zipf law, one chunk per document, each document titled
with a two-word name and naming two other documents, so the link table has work) of ``--sizes`` chunks is indexed
with the hash embedder (:mod:`benchmarks.perf.hashembed`: no model weights; its time is reported apart and taken
out of the throughput) into Chroma on disk and into a Milvus server on loopback (``--milvus lite``, the
pure-Python engine, or ``standalone``, Milvus 2.3.5's C++ server from the PyPI ``milvus`` package), by the code of
this checkout (``new``) and by ``--old`` (a commit, checked out as a worktree under ``.modular_rag/scale/``).
Then, per store:

- a **new worker**: a fresh process imports the kit, opens the index and answers one question with the default
  template (``templates/linear.yaml``); its time to that answer and its resident memory beyond the imports, with
  Chroma's own share (opening the collection and loading its HNSW index, done first in the same process) apart;
- **latency with 4 workers**: 4 processes answer ``--questions`` questions each at the same time, after their first;
  p50/p95 of the default template and of ``link_hop`` (``configs/hotpotqa-multihop.yaml``'s flow);
- **changes**: adding a file of 1,000 new documents (``index``), then ``--sync`` with a 1,000-document file gone:
  seconds, the embedding excluded, the store opening its collection (Chroma loading its HNSW index) timed before
  each and reported apart, and on Milvus the part spent waiting on its requests;
- **ingestion**: chunks per second of the whole build, the embedding excluded.

Indexes are kept under ``.modular_rag/scale/`` and reused by the next run (``--rebuild`` to start again).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from .common import ROOT, Report, table, worktree

HERE = Path(__file__).resolve().parent
WORK = ROOT / ".modular_rag" / "scale"
PER_FILE = 1000
SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ru",
    "te",
    "van",
    "sor",
    "el",
    "di",
    "pa",
    "nu",
    "ber",
    "to",
    "ri",
    "sa",
    "mon",
    "gal",
    "fe",
    "qui",
    "dro",
    "ne",
    "lis",
    "ta",
    "co",
    "hu",
    "zan",
    "pe",
    "ora",
    "bi",
    "ju",
)


def _words(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` distinct pseudo-words of two or three syllables."""
    out: dict[str, None] = {}
    while len(out) < count:
        n = int(rng.integers(2, 4))
        out["".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), n))] = None
    return list(out)


class Corpus:
    """The synthetic corpus: ``n`` documents in files of 1,000, and one extra file of 1,000 for the add."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n = n
        self.folder = WORK / f"corpus-{n}"
        self.extra = WORK / f"extra-{n}.jsonl"
        rng = np.random.default_rng(seed)
        self.vocab = _words(rng, 20000)
        names = [w.capitalize() for w in _words(rng, 3000)]
        pairs = rng.permutation(len(names) ** 2)[: n + PER_FILE]
        self.titles = [f"{names[p // len(names)]} {names[p % len(names)]}" for p in pairs]
        weights = 1.0 / (np.arange(len(self.vocab)) + 20.0)
        self.p = weights / weights.sum()
        self.rng = rng

    def _doc(self, i: int, words: np.ndarray, links: np.ndarray) -> dict[str, str]:
        w = [self.vocab[j] for j in words]
        a, b = self.titles[links[0]], self.titles[links[1]]
        text = (
            f"{self.titles[i]} is a {w[0]} {w[1]} of {w[2]}. "
            + " ".join(w[3:20])
            + f" with {a}. "
            + " ".join(w[20:38])
            + f", as {b} {w[38]}. "
            + " ".join(w[39:55])
            + "."
        )
        return {"_id": f"d{i}", "title": self.titles[i], "text": text}

    def write(self) -> None:
        """Write the files unless they exist."""
        done = self.folder / ".done"
        if done.exists():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        total = self.n + PER_FILE
        for start in range(0, total, PER_FILE):
            words = self.rng.choice(len(self.vocab), size=(PER_FILE, 55), p=self.p)
            links = self.rng.integers(0, self.n, size=(PER_FILE, 2))
            rows = [self._doc(start + k, words[k], links[k]) for k in range(PER_FILE)]
            file = self.extra if start >= self.n else self.folder / f"part-{start // PER_FILE:05d}.jsonl"
            file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        done.touch()

    def questions(self, count: int, seed: int) -> list[str]:
        """Questions on random documents: a few of the document's words and, every other one, its title."""
        rng = np.random.default_rng(seed)
        out = []
        for i in rng.integers(0, self.n, count):
            words = [self.vocab[j] for j in rng.choice(len(self.vocab), 3, p=self.p)]
            name = self.titles[int(i)]
            out.append(f"What {words[0]} {words[1]} did {name} {words[2]} with?")
        return out


def _job(code: Path, args: dict[str, Any], timeout: float = 6 * 3600) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(HERE / "scale_job.py"), json.dumps(args)],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{args['job']} failed ({code}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _parallel(code: Path, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "scale_job.py"), json.dumps(a)],
            env=env,
            cwd=code,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in jobs
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"worker failed ({code}):\n{stderr[-3000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _milvus_server(kind: str) -> tuple[subprocess.Popen[bytes], str]:
    """A Milvus server on loopback over ``.modular_rag/scale/milvus`` (kept between runs): ``lite``, the
    ``milvus-lite server`` (a pure-Python engine), or ``standalone``, the ``milvus-server`` of the PyPI ``milvus``
    package (Milvus 2.3.5 standalone: the C++ engine, embedded etcd, local storage), ready when it answers."""
    port = _free_port()
    data = WORK / ("milvus" if kind == "lite" else "milvus-standalone")
    data.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    cmd = (
        [str(bin_dir / "milvus-lite"), "server", "--data-dir", str(data), "--host", "127.0.0.1", "--port", str(port)]
        if kind == "lite"
        else [str(bin_dir / "milvus-server"), "--data", str(data), "--proxy-port", str(port)]
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            if kind == "lite" or _answers(uri):
                return proc, uri
        except OSError:
            pass
        time.sleep(0.5)
    _stop(proc)
    raise RuntimeError(f"the Milvus {kind} server did not start within 120 s: {' '.join(cmd)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server with what it started: ``milvus-server`` runs the engine as a child that outlives its parent
    (holding the embedded etcd's fixed ports 2379-2380, so no other standalone starts), so the whole process group
    (the server leads its own session) gets SIGTERM, then SIGKILL after 30 s."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def _answers(uri: str) -> bool:
    """Whether the Milvus at ``uri`` answers (the standalone's proxy listens before its coordinators are up)."""
    import pymilvus

    try:
        client = pymilvus.MilvusClient(uri=uri, timeout=5)
        client.get_server_version(timeout=5)
        client.list_collections(timeout=5)
        client.close()
        return True
    except Exception:  # noqa: BLE001 - not ready yet, whatever pymilvus raises
        return False


def _rss_of(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _server_rss(pid: int) -> float:
    """The resident memory of a server process and its children (``milvus-server`` runs the engine as a child)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    kids = [int(c) for c in children.read_text().split()] if children.exists() else []
    return _rss_of(pid) + sum(_server_rss(k) for k in kids)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run(args: argparse.Namespace, out: Report) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    stores = args.stores.split(",")
    codes = {"new": worktree(args.new, WORK) if args.new else ROOT}
    if args.old:
        codes[f"old ({args.old[:7]})"] = worktree(args.old, WORK)
    if args.only:
        codes = {label: code for label, code in codes.items() if label.startswith(args.only)}
    server, uri = _milvus_server(args.milvus) if "milvus" in stores else (None, "")
    if server is not None and args.milvus == "standalone":  # --save: beside, not over, Milvus Lite's results
        out.name = "scale-milvus-standalone"
    rows_start: list[list[Any]] = []
    rows_lat: list[list[Any]] = []
    rows_change: list[list[Any]] = []
    try:
        for n in sizes:
            corpus = Corpus(n)
            t = time.perf_counter()
            corpus.write()
            out(f"corpus of {n:,} documents ready ({time.perf_counter() - t:.0f}s): {corpus.folder}")
            questions = corpus.questions(1 + args.questions * args.workers, seed=n)
            for store in stores:
                for label, code in codes.items():
                    try:
                        _measure(
                            args,
                            out,
                            n,
                            store,
                            label,
                            code,
                            uri,
                            corpus,
                            questions,
                            (rows_start, rows_lat, rows_change),
                        )
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:  # one code failing keeps the others
                        out(f"{n:,} {store} {label}: FAILED: {str(exc)[-1500:]}")
                    if server is not None:
                        out(f"  Milvus {args.milvus} server RSS now {_server_rss(server.pid):,.0f} MB")
    finally:
        if server is not None:
            _stop(server)
    out()
    out(
        "a new worker (cold process): time from opening the index to its first answer (default template), resident "
        "memory it adds beyond the imports; store s: on Chroma, Chroma's own share apart (opening the collection, "
        "loading its HNSW index, before the kit), on Milvus the time the first answer waited on Milvus requests "
        "(part of it); build s: the whole build; ingestion: chunks/s of the whole build, the hash embedder's time "
        "taken out"
    )
    out(
        table(
            [
                "chunks",
                "store",
                "code",
                "first answer s",
                "kit MB",
                "store s",
                "Chroma MB",
                "build s",
                "ingest chunks/s",
            ],
            rows_start,
        )
    )
    out()
    out(f"{args.workers} worker processes at once, {args.questions} questions each after their first (ms)")
    out(table(["chunks", "store", "code", "flow", "questions", "p50 ms", "p95 ms", "Milvus p50 ms"], rows_lat))
    if rows_change:
        out()
        out(
            "changes (seconds, the embedding excluded): add a file of 1,000 new documents; --sync with a 1,000-"
            "document file gone; the store's opening of its collection (Chroma loading its HNSW index) is timed "
            "before each and not included; Milvus s: of the add and the sync, the time spent waiting on Milvus "
            "requests"
        )
        out(
            table(
                [
                    "chunks",
                    "store",
                    "code",
                    "add 1,000 s",
                    "sync -1,000 s",
                    "removed",
                    "of which warming s",
                    "store opening s",
                    "Milvus s",
                ],
                rows_change,
            )
        )


def _measure(
    args: argparse.Namespace,
    out: Report,
    n: int,
    store: str,
    label: str,
    code: Path,
    uri: str,
    corpus: Corpus,
    questions: list[str],
    rows: tuple[list[list[Any]], list[list[Any]], list[list[Any]]],
) -> None:
    """Build (or reuse) one code's index in one store and measure it, printing each row as soon as it is known (a
    run at 1M chunks takes hours: what was measured survives a later failure)."""
    rows_start, rows_lat, rows_change = rows
    default = ROOT / "modular_rag" / "templates" / "linear.yaml"
    link = ROOT / "configs" / "hotpotqa-multihop.yaml"
    flavour = "milvus-standalone" if store == "milvus" and args.milvus == "standalone" else store
    key = f"{'new' if label == 'new' else args.old[:7]}-{flavour}-{n}"
    where = {
        "store": store,
        "collection": key.replace("-", "_"),
        "path": str(WORK / key),
        "uri": uri,
        "catalog": str(WORK / f"{key}.catalog"),
    }
    built, progress = WORK / f"{key}.json", WORK / f"{key}.progress.json"
    if args.rebuild or not built.exists():
        before = json.loads(progress.read_text()) if progress.exists() and not args.rebuild else None
        if before is None:  # a build killed part way (a session's end) continues where its last write ended
            for stale in (WORK / key, WORK / f"{key}.catalog"):
                shutil.rmtree(stale, ignore_errors=True)
        else:
            out(f"{n:,} {store} {label}: resuming a build ({before['runs']} run(s), {before['seconds']:.0f}s so far)")
        info = _job(
            code,
            {**where, "job": "build", "paths": [str(corpus.folder)], "progress_file": str(progress), "before": before},
        )
        built.write_text(json.dumps(info))
        progress.unlink(missing_ok=True)
    info = json.loads(built.read_text())
    if info["embed_seconds"] is not None:
        kit_s, rate_of = info["seconds"] - info["embed_seconds"], info["chunks"]
    else:  # an earlier run did not record its embedding time: the rate of the last run alone
        kit_s, rate_of = info["run"]["seconds"] - info["run"]["embed_seconds"], info["run"]["added"]
    runs = (
        f" over {info['runs']} runs (resumed; the last run added {info['run']['added']:,} in "
        f"{info['run']['seconds']:.0f}s)"
        if info.get("runs", 1) > 1
        else ""
    )
    out(
        f"{n:,} {store} {label}: built {info['chunks']:,} chunks in {info['seconds']:.0f}s{runs}: "
        f"{rate_of / kit_s:,.0f} chunks/s without the embedding"
    )
    if args.build_only:
        return
    if store == "milvus":
        warm, what = _warm_milvus(uri, where["collection"], new_code=label == "new")
        out(f"  server warm-up (flush, load, a first {what} search): {warm:.1f} s")
    cold = _job(code, {**where, "job": "worker", "config": str(default), "questions": questions[:1]})
    rows_start.append(
        [
            f"{n:,}",
            store,
            label,
            cold["first answer s"],
            cold["kit MB"],
            cold["chroma s"] if store == "chroma" else f"Milvus {cold['milvus s']:.2f}",
            cold["chroma MB"] if store == "chroma" else "-",
            info["seconds"],
            rate_of / kit_s,
        ]
    )
    waits = f" (waiting on Milvus {cold['milvus s']:.2f} s)" if store == "milvus" else ""
    out(
        f"  new worker: first answer {cold['first answer s']:.2f} s{waits}, kit {cold['kit MB']:,.0f} MB, "
        f"process {cold['rss MB']:,.0f} MB"
    )
    need, free = cold["rss MB"] * args.workers, _available_mb()
    if need > 0.8 * free:  # several copies of a corpus-sized worker would push the machine into swap or the OOM killer
        out(
            f"  {args.workers} workers not run: {args.workers} x {cold['rss MB']:,.0f} MB > 80% of the "
            f"{free:,.0f} MB available"
        )
        rows_lat.append([f"{n:,}", store, label, "both", 0, "did not fit", "did not fit", "-"])
    else:
        for name, config in (("default", default), ("link_hop", link)):
            jobs = [
                {
                    **where,
                    "job": "worker",
                    "config": str(config),
                    "questions": questions[w * args.questions : (w + 1) * args.questions + 1],
                }
                for w in range(args.workers)
            ]
            runs = _parallel(code, jobs)
            lat = [ms for r in runs for ms in r["latencies"]]
            wait = [ms for r in runs for ms in r.get("milvus ms", [])] if store == "milvus" else []
            rows_lat.append(
                [f"{n:,}", store, label, name, len(lat), _pct(lat, 50), _pct(lat, 95), _pct(wait, 50) if wait else "-"]
            )
            out(
                f"  {args.workers} workers, {name}: p50 {_pct(lat, 50):.1f} ms, p95 {_pct(lat, 95):.1f} ms"
                + (f" (waiting on Milvus: p50 {_pct(wait, 50):.1f} ms)" if wait else "")
            )
    if args.changes:
        *change, add_stages, sync_stages = _changes(code, where, corpus)
        rows_change.append([f"{n:,}", store, label, *change])
        out(
            f"  add 1,000: {change[0]:.1f} s; sync -1,000: {change[1]:.1f} s ({change[2]:,} removed; "
            f"warming {change[3]} s; the store opening its collection before each, apart: {change[4]} s; waiting on "
            f"Milvus requests: {change[5]} s)"
        )
        out(f"    add's stages (s): {_stages(add_stages)}; sync's: {_stages(sync_stages)}")


def _warm_milvus(uri: str, collection: str, *, new_code: bool) -> tuple[float, str]:
    """What the server does on a collection's first search after a write or a restart (Milvus Lite builds its BM25
    index in memory then), done here for both codes alike so that no worker's first answer pays it (the kit's
    ``index`` run now ends with the same, :meth:`modular_rag.milvus.MilvusStore.warm`). Only what the measured code
    will search: this code ranks BM25 over its own postings on Milvus Lite (``bm25: auto``), so there the sparse
    index is not built. Returns the seconds and what was searched."""
    import pymilvus

    from modular_rag.milvus import MilvusStore

    t = time.perf_counter()
    # the kit's store flushes: it waits while a restarted standalone refuses ("node not match") until its channels
    # are handed over, and the old code is measured on what that leaves
    store = MilvusStore(uri=uri, collection=collection, timeout_s=3600)
    store.flush(3600)
    store.close()
    client = pymilvus.MilvusClient(uri=uri, timeout=3600)
    client.load_collection(collection, timeout=3600)
    fields = client.describe_collection(collection)["fields"]
    dim = next(int(f["params"]["dim"]) for f in fields if f["name"] == "vector")
    client.search(collection, data=[[1.0] + [0.0] * (dim - 1)], anns_field="vector", limit=1, timeout=3600)
    has_sparse = any(f["name"] == "sparse" for f in fields)  # a collection made on a Milvus before 2.5 has none
    sparse = has_sparse and not (new_code and str(client.get_server_version()).startswith("milvus_lite"))
    if sparse:
        client.search(collection, data=["warm"], anns_field="sparse", limit=1, timeout=3600)
    client.close()
    return time.perf_counter() - t, "dense and BM25" if sparse else "dense"


def _available_mb() -> float:
    """MemAvailable of this machine, in MB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def _changes(code: Path, where: dict[str, Any], corpus: Corpus) -> list[Any]:
    """Add the extra file, then sync with the last part file gone; put the index back as it was (untimed)."""
    added = _job(code, {**where, "job": "build", "paths": [str(corpus.extra)], "open_first": True})
    gone = sorted(corpus.folder.glob("part-*.jsonl"))[-1]
    aside = corpus.folder.parent / f"{gone.name}.aside"
    gone.rename(aside)
    try:
        synced = _job(
            code,
            {
                **where,
                "job": "build",
                "paths": [str(corpus.folder), str(corpus.extra)],
                "sync": True,
                "open_first": True,
            },
        )
    finally:
        aside.rename(gone)
    _job(code, {**where, "job": "build", "paths": [str(corpus.folder)], "sync": True})  # back to the corpus alone
    warm = [r.get("stages", {}).get("warm", 0.0) for r in (added, synced)]
    return [
        added["seconds"] - added["embed_seconds"],
        synced["seconds"] - synced["embed_seconds"],
        synced["removed"],
        f"{warm[0]:.1f} / {warm[1]:.1f}",
        f"{added['opened']:.1f} / {synced['opened']:.1f}",
        f"{added.get('milvus s', 0.0):.1f} / {synced.get('milvus s', 0.0):.1f}",
        added.get("stages", {}),
        synced.get("stages", {}),
    ]


def _stages(stages: dict[str, float]) -> str:
    """An index run's stages (``IndexSummary.stages``, seconds) as one line."""
    return ", ".join(f"{k} {v:.1f}" for k, v in stages.items()) or "none reported"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's options."""
    p.add_argument("--sizes", default="100000,1000000", help="corpus sizes in chunks (comma-separated)")
    p.add_argument("--stores", default="chroma,milvus", help="chroma, milvus or both")
    p.add_argument(
        "--milvus",
        choices=("lite", "standalone"),
        default="lite",
        help="which Milvus server: milvus-lite server, or the milvus package's Milvus 2.3.5 standalone",
    )
    p.add_argument("--old", default="9dec1d9", help="the commit to compare with ('' for none)")
    p.add_argument("--new", default="", help="a commit to measure as new (default: this checkout's files)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--questions", type=int, default=25, help="per worker, after its first")
    p.add_argument("--no-changes", dest="changes", action="store_false", help="skip the add / sync timings")
    p.add_argument("--rebuild", action="store_true", help="index again even when a built index is kept")
    p.add_argument("--only", choices=("new", "old"), help="measure one of the two codes")
    p.add_argument(
        "--build-only",
        action="store_true",
        help="build (or reuse) the indexes and stop: a later run measures both codes side by side",
    )
