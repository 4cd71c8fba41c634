"""``python benchmarks/behaviour.py [--json FILE]``: what every pattern does on the demo corpus with a scripted chat
model, as a digest to compare across commits (a refactoring must leave it as it was).

Each run is a template (the six patterns, and the modes whose nodes run operators themselves: branching over
documents and over passages, recursive over hops, adaptive as Self-RAG) on the bundled demo index, its chat model a
scripted one whose reply is a function of the prompt alone (a yes/no by the prompt's hash, two interpretations for a
clarification, else a cited sentence), asked four demo questions under ``invoke`` and under ``ainvoke``. Per run it
prints the answer, the candidates' chunk ids, every trace event's node, operator and status, and the ledger's
counters (times left out), then one SHA-256 over all of it. To compare with an earlier commit, run this file with
that commit's code first on the path::

    git worktree add --detach /tmp/before <commit>
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/behaviour.py --json before.json
    .venv/bin/python benchmarks/behaviour.py --json after.json        # the digests must match
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after a PYTHONPATH given first: the earlier commit's code wins

QUESTIONS = [
    "What does error code E07 mean on the e-bike display?",
    "How long is the battery warranty?",
    "How do I reset the display after a firmware update?",
    "Which torque sensor does the mid-drive motor use?",
]

RUNS: dict[str, dict[str, Any]] = {
    "linear": {},
    "conditional": {},
    "branching": {},
    "branching-documents": {
        "params": {"mode": "documents", "branches": 2},
        "operators": {"expand": "none", "fuse": "replug"},
    },
    "branching-passages": {
        "params": {"mode": "passages", "branches": 2},
        "operators": {"expand": "none", "fuse": "pairs", "hop": "evidence"},
    },
    "iterative": {},
    "recursive": {"params": {"branching": 2, "max_depth": 2, "max_nodes": 5}},
    "recursive-hops": {
        "params": {"expand": "hop", "branching": 2, "max_depth": 1, "max_nodes": 6},
        "operators": {"hop": "evidence"},
    },
    "adaptive": {"operators": {"judge": "llm_judge"}},  # FLARE (its token_confidence judge needs log-probabilities)
    "adaptive-self-rag": {"params": {"mode": "self_rag", "max_steps": 2}, "operators": {"judge": "reflection"}},
}
"""Run name -> overrides of its pattern's template (the pattern is the name up to its first ``-``)."""


def reply(prompt: str) -> str:
    """The scripted model: the same prompt always gets the same reply."""
    digest = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    lowered = prompt.lower()
    if "yes or no" in lowered or "yes/no" in lowered:
        return "Yes" if digest % 3 else "No"
    if "specific versions" in lowered or "interpretations" in lowered:
        return "Which model is meant?\nWhich year is meant?"
    return f"The manual covers this [1]. Case {digest % 7}."


def config_of(name: str, index: str) -> dict[str, Any]:
    """The run's config: its template on the demo index, overridden one level deep."""
    from modular_rag import template_path

    config = yaml.safe_load(template_path(name.split("-")[0]).read_text())
    config["providers"]["vectorstore"] = {"name": "chroma", "path": index, "collection": "demo"}
    for key, value in RUNS[name].items():
        config[key] = {**(config.get(key) or {}), **value}
    return config


def digest_of(out: dict[str, Any]) -> dict[str, Any]:
    """What a run did, without the clock."""
    answer = out.get("answer") or {}
    return {
        "answer": [answer.get("text"), answer.get("citations"), answer.get("refused")],
        "candidates": [h["chunk_id"] for h in out.get("candidates") or []],
        "trace": [[e["node"], e["operator"], e["status"], e.get("error")] for e in out.get("trace") or []],
        "ledger": [{k: v for k, v in e.items() if k != "ms"} for e in out.get("ledger") or []],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every run's digest here")
    args = parser.parse_args()

    from modular_rag import build_flow, demo_corpus_path, index_paths, load_config
    from modular_rag.providers import Providers
    from tests.conftest import ScriptedChat

    with tempfile.TemporaryDirectory() as index:
        first = load_config(config_of("linear", index))
        index_paths([demo_corpus_path()], Providers(first.providers), progress=False)
        runs: dict[str, Any] = {}
        for name in RUNS:
            config = load_config(config_of(name, index))
            config.providers.llm = ScriptedChat.of(reply)
            env = Providers(config.providers)
            flow = build_flow(config, providers=env)
            for mode in ("invoke", "ainvoke"):
                for i, question in enumerate(QUESTIONS):
                    env.encoder.clear_cache()
                    out = (
                        flow.invoke({"query": question})
                        if mode == "invoke"
                        else asyncio.run(flow.ainvoke({"query": question}))
                    )
                    runs[f"{name} {mode} q{i}"] = digest_of(out)
    whole = hashlib.sha256(json.dumps(runs, sort_keys=True, default=str).encode()).hexdigest()
    print(f"{'run':<36} {'LLM calls':>9} {'retrievals':>10} {'events':>6}  digest")
    for key, run in runs.items():
        calls = sum(e.get("llm_calls", 0) for e in run["ledger"])
        searches = sum(e.get("retrievals", 0) for e in run["ledger"])
        one = hashlib.sha256(json.dumps(run, sort_keys=True, default=str).encode()).hexdigest()[:12]
        print(f"{key:<36} {calls:>9} {searches:>10} {len(run['trace']):>6}  {one}")
    print(f"all {len(runs)} runs: sha256 {whole}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
