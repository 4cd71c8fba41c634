"""The workbench's web app: a small Starlette (ASGI) app, pages rendered on the server from Jinja templates, a
hand-written script for what must happen in the browser (nodes streamed as they run, a citation's passage, feedback,
the comparison, an evaluation's progress and tables). Every asset is package data; nothing is fetched from the network.

Routes:

    GET  /                          Ask: an index, a config, a question; nodes as they run, the answer, the ledger
    GET  /compare                   Compare: one question through two or three configs
    GET  /feedback                  Feedback given on the index, and its export as a labelled test set
    GET  /evaluate                  Evaluate: a test set over one to four configs, chart and per-question table
    POST /api/ask                   {question, config, index} -> Server-Sent Events: start, node..., result | error
    GET  /api/passage/{run}/{ref}   a citation's passage, the sentence it rests on, the attribution verdict
    POST /api/compare               {question, configs, index} -> each config's run and where their evidence differs
    POST /api/feedback              {run_id, verdict, right_answer, right_passage} -> stored beside the index
    POST /api/export                {index, out} -> the feedback written as a BEIR folder (then offered to Evaluate)
    POST /api/evaluate              {dataset, configs, limit} -> {id, state ...}: runs in a worker thread
    GET  /api/evaluate/{id}         how far it is: state, step, done/total; with its report once done
    GET  /api/evaluate/{id}/run     ?config=&qid= -> the run behind a cell and why it was judged wrong
    GET  /healthz                   ok

Bad input (an unknown config, an empty question) and failed runs (a model server that died) answer with a message
the page shows (``{"error": ...}``, or an ``error`` event); the server serves on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from modular_rag.errors import ModularRagError
from modular_rag.ui.evaluation import DEFAULT_LIMIT, MAX_LIMIT
from modular_rag.ui.workbench import Workbench, check_question, error_message

__all__ = ["create_app"]

_HERE = Path(__file__).resolve().parent


def create_app(workbench: Workbench | None = None) -> Starlette:
    """The workbench's ASGI app over a :class:`~modular_rag.ui.workbench.Workbench` (default: every pattern's
    template over the demo index, which is indexed on the first question).

    Serve it with any ASGI server: ``uvicorn.run(create_app(), host="127.0.0.1", port=8765)``, or
    ``modular-rag ui``.
    """
    bench = workbench or Workbench.from_files()
    templates = Jinja2Templates(directory=str(_HERE / "templates"))

    def page(request: Request, name: str, **context: Any) -> Response:
        context.update(
            configs=list(bench.configs),
            indexes=list(bench.indexes),
            datasets=list(bench.datasets.values()),
            current=request.url.path,
        )
        return templates.TemplateResponse(request, name, context)

    async def ask_page(request: Request) -> Response:
        return page(request, "ask.html", title="Ask")

    async def compare_page(request: Request) -> Response:
        return page(request, "compare.html", title="Compare")

    async def evaluate_page(request: Request) -> Response:
        return page(request, "evaluate.html", title="Evaluate", default_limit=DEFAULT_LIMIT, max_limit=MAX_LIMIT)

    async def feedback_page(request: Request) -> Response:
        index = request.query_params.get("index") or None
        try:
            items = await run_in_threadpool(lambda: bench.feedback_store(index).items())
            error = ""
        except ModularRagError as exc:
            items, error = [], str(exc)
        chosen = bench.index(index).name if not error else ""
        rows = [dict(vars(f), when=time.strftime("%Y-%m-%d %H:%M", time.localtime(f.created))) for f in items[::-1]]
        return page(request, "feedback.html", title="Feedback", items=rows, chosen=chosen, error=error)

    async def ask(request: Request) -> Response:
        body = await _json(request)
        question, config, index = str(body.get("question", "")), str(body.get("config", "")), body.get("index")
        check_question(question)  # bad input is refused before the stream starts (the page shows the message)
        bench.config(config)
        bench.index(str(index) if index else None)

        def events() -> Iterator[str]:
            for event in bench.stream(question, config, str(index) if index else None):
                yield f"event: {event['event']}\ndata: {json.dumps(event, default=str)}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def passage(request: Request) -> Response:
        try:
            ref = int(request.path_params["ref"])
        except ValueError:
            return _error(f"citation {request.path_params['ref']!r} is not a number: give a citation's [n]")
        return JSONResponse(await run_in_threadpool(bench.passage, request.path_params["run_id"], ref))

    async def compare(request: Request) -> Response:
        body = await _json(request)
        configs = body.get("configs") or []
        if not isinstance(configs, list):
            return _error("configs: give a list of two or three config names")
        index = str(body.get("index") or "") or None
        question = str(body.get("question", ""))
        return JSONResponse(await run_in_threadpool(bench.compare, question, [str(c) for c in configs], index))

    async def feedback(request: Request) -> Response:
        body = await _json(request)
        item, path = await run_in_threadpool(
            bench.give_feedback,
            str(body.get("run_id", "")),
            str(body.get("verdict", "")),
            str(body.get("right_answer") or ""),
            str(body.get("right_passage") or ""),
        )
        return JSONResponse({"id": item, "stored_in": str(path)})

    async def export(request: Request) -> Response:
        body = await _json(request)
        out = str(body.get("out") or "").strip()
        if not out:
            return _error("out: name the folder to write the test set to")
        index = str(body.get("index") or "") or None
        summary = await run_in_threadpool(bench.export_feedback, index, out, overwrite=bool(body.get("overwrite")))
        return JSONResponse({"out": str(summary.out), "questions": summary.questions, "lines": summary.lines()})

    async def evaluate(request: Request) -> Response:
        body = await _json(request)
        dataset = str(body.get("dataset") or "") or None
        configs: Any = body.get("configs")  # the workbench says what is wrong with it
        job = bench.start_evaluation(dataset, configs, body.get("limit", DEFAULT_LIMIT))
        return JSONResponse(job.status())

    async def evaluation(request: Request) -> Response:
        job = bench.evaluation(request.path_params["evaluation_id"])
        return JSONResponse(await run_in_threadpool(job.status))

    async def evaluation_run(request: Request) -> Response:
        job = bench.evaluation(request.path_params["evaluation_id"])
        config, qid = request.query_params.get("config", ""), request.query_params.get("qid", "")
        return JSONResponse(await run_in_threadpool(job.run, config, qid))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def kit_error(request: Request, exc: Exception) -> Response:
        return _error(str(exc))

    async def any_error(request: Request, exc: Exception) -> Response:
        return _error(error_message(exc), status=500)

    routes = [
        Route("/", ask_page),
        Route("/compare", compare_page),
        Route("/feedback", feedback_page),
        Route("/evaluate", evaluate_page),
        Route("/api/ask", ask, methods=["POST"]),
        Route("/api/passage/{run_id}/{ref}", passage),
        Route("/api/compare", compare, methods=["POST"]),
        Route("/api/feedback", feedback, methods=["POST"]),
        Route("/api/export", export, methods=["POST"]),
        Route("/api/evaluate", evaluate, methods=["POST"]),
        Route("/api/evaluate/{evaluation_id}", evaluation),
        Route("/api/evaluate/{evaluation_id}/run", evaluation_run),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={ModularRagError: kit_error, Exception: any_error})
    app.state.workbench = bench
    return app


async def _json(request: Request) -> dict[str, Any]:
    """The request's JSON object body.

    Raises:
        ModularRagError: If the body is not a JSON object.
    """
    from modular_rag.errors import ConfigError

    try:
        body = await request.json()
    except ValueError:
        raise ConfigError("body", "not JSON: send a JSON object") from None
    if not isinstance(body, dict):
        raise ConfigError("body", f"a JSON {type(body).__name__}: send a JSON object")
    return body


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
