"""The FastAPI app: the service's parts, the ASGI layers, the error handlers and the routers.

Every endpoint but ``/health`` and the static page takes the caller
(:func:`~intentrank.service.principal.principal`) as a dependency: an API key
(``Authorization: Bearer <key>`` or ``X-API-Key: <key>``) unless keys are turned off, with
its permissions, indexes, pipelines and forced scope (docs/security.md). Work runs on a
bounded pool (503 + Retry-After when its queue is full) under a timeout (504). Errors are
``{"error": message, "request_id": id}``, in the providers' shapes on their paths. The
routes live in :mod:`intentrank.service.routes` by area; the ASGI layer under them (request
ids, the body-size limits, the access log) is :mod:`intentrank.service.gate`.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from intentrank import __version__
from intentrank.service.cluster import start_follower
from intentrank.service.engine import Engine, RequestError, redact
from intentrank.service.gate import COHERE_PATHS, OPENAI_PATHS, AccessLog, Gate, error_body
from intentrank.service.keyring import KeyRing
from intentrank.service.lifecycle import Drain
from intentrank.service.metrics import make as make_metrics
from intentrank.service.pool import Overloaded, WorkerPool
from intentrank.service.principal import Buckets, TooMany
from intentrank.service.routes import ROUTERS
from intentrank.service.routes.pages import STATIC
from intentrank.service.scope import ScopeViolation
from intentrank.service.settings import ServiceSettings


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


def _handlers(app: FastAPI, settings: ServiceSettings) -> None:
    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, TooMany) else None
        return _error(exc.status, redact(str(exc)), request, headers)

    @app.exception_handler(ScopeViolation)
    async def _violation(request: Request, exc: ScopeViolation) -> JSONResponse:
        request.scope["intentrank"]["scope_violation"] = str(exc)
        return _error(500, "refused: a pipeline stage asked for a document outside this "
                           "key's scope (logged)", request)

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


def create_app(settings: ServiceSettings) -> FastAPI:
    """Load the indexes and pipelines of ``settings`` and return the app serving them."""
    settings.check()
    access = AccessLog(settings.access_log)

    def logged(record: dict[str, Any]) -> None:  # generation switches and key reloads
        access.write({"ts": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **record})

    engine = Engine(settings, on_reload=logged)
    pool = WorkerPool(settings.workers, settings.queue_limit)
    drain = Drain()
    limits = settings.limits

    # a cluster index follows commits made by another process (as watch_s reloads a
    # directory's new generation)
    follower = start_follower(engine, settings.watch_s)

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # noqa: ANN202
        yield
        if follower is not None:
            follower.close()
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
    keys = settings.keys
    app.state.keyring = keys if isinstance(keys, KeyRing) or keys is None else KeyRing(keys)
    if isinstance(keys, KeyRing):
        keys.log = lambda message: logged({"event": "keys", "message": message})
    app.state.buckets = Buckets()  # per-key rate limits and per-client auth failures
    app.state.wall_clock = time.time  # expiries (tests move it)
    # requests, errors, latency; the routers' own routes name a request refused before
    # routing (the app's list holds the included routers, which carry no template)
    app.state.metrics = make_metrics(
        lambda: [*(r for router in ROUTERS for r in router.routes), *app.routes])
    app.add_middleware(Gate, max_body=limits.max_body_bytes,  # type: ignore[arg-type]
                       body_limits=settings.body_limits, log=access, drain=drain,
                       observe=app.state.metrics.observe if app.state.metrics else None)
    if settings.cors_origins:  # off unless configured
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])
    _handlers(app, settings)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
