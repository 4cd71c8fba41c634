"""The ``modular-rag`` command.

    modular-rag demo ["question"]                  linear pattern over the bundled demo corpus, embedded defaults
    modular-rag index PATH... --config FILE        load, chunk and index files/folders (dense + BM25); --sync
    modular-rag run --config FILE "question"       answer, citations, per-node trace and cost table
    modular-rag catalogue [--module M]             every registered operator with its parameters
    modular-rag draw PATTERN [--config FILE]       the pattern's graph as mermaid
    modular-rag template PATTERN                   print a pattern's YAML template
    modular-rag doctor [--config FILE]             check the embedded defaults (or what FILE needs) are installed
    modular-rag finetune --dataset DIR --out DIR   fine-tune the embedder on a BEIR split (BM25 hard negatives)
    modular-rag eval --dataset DIR --config A [B]  compare configs: quality, cost, JSON/CSV/PNG report
    modular-rag recommend --dataset DIR --max-llm-calls N --max-latency-ms M   the best config within a budget
    modular-rag train-router --dataset DIR --config A B --out DIR   learn which flow each question needs
    modular-rag schema                             the JSON Schema of flow configs, for editors
    modular-rag ui [--index PATH] [--config FILE]  the workbench page: ask, compare, feedback (127.0.0.1:8765)

The evaluation commands are in :mod:`modular_rag.eval.cli` (``tune`` and ``testset`` in their own packages); the
ways a run is shown (streamed updates, the answer, the catalogue) are here.

Bad input exits with status 2 and one line on stderr naming what was wrong, a failure while running with 1 (also a
run that answered although a step failed under ``on_error: skip``); no traceback (``-v`` logs what the kit does).
Imports are deferred to the command that needs them, so ``--help`` and ``catalogue`` start fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from modular_rag.cli_show import failed_steps, format_update, print_result, stream_run

__all__ = ["main", "print_result", "failed_steps", "stream_run", "format_update", "catalogue_markdown"]

DEMO_QUESTION = "What does error code E07 mean on the e-bike display?"


def _demo_config(path: str | None) -> Any:
    from modular_rag import template_path
    from modular_rag.config import ChromaConfig, load_config

    config = load_config(template_path("linear"))
    store = config.providers.vectorstore
    if path and isinstance(store, ChromaConfig):  # the template's store is Chroma
        store.path = path
    return config


def _prestart(config: Any, env: Any) -> None:
    """Launch a local LLM server in the background when the flow may call the model, so the server loads while the
    embedder and the index do (the cost model says whether any active operator calls the LLM)."""
    from modular_rag.costs import estimate

    if estimate(config).llm_calls.hi > 0:
        env.prestart()


def _cmd_demo(args: argparse.Namespace) -> int:
    from modular_rag import demo_corpus_path
    from modular_rag.builder import build_flow
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    _check_question(args.question)
    config = _demo_config(args.index)
    env = Providers(config.providers)
    _prestart(config, env)
    if env.index.count() == 0:
        print(
            f"indexing the demo corpus into {config.providers.vectorstore.path} (first run only) ...", file=sys.stderr
        )
        summary = index_paths([demo_corpus_path()], env, chunker=config.indexing.chunker, progress=not args.quiet)
        for line in summary.lines():
            print(line, file=sys.stderr)
    flow = build_flow(config, providers=env)
    result = flow.invoke({"query": args.question})
    print_result(result, as_json=args.json)
    return _exit_status(result)


def _cmd_index(args: argparse.Namespace) -> int:
    from modular_rag.config import load_config
    from modular_rag.ingest import index_paths
    from modular_rag.providers import Providers

    if args.wait < 0:
        from modular_rag.errors import ConfigError

        raise ConfigError("--wait", f"{args.wait:g} seconds: must be 0 (fail at once) or more")
    config = load_config(args.config)
    env = Providers(config.providers)
    summary = index_paths(
        args.paths,
        env,
        chunker=config.indexing.chunker,
        batch_size=config.indexing.batch_size,
        max_file_mb=config.indexing.max_file_mb,
        progress=not args.quiet,
        sync=args.sync,
        reset=args.reset,
        follow_symlinks=args.follow_symlinks,
        wait_s=args.wait,
    )
    if args.json:
        from dataclasses import asdict

        print(json.dumps(asdict(summary), indent=2))
    else:
        print("\n".join(summary.lines()))
    if summary.files_read and not summary.files_indexed:
        which = "the file was" if summary.files_read == 1 else f"all {summary.files_read} files were"
        print(f"error: nothing indexed: {which} skipped (the reasons are above)", file=sys.stderr)
        return 1
    if not summary.files_read:
        print(f"error: nothing indexed: no files under {', '.join(args.paths)}", file=sys.stderr)
        return 1
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from modular_rag.builder import build_flow
    from modular_rag.config import load_config
    from modular_rag.providers import Providers

    _check_question(args.question)
    config = load_config(args.config)
    env = Providers(config.providers)
    _prestart(config, env)
    flow = build_flow(config, providers=env)
    state: dict[str, Any] = {"query": args.question}
    if args.filter:
        try:
            state["filter"] = json.loads(args.filter)
        except json.JSONDecodeError as exc:
            from modular_rag.errors import ConfigError

            raise ConfigError("--filter", f"not valid JSON: {exc.msg}") from None
    out = sys.stderr if args.json else sys.stdout  # node lines go to stderr when stdout carries JSON
    result = stream_run(flow, state, out=out) if args.stream else flow.invoke(state)
    print_result(result, as_json=args.json)
    return _exit_status(result)


def _check_question(question: str) -> None:
    """Refuse a question with no words before anything is opened (it would retrieve at random, then refuse)."""
    if not any(ch.isalnum() for ch in question):
        from modular_rag.errors import ConfigError

        raise ConfigError("question", f"{question!r} has no words: ask a question in words")


def _exit_status(result: Mapping[str, Any]) -> int:
    failed = failed_steps(result)
    if failed:
        print(
            f"error: {len(failed)} step{'s' if len(failed) != 1 else ''} failed and went on under on_error: skip "
            f"({', '.join(failed)}); the answer above is the fallback's",
            file=sys.stderr,
        )
    return 1 if failed else 0


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
            {
                "module": i.module,
                "submodule": i.submodule,
                "name": i.name,
                "port": i.port.value,
                "summary": i.summary,
                "params": [dict(zip(("name", "default", "description"), r, strict=True)) for r in i.param_rows()],
            }
            for i in infos
        ]
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


_DEMO_STORE = "path: .modular_rag/demo, collection: demo"


def _cmd_template(args: argparse.Namespace) -> int:
    """Print a pattern's template; its index is a client's own folder (``--index``), not the demo's, so that
    documents indexed with it never mix with the demo corpus."""
    import json

    from modular_rag import template_path

    text = template_path(args.pattern).read_text(encoding="utf-8")
    if args.index != "demo":
        text = text.replace(_DEMO_STORE, f"path: {json.dumps(args.index)}, collection: docs")
    print(text, end="")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from modular_rag.config import load_config
    from modular_rag.doctor import checks
    from modular_rag.errors import MissingDependencyError, ModularRagError

    config = load_config(args.config) if args.config else None
    failed = 0
    for check in checks(config):
        try:
            print(f"ok       {check.name}: {check.run()}", flush=True)
        except ModularRagError as exc:
            failed += check.required
            label = "note" if not check.required else "MISSING" if isinstance(exc, MissingDependencyError) else "FAILED"
            print(f"{label:<8} {check.name}: {exc}", flush=True)
    return 1 if failed else 0


def _cmd_finetune(args: argparse.Namespace) -> int:
    from modular_rag.errors import ConfigError
    from modular_rag.finetune import finetune, last_checkpoint

    options = ("epochs", "batch_size", "hard_negatives", "negative_depth", "max_seq_length", "learning_rate", "seed")
    settings = {name: getattr(args, name) for name in options if getattr(args, name) is not None}
    try:
        report = finetune(
            args.dataset,
            args.out,
            split=args.split,
            base=args.base,
            settings=settings,
            overwrite=args.overwrite,
            resume=args.resume,
            save_steps=args.save_steps,
            keep_checkpoints=args.keep_checkpoints,
            progress=not args.quiet,
            log=None if args.quiet else lambda line: print(line, file=sys.stderr),
        )
    except ConfigError as exc:
        if exc.path and not exc.path.startswith("--"):  # a settings field: name the option the user typed
            raise ConfigError(f"--{exc.path.replace('_', '-')}", exc.message) from None
        raise
    except KeyboardInterrupt:
        if (checkpoint := last_checkpoint(args.out)) is not None:
            print(
                f"the run stopped after {checkpoint.name}: the same command with --resume continues it", file=sys.stderr
            )
        raise
    print("\n".join(report.lines()))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from modular_rag.schema import config_schema

    print(json.dumps(config_schema(), indent=2 if args.indent else None))
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from modular_rag.ui.app import create_app
    except ImportError as exc:
        from modular_rag.errors import MissingDependencyError

        raise MissingDependencyError(
            f"modular-rag ui needs {exc.name or 'starlette'}: pip install 'modular-rag[ui]' (starlette, uvicorn, "
            "jinja2)"
        ) from None
    from modular_rag.errors import ConfigError
    from modular_rag.ui.workbench import Workbench

    if not 0 < args.port < 65536:
        raise ConfigError("--port", f"{args.port}: a port is 1 to 65535")
    app = create_app(Workbench.from_files(args.config or (), args.index or (), args.dataset or ()))
    print(f"modular-rag workbench on http://{args.host}:{args.port}/ (Ctrl-C stops it)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _parser() -> argparse.ArgumentParser:
    from modular_rag import __version__

    parser = argparse.ArgumentParser(prog="modular-rag", description="Modular RAG flows over LangGraph.")
    parser.add_argument("--version", action="version", version=f"modular-rag {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log what the kit does (-v: info, such as the one-time ONNX export, fallbacks and "
        "retries; -vv: debug) on stderr",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="answer a question over the bundled demo corpus (embedded defaults)")
    p.add_argument("question", nargs="?", default=DEMO_QUESTION)
    p.add_argument("--index", help="where the demo index lives (default: .modular_rag/demo)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "index",
        help="index files and folders (.txt, .md, .jsonl; .pdf, .html, .docx with the docs extra) into a flow's index",
    )
    p.add_argument("paths", nargs="+", help="files or folders")
    p.add_argument("--config", required=True, help="flow config (YAML) naming the providers")
    p.add_argument(
        "--reset",
        action="store_true",
        help="empty the index first (only once every path exists and a file of a supported type was found)",
    )
    p.add_argument(
        "--sync",
        action="store_true",
        help="make the index follow the paths: remove the chunks of deleted files, replace changed ones",
    )
    p.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read what symbolic links point to outside the folders given (by default such links are skipped)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another indexer of the same index to finish (default: fail at once)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("run", help="run a flow on one question")
    p.add_argument("question")
    p.add_argument("--config", required=True, help="flow config (YAML)")
    p.add_argument("--filter", help='a Chroma where filter as JSON, e.g. \'{"year": {"$gte": 2023}}\'')
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--stream", action="store_true", help="print node updates as they happen, then the answer")
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

    from modular_rag.eval.cli import add_parser as add_eval

    add_eval(sub)  # eval, recommend, train-router

    p = sub.add_parser(
        "doctor", help="check that the embedded defaults (models, llama-server) are installed, or what one config needs"
    )
    p.add_argument("--config", help="check only what this flow config needs (its store, embedder and chat model)")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("finetune", help="fine-tune the embedder on a BEIR split (InfoNCE, BM25 hard negatives)")
    p.add_argument("--dataset", required=True, help="a BEIR folder (corpus.jsonl, <split>_queries.jsonl, ...)")
    p.add_argument("--split", default="train", help="train (train_queries.jsonl / train_qrels.tsv), dev, or a prefix")
    p.add_argument("--out", required=True, help="folder for the fine-tuned sentence-transformers model")
    p.add_argument("--base", help="model folder to start from (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--epochs", type=int, help="passes over the pairs (default 1)")
    p.add_argument("--batch-size", type=int, help="pairs per step (default 32)")
    p.add_argument("--hard-negatives", type=int, help="BM25 hard negatives per pair (default 1)")
    p.add_argument("--negative-depth", type=int, help="draw the negatives from this many BM25 hits (default 20)")
    p.add_argument("--max-seq-length", type=int, help="tokens per text while training (default 256)")
    p.add_argument("--learning-rate", type=float, help="AdamW learning rate (default 2e-5)")
    p.add_argument("--seed", type=int, help="seeds negatives, batch order and dropout (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out folder")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run in --out from its last checkpoint (give the same options)",
    )
    p.add_argument(
        "--save-steps", type=int, help="save a checkpoint in --out every N steps (default: every tenth of the run)"
    )
    p.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep every checkpoint-N folder in --out (default: the last only, removed at the end)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_finetune)

    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of flow configs (every operator's parameters), for "
        "editors: modular-rag schema > modular-rag.schema.json",
    )
    p.add_argument("--indent", action="store_true", help="pretty-print")
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser(
        "ui",
        help="the workbench page: ask with nodes shown as they run, compare configs, give and export feedback, "
        "evaluate configs on a test set",
    )
    p.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="the port (default 8765)")
    p.add_argument(
        "--index",
        action="append",
        metavar="PATH",
        help="an index folder (Chroma) to offer, repeatable (default: the demo index, .modular_rag/demo, indexed on "
        "the first question)",
    )
    p.add_argument(
        "--config",
        nargs="+",
        metavar="FILE",
        help="flow configs (YAML) to offer (default: every pattern's template)",
    )
    p.add_argument(
        "--dataset",
        action="append",
        metavar="PATH",
        help="a test set (a BEIR folder: corpus.jsonl, queries.jsonl, qrels.tsv) to offer to Evaluate, repeatable "
        "(the bundled demo set and the page's feedback exports are offered too)",
    )
    p.set_defaults(func=_cmd_ui)

    from modular_rag.eval.tune.cli import add_parser as add_tune

    add_tune(sub)

    from modular_rag.eval.testset.cli import add_parser as add_testset

    add_testset(sub)

    p = sub.add_parser("template", help="print a pattern's YAML template")
    p.add_argument("pattern")
    p.add_argument(
        "--index",
        default=".modular_rag/index",
        help="the index folder the printed config writes and reads (default: .modular_rag/index, its collection "
        "'docs'; 'demo': the bundled demo's index, as the packaged template)",
    )
    p.set_defaults(func=_cmd_template)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 a failure while running, 2 bad input: a config, name,
    path or dataset the user gave, 130 interrupted)."""
    args = _parser().parse_args(argv)
    from modular_rag.errors import ModularRagError

    if args.verbose:
        import logging

        logging.basicConfig(
            level=logging.DEBUG if args.verbose > 1 else logging.INFO,
            stream=sys.stderr,
            format="%(levelname)s %(name)s: %(message)s",
        )
    try:
        return int(args.func(args))
    except ModularRagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # pragma: no cover - `modular-rag catalogue | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
