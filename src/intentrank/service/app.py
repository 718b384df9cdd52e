"""The FastAPI app: routes, API keys, limits, the worker pool and the access log.

Every endpoint but ``/health`` and the static page needs an API key (``Authorization:
Bearer <key>`` or ``X-API-Key: <key>``) unless keys are turned off; a key restricted to some
pipelines gets 403 for the others. Work runs on a bounded pool (503 + Retry-After when its
queue is full) under a timeout (504). Errors are ``{"error": message, "request_id": id}``.

POST /v1/rerank and /v2/rerank answer as Cohere's rerank, POST /v1/embeddings as OpenAI's
embeddings (docs/integrations.md), so those providers' clients work with ``base_url`` set to
this server: same keys, limits, pool and log; their errors are 400/404 in each provider's
shape (:func:`~intentrank.service.gate.error_body`). The ASGI layer under the routes (request
ids, the body-size limit, the access log) is :mod:`intentrank.service.gate`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from intentrank import __version__
from intentrank.service.auth import ApiKey
from intentrank.service.engine import Engine, RequestError, Served, redact
from intentrank.service.gate import COHERE_PATHS, OPENAI_PATHS, AccessLog, Gate, error_body
from intentrank.service.lifecycle import Drain
from intentrank.service.models import (
    AnswerResponse,
    CohereErrorOut,
    CohereRerankRequest,
    CohereRerankResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    ErrorOut,
    EvaluateRequest,
    EvaluateResponse,
    HealthResponse,
    OpenAIErrorOut,
    PipelinesResponse,
    ReportInfo,
    RerankRequest,
    SearchRequest,
    SearchResponse,
)
from intentrank.service.pool import Overloaded, WorkerPool
from intentrank.service.settings import ServiceSettings
from intentrank.types import Document, Query, Turn

STATIC = Path(__file__).resolve().parent / "static"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": text} for code, text in (
        (400, "malformed JSON"), (401, "no API key, or an unknown one"),
        (403, "the key may not use this pipeline"), (404, "no such report"),
        (413, "the body is over the size limit"), (422, "a limit or a field is violated"),
        (503, "the worker queue is full (see Retry-After)"), (504, "the request timed out"))}


def _compatible_errors(model: type, codes: tuple[int, ...]) -> dict[int | str, dict[str, Any]]:
    text = {**{c: v["description"] for c, v in ERRORS.items()},
            400: "malformed JSON, a field or a limit violated", 404: "no such model"}
    return {c: {"model": model, "description": text[c]} for c in codes}


def _error(status: int, message: str, request: Request,
           headers: dict[str, str] | None = None) -> JSONResponse:
    info = request.scope.get("intentrank", {})
    info["error"] = message
    path = request.scope.get("path", "")
    if status == 422 and (path in COHERE_PATHS or path in OPENAI_PATHS):
        status = 400
    return JSONResponse(error_body(path, status, message, info.get("request_id", "")),
                        status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    ctx = next((e.get("ctx", {}) for e in errors if e.get("type") == "json_invalid"), None)
    if ctx is not None:
        return 400, f"malformed JSON: {ctx.get('error', 'cannot be parsed')}"
    parts = []
    for e in errors[:5]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "; ".join(parts) + more


def list_reports(dirs: list[Path]) -> dict[str, Path]:
    """File name -> path of every ``*.html`` directly inside ``dirs`` (the first directory
    wins a name twice): the reports served, by name, never by a path from the request."""
    found: dict[str, Path] = {}
    for directory in map(Path, dirs):
        if directory.is_dir():
            for path in sorted(directory.glob("*.html")):
                if path.is_file() and not path.is_symlink():
                    found.setdefault(path.name, path)
    return found


def api_key(request: Request) -> ApiKey | None:
    """The presented key (``Authorization: Bearer`` or ``X-API-Key``), or 401; None when
    keys are turned off."""
    settings: ServiceSettings = request.app.state.settings
    if not settings.require_keys:
        return None
    auth = request.headers.get("authorization", "")
    presented = auth[7:].strip() if auth[:7].lower() == "bearer " else \
        request.headers.get("x-api-key", "")
    if not presented:
        raise RequestError(401, "an API key is required: send 'Authorization: Bearer "
                                "<key>' or 'X-API-Key: <key>'")
    key = settings.keys.lookup(presented) if settings.keys is not None else None
    if key is None:
        raise RequestError(401, "unknown API key")
    request.scope.setdefault("intentrank", {})["key"] = key.name
    return key


Key = Annotated[ApiKey | None, Depends(api_key)]


def create_app(settings: ServiceSettings) -> FastAPI:
    """Load the indexes and pipelines of ``settings`` and return the app serving them."""
    settings.check()
    access = AccessLog(settings.access_log)

    def reloaded(record: dict[str, Any]) -> None:  # a generation switch: logged, and shown
        access.write({"ts": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **record})  # in /health

    engine = Engine(settings, on_reload=reloaded)
    pool = WorkerPool(settings.workers, settings.queue_limit)
    drain = Drain()
    limits = settings.limits

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # noqa: ANN202
        yield
        pool.close()
        engine.close()
        access.close()

    app = FastAPI(
        title="intentrank", version=__version__, lifespan=lifespan,
        description=(
            "Intent-aware retrieval and reranking over the indexes and pipelines this server "
            "loaded at start-up. Send `Authorization: Bearer <key>` (or `X-API-Key`) on every "
            "endpoint but /health. Limits: "
            + ", ".join(f"{k} {v}" for k, v in vars(limits).items()) + "."))
    app.state.engine, app.state.pool, app.state.settings = engine, pool, settings
    app.state.drain = drain  # set by SIGTERM (service/lifecycle.py): new requests get 503
    app.add_middleware(Gate, max_body=limits.max_body_bytes, log=access,  # type: ignore[arg-type]
                       drain=drain)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])

    # -- errors ------------------------------------------------------------------------
    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return _error(exc.status, redact(str(exc)), request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _validation_message(exc)
        return _error(status, message, request)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), request, exc.headers)

    @app.exception_handler(Overloaded)
    async def _overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        return _error(503, f"busy: {exc}; retry in {settings.retry_after_s} s", request,
                      {"Retry-After": str(settings.retry_after_s)})

    @app.exception_handler(TimeoutError)
    async def _timeout(request: Request, exc: TimeoutError) -> JSONResponse:
        return _error(504, f"the request took longer than {settings.timeout_s:g} s", request)

    def allow(request: Request, key: ApiKey | None, served: Served) -> None:
        request.scope["intentrank"]["pipeline"] = served.name
        if key is not None and not key.allows(served.name):
            raise RequestError(403, f"this key may not use pipeline {served.name!r}")

    async def run(request: Request, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        """``fn(*args)`` on the pool; its ``fallbacks`` go to the access log."""
        result = await pool.run(fn, *args, timeout=settings.timeout_s)
        if "fallbacks" in result:
            request.scope["intentrank"]["fallbacks"] = result["fallbacks"]
        return result

    async def work(request: Request, fn: Callable[..., Any], *args: Any) -> Any:
        result = await run(request, fn, *args)
        result["request_id"] = request.scope["intentrank"]["request_id"]
        # built by the engine in the response model's shape (tests check it against the
        # schema); sent as is, skipping a second validation per request
        return JSONResponse(result)

    def check_text(field: str, text: str, limit: int, blank_ok: bool = False) -> None:
        if len(text) > limit:
            raise RequestError(422, f"{field} is {len(text)} characters; the limit is {limit}")
        if not blank_ok and not text.strip():
            raise RequestError(422, f"{field} is empty")

    def check_search(body: SearchRequest) -> tuple[str, tuple[Turn, ...]]:
        if (body.query is None) == (body.conversation is None):
            raise RequestError(422, "give exactly one of 'query' and 'conversation'")
        if body.top_k > limits.max_top_k:
            raise RequestError(422, f"top_k is {body.top_k}; the limit is {limits.max_top_k}")
        if body.query is not None:
            check_text("query", body.query, limits.max_query_chars)
            return body.query, ()
        conv = body.conversation
        assert conv is not None
        if len(conv.turns) > limits.max_turns:
            raise RequestError(422, f"the conversation has {len(conv.turns)} earlier turns; "
                                    f"the limit is {limits.max_turns}")
        check_text("conversation.question", conv.question, limits.max_query_chars)
        for i, t in enumerate(conv.turns):
            check_text(f"conversation.turns[{i}].question", t.question,
                       limits.max_query_chars)
            check_text(f"conversation.turns[{i}].answer", t.answer,
                       limits.max_candidate_chars, blank_ok=True)
        return conv.question, tuple(Turn(t.question, t.answer) for t in conv.turns)

    def prepared(request: Request, body: SearchRequest, key: ApiKey | None
                 ) -> tuple[Served, str, Any]:
        text, history = check_search(body)
        index = engine.index_name(body.index)
        served = engine.pipeline(body.pipeline or settings.default_for(bool(history)), "search")
        request.scope["intentrank"]["index"] = index
        allow(request, key, served)
        return served, index, Query("q", text, history=history)

    # -- endpoints ---------------------------------------------------------------------
    @app.get("/health", response_model=HealthResponse, tags=["service"])
    async def health() -> dict[str, Any]:
        """Liveness and load, and the index generation each index is served from (with
        the number of generation switches since start-up); needs no key."""
        return {"status": "ok", "indexes": len(engine.indexes),
                "pipelines": len(engine.pipelines), "in_flight": pool.in_flight,
                "workers": pool.workers, "queue_limit": pool.queue_limit,
                "generations": engine.generations.current.generations,
                "reloads": engine.generations.reloads,
                "reload_errors": engine.generations.reload_errors}

    @app.get("/pipelines", response_model=PipelinesResponse, responses=ERRORS,
             tags=["service"])
    async def pipelines(key: Key) -> dict[str, Any]:
        """The served indexes, pipelines (search) and rerankers, and the request limits."""
        return {
            "indexes": [{"name": n, "documents": len(i)} for n, i in engine.indexes.items()],
            "pipelines": [{"name": s.name, "kind": s.kind, "description": s.description,
                           "answers": s.answers, "allowed": key is None or key.allows(s.name)}
                          for s in engine.pipelines.values()],
            "default_pipeline": settings.default, "limits": vars(limits)}

    @app.post("/search", response_model=SearchResponse, responses=ERRORS, tags=["retrieval"])
    async def search(body: SearchRequest, request: Request,
                     key: Key) -> dict[str, Any]:
        """Run a pipeline on a query or a conversation: the ranking with every stage's
        score and rank, and the per-stage trace (seconds, LLM calls, cache hits,
        fallbacks)."""
        served, index, query = prepared(request, body, key)
        return await work(request, engine.search, served, index, query, body.top_k,
                          body.include_text)

    @app.post("/answer", response_model=AnswerResponse, responses=ERRORS, tags=["retrieval"])
    async def answer(body: SearchRequest, request: Request,
                     key: Key) -> dict[str, Any]:
        """Run a pipeline whose last stage writes an answer: the answer with its numbered
        citations, and the ranking and trace as /search gives them."""
        served, index, query = prepared(request, body, key)
        if not served.answers:
            answering = [n for n, s in engine.pipelines.items() if s.answers]
            raise RequestError(422, f"pipeline {served.name!r} does not produce answers "
                                    f"(answering pipelines: {', '.join(answering) or 'none'})")
        return await work(request, engine.search, served, index, query, body.top_k,
                          body.include_text, True)

    @app.post("/rerank", response_model=SearchResponse, responses=ERRORS, tags=["retrieval"])
    async def rerank(body: RerankRequest, request: Request,
                     key: Key) -> dict[str, Any]:
        """Rerank your own passages (in the order given) for a query with a reranker."""
        check_text("query", body.query, limits.max_query_chars)
        if len(body.candidates) > limits.max_candidates:
            raise RequestError(422, f"{len(body.candidates)} candidates; the limit is "
                                    f"{limits.max_candidates}")
        if body.top_k is not None and body.top_k > limits.max_top_k:
            raise RequestError(422, f"top_k is {body.top_k}; the limit is {limits.max_top_k}")
        docs, seen = [], set()
        for i, c in enumerate(body.candidates):
            doc_id = c.id if c.id is not None else f"c{i + 1}"
            if not doc_id.strip() or len(doc_id) > 200:
                raise RequestError(422, f"candidates[{i}].id must be 1 to 200 characters")
            if doc_id in seen:
                raise RequestError(422, f"candidates[{i}].id {doc_id!r} is given twice")
            seen.add(doc_id)
            check_text(f"candidates[{i}].text", c.text, limits.max_candidate_chars)
            check_text(f"candidates[{i}].title", c.title, limits.max_query_chars,
                       blank_ok=True)
            docs.append(Document(doc_id, c.text, c.title))
        served = engine.pipeline(body.pipeline, "rerank")
        allow(request, key, served)
        return await work(request, engine.rerank, served, body.query, docs, body.top_k)

    # -- the providers' APIs ------------------------------------------------------------
    def rerank_texts(body: CohereRerankRequest) -> list[str]:
        """The text each document is reranked by, checked against the limits."""
        if not body.documents:
            raise RequestError(400, "documents is empty: give 1 to "
                                    f"{limits.max_candidates} documents")
        if len(body.documents) > limits.max_candidates:
            raise RequestError(400, f"{len(body.documents)} documents; the limit is "
                                    f"{limits.max_candidates}")
        fields = body.rank_fields or ["text"]
        if any(not f for f in fields):
            raise RequestError(400, "rank_fields: a field name is empty")
        texts = []
        for i, doc in enumerate(body.documents):
            if isinstance(doc, str):  # its own text, whatever rank_fields names
                text = doc
            else:
                missing = [f for f in fields if not isinstance(doc.get(f), str)]
                if missing:
                    raise RequestError(400, f"documents[{i}] has no string field "
                                            f"{missing[0]!r} (rank_fields: {fields})")
                text = " ".join(doc[f] for f in fields)
            check_text(f"documents[{i}]", text, limits.max_candidate_chars)
            texts.append(text)
        return texts

    cohere: dict[str, Any] = {
        "response_model": CohereRerankResponse, "tags": ["compatible APIs"],
        "responses": _compatible_errors(CohereErrorOut, (400, 401, 403, 404, 413, 503, 504))}

    @app.post("/v2/rerank", summary="Cohere Rerank (v2 path)", **cohere)
    @app.post("/v1/rerank", **cohere)
    async def cohere_rerank(body: CohereRerankRequest, request: Request,
                            key: Key) -> Response:
        """Cohere's rerank (the `cohere` clients' `Client.rerank` and `ClientV2.rerank` with
        `base_url` set to this server): `model` is a reranker name from GET /pipelines;
        `relevance_score` is the reranker's own score, `index` the document's position.
        Limits as POST /rerank (documents: max_candidates, each max_candidate_chars); a bad
        request is 400, an unknown model 404."""
        check_text("query", body.query, limits.max_query_chars)
        if body.top_n is not None and body.top_n < 1:
            raise RequestError(400, f"top_n must be at least 1, got {body.top_n}")
        texts = rerank_texts(body)
        rerankers = [n for n, s in engine.pipelines.items() if s.kind == "rerank"]
        name = body.model if body.model is not None else next(iter(rerankers), None)
        served = engine.pipelines.get(name) if name is not None else None
        if served is None or served.kind != "rerank":
            raise RequestError(404, f"unknown model {name!r}: the models here are the "
                                    f"served rerankers: {', '.join(rerankers) or 'none'}")
        allow(request, key, served)
        result = await run(request, engine.rerank_texts, served, body.query, texts,
                           body.top_n or len(texts))
        del result["fallbacks"]
        if body.return_documents:
            for r in result["results"]:
                doc = body.documents[r["index"]]
                r["document"] = {"text": doc} if isinstance(doc, str) else doc
        version = "2" if request.scope["path"].startswith("/v2/") else "1"
        result["id"] = request.scope["intentrank"]["request_id"]
        result["meta"] = {"api_version": {"version": version},
                          "billed_units": {"search_units": -(-len(texts) // 100)}}
        return JSONResponse(result)

    @app.post("/v1/embeddings", response_model=EmbeddingsResponse,
              responses=_compatible_errors(OpenAIErrorOut, (400, 401, 404, 413, 503, 504)),
              tags=["compatible APIs"])
    async def embeddings(body: EmbeddingsRequest, request: Request, key: Key) -> Response:
        """OpenAI's embeddings (the `openai` client's `embeddings.create` with `base_url`
        set to this server's /v1): `model` is an index name, whose dense query encoder
        encodes each input as a dense search encodes a query. Any valid key may use it.
        Limits: max_candidates inputs of max_candidate_chars; a bad request is 400, an
        unknown model 404."""
        texts = [body.input] if isinstance(body.input, str) else list(body.input)
        if not texts:
            raise RequestError(400, "input is empty: give a text or a list of 1 to "
                                    f"{limits.max_candidates} texts")
        if len(texts) > limits.max_candidates:
            raise RequestError(400, f"{len(texts)} inputs; the limit is "
                                    f"{limits.max_candidates}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise RequestError(400, f"input[{i}] is token ids; this service embeds "
                                        f"text: send strings")
            check_text(f"input[{i}]", text, limits.max_candidate_chars)
        models = engine.embedding_models()
        name = body.model if body.model is not None else next(iter(models), None)
        if name not in models:
            raise RequestError(404, f"unknown model {name!r}: the models here are the "
                                    f"served indexes with a dense leg: "
                                    f"{', '.join(models) or 'none'}")
        request.scope["intentrank"]["index"] = name
        dim = getattr(getattr(engine.indexes[name], "embedder", None), "dim", None)
        if body.dimensions is not None and body.dimensions != dim:
            raise RequestError(400, f"dimensions is {body.dimensions}; model {name!r} gives "
                                    f"{dim}-dimensional embeddings (no truncation)")
        return JSONResponse(await run(request, engine.embed, name, texts,
                                      body.encoding_format == "base64"))

    @app.post("/evaluate", response_model=EvaluateResponse, responses=ERRORS, tags=["evaluation"])
    async def evaluate(body: EvaluateRequest, request: Request,
                       key: Key) -> dict[str, Any]:
        """Metrics (trec_eval semantics) of a TREC run against qrels, both as text."""
        if not body.metrics or len(body.metrics) > 20:
            raise RequestError(422, f"give 1 to 20 metrics, got {len(body.metrics)}")
        return await work(request, engine.evaluate, body.run, body.qrels, body.metrics,
                          body.per_query)

    @app.get("/reports", response_model=list[ReportInfo], responses=ERRORS, tags=["reports"])
    async def reports(key: Key) -> list[dict[str, Any]]:
        """The experiment reports (self-contained HTML) the server was configured with."""
        return [{"name": n, "bytes": p.stat().st_size}
                for n, p in list_reports(settings.report_dirs).items()]

    @app.get("/reports/{name}", response_class=HTMLResponse, responses=ERRORS,
             tags=["reports"])
    async def report(name: str, key: Key) -> Response:
        """One report, by a name GET /reports lists."""
        path = list_reports(settings.report_dirs).get(name)
        if path is None:
            raise RequestError(404, f"no report named {name!r}; see GET /reports")
        return HTMLResponse(path.read_text(encoding="utf-8"),
                            headers={"Content-Security-Policy": "sandbox"})

    page_headers = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                    "frame-src blob:; style-src 'self' 'unsafe-inline'"}

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return FileResponse(STATIC / "index.html", headers=page_headers)

    @app.get("/ui/reports", include_in_schema=False)
    async def reports_page() -> Response:
        return FileResponse(STATIC / "reports.html", headers=page_headers)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app

