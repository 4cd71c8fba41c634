"""Indexing a real HTML manual, side by side: the kit's default template (``modular-rag index``'s path: its HTML
loader, recursive chunker, int8 MiniLM on ONNX Runtime, Chroma on disk, BM25 postings, link table and sentence
vectors) against LangChain's own pipeline on the same files (langchain-community's ``BSHTMLLoader``,
``RecursiveCharacterTextSplitter`` with the template's 1,000/150 characters, ``langchain_chroma.Chroma`` with
``HuggingFaceEmbeddings`` of the same MiniLM folder, torch fp32, its default). A third row runs LangChain's pipeline
with the kit's int8 encoder as its embeddings, so the loaders and the embedder's share can be told apart.

    .venv/bin/python -m benchmarks.perf ingest [--manual django] [--rounds 1]

Each run is a process of its own on a fresh index folder, the runs alternating; the manual comes from
``benchmarks/manuals/fetch.py`` (Django's API reference by default: 115 pages). The LangChain packages are not the
kit's dependencies: ``pip install --target /tmp/lcpkgs --no-deps langchain-community langchain-chroma
langchain-huggingface dataclasses-json marshmallow typing-inspect langchain-classic httpx-sse`` (``--lc-path``).
Also printed: when the kit's progress bar first moved (seconds after the run began).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .common import ROOT, Report, table

__all__ = ["add_arguments", "run"]

_KIT = """
import json, sys, time
start = time.perf_counter()
from modular_rag import template_path
from modular_rag.config import load_config
from modular_rag.ingest import index_paths
from modular_rag.providers import Providers
args = json.loads(sys.argv[1])
config = load_config(template_path("linear"))
config.providers.vectorstore.path = args["index"]
env = Providers(config.providers)
first = []
add = env.index.add
def add_noting(chunks, **kw):
    progress = kw.get("progress")
    def told(n):
        if not first:
            first.append(time.perf_counter() - start)
        if progress:
            progress(n)
    kw["progress"] = told
    return add(chunks, **kw)
env.index.add = add_noting
summary = index_paths([args["folder"]], env, chunker=config.indexing.chunker, progress=False)
seconds = time.perf_counter() - start
print(json.dumps({"chunks": summary.chunks, "seconds": seconds, "first": first[0] if first else None,
                  "stages": summary.stages}))
"""

_LANGCHAIN = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
start = time.perf_counter()
from pathlib import Path
from langchain_community.document_loaders import BSHTMLLoader
from langchain_text_splitters import RecursiveCharacterTextSplitter
from langchain_chroma import Chroma
args = json.loads(sys.argv[1])
from modular_rag.encoders import minilm_path
if args["embedder"] == "kit-int8":
    from langchain_core.embeddings import Embeddings
    from modular_rag.onnx_embedder import OnnxEncoder
    encoder = OnnxEncoder(minilm_path(), precision="int8")
    class KitEmbeddings(Embeddings):
        def embed_documents(self, texts):
            return encoder.encode(texts).tolist()
        def embed_query(self, text):
            return encoder.encode_query(text).tolist()
    embeddings = KitEmbeddings()
else:
    from langchain_huggingface import HuggingFaceEmbeddings
    embeddings = HuggingFaceEmbeddings(model_name=str(minilm_path()), model_kwargs={"device": "cpu"})
splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=150)
docs = []
for path in sorted(Path(args["folder"]).rglob("*.html")):
    docs.extend(BSHTMLLoader(str(path), open_encoding="utf-8").load())
chunks = splitter.split_documents(docs)
store = Chroma(collection_name="manual", embedding_function=embeddings, persist_directory=args["index"])
for i in range(0, len(chunks), 256):
    store.add_documents(chunks[i : i + 256])
print(json.dumps({"chunks": len(chunks), "seconds": time.perf_counter() - start, "first": None, "stages": {}}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ingest subcommand's options."""
    parser.add_argument("--manual", default="django", help="a manual of benchmarks/manuals/fetch.py (default django)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each pipeline, alternating (default 1)")
    parser.add_argument("--lc-path", default="/tmp/lcpkgs", help="where the LangChain packages were installed")


def run(args: argparse.Namespace, out: Report) -> None:
    """Run the pipelines and print their times and ratios."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "manuals"))
    from fetch import manual_path  # type: ignore[import-not-found]

    folder = manual_path(args.manual)
    pages = len(list(folder.rglob("*.html")))
    out(f"indexing {args.manual} ({pages} HTML pages, {folder}), {args.rounds} round(s), 2 cores")
    runs = {
        "kit: default template (int8 MiniLM, loader, chunker, Chroma, BM25, links, sentence vectors)": (_KIT, {}),
        "LangChain: BSHTMLLoader + RecursiveCharacterTextSplitter + Chroma + HuggingFaceEmbeddings (fp32)": (
            _LANGCHAIN,
            {"embedder": "huggingface"},
        ),
        "LangChain's pipeline with the kit's int8 encoder": (_LANGCHAIN, {"embedder": "kit-int8"}),
    }
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    scratch = Path(tempfile.mkdtemp(prefix="modular-rag-ingest-"))
    for _ in range(args.rounds):
        for name, (script, extra) in runs.items():
            index = scratch / "index"
            shutil.rmtree(index, ignore_errors=True)
            payload = json.dumps({"folder": str(folder), "index": str(index), **extra})
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), args.lc_path])}
            done = subprocess.run([sys.executable, "-c", script, payload], capture_output=True, text=True, env=env)
            if done.returncode:
                raise SystemExit(f"{name} failed:\n{done.stderr[-2000:]}")
            got[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    shutil.rmtree(scratch, ignore_errors=True)
    kit = min(r["seconds"] for r in next(iter(got.values())))
    rows = []
    for name, results in got.items():
        best = min(results, key=lambda r: r["seconds"])
        first = f"{best['first']:.1f}" if best["first"] is not None else "-"
        rows.append(
            [name, best["chunks"], best["seconds"], best["chunks"] / best["seconds"], best["seconds"] / kit, first]
        )
    out(table(["pipeline", "chunks", "seconds", "chunks/s", "x the kit's time", "progress first moved (s)"], rows))
    stages = min(next(iter(got.values())), key=lambda r: r["seconds"])["stages"]
    out("kit stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
