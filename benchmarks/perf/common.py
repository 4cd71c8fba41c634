"""What the perf benchmarks share: paths, the report ``--save`` keeps, tables, the SciFact queries, the demo index."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the stub LLM lives with the test helpers
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "scifact"
RESULTS = ROOT / "benchmarks" / "results"


class Report:
    """Collects what a subcommand prints, so ``--save`` can write it beside the command line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.name: str | None = None  # the results file's name when not the subcommand's (a variant of it)

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


def cell(value: Any) -> str:
    """A table cell: floats to 3 significant digits below 1, 2 decimals up to 1000, none (thousands separated)
    from there; ints thousands separated; anything else as ``str``."""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """:func:`modular_rag.tables.format_table` of the rows' :func:`cell` texts (left-aligned), no cell cut."""
    from modular_rag.tables import format_table

    return format_table(headers, [[cell(v) for v in row] for row in rows], max_width=sys.maxsize)


def verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def scifact_queries(dataset: Path, limit: int | None) -> list[str]:
    """The SciFact query texts, dev then train (when the folder has ``train_queries.jsonl``), the first ``limit``."""
    from modular_rag.eval import load_beir

    texts = [q.text for q in load_beir(dataset).queries]
    if (dataset / "train_queries.jsonl").exists():
        texts += [q.text for q in load_beir(dataset, split="train").queries]
    return texts[:limit] if limit else texts


def ensure_demo_index(path: str, embeddings: dict[str, Any] | None = None) -> None:
    """Index the demo corpus into the Chroma store at ``path`` unless it holds chunks already, with the default
    embedder or the ``embeddings`` config given."""
    from modular_rag import demo_corpus_path
    from modular_rag.config import ChromaConfig, ProvidersConfig
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    store = ChromaConfig(path=path, collection="demo")
    config = ProvidersConfig(vectorstore=store, **({"embeddings": embeddings} if embeddings else {}))
    env = Providers(config)
    if env.index.count() == 0:
        index_paths([demo_corpus_path()], env, progress=False)


def worktree(commit: str, folder: Path) -> Path:
    """A worktree of ``commit`` under ``folder`` (``code-<short hash>``, checked out once and kept), so a benchmark can
    run an earlier commit's code beside this checkout's."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short=10", commit], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = folder / f"code-{commit}"
    if not tree.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True, capture_output=True
        )
    return tree
