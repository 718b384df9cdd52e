"""What the routers share: the service's parts from the app state, errors documented in
the schema, running work on the pool, and the text limits."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from intentrank.service.engine import Engine, RequestError
from intentrank.service.models import ErrorOut
from intentrank.service.settings import Limits, ServiceSettings

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": text} for code, text in (
        (400, "malformed JSON"), (401, "no API key, or an unknown one"),
        (403, "the key lacks the permission, the index or the pipeline"),
        (404, "no such report or document"),
        (413, "the body is over the size limit"), (422, "a limit or a field is violated"),
        (429, "over the key's rate limit, or too many failed authentications from this "
              "address (see Retry-After)"),
        (503, "the worker queue is full (see Retry-After)"), (504, "the request timed out"))}


def compatible_errors(model: type, codes: tuple[int, ...]) -> dict[int | str, dict[str, Any]]:
    text = {**{c: v["description"] for c, v in ERRORS.items()},
            400: "malformed JSON, a field or a limit violated", 404: "no such model"}
    return {c: {"model": model, "description": text[c]} for c in codes}


def engine_of(request: Request) -> Engine:
    return request.app.state.engine


def settings_of(request: Request) -> ServiceSettings:
    return request.app.state.settings


def limits_of(request: Request) -> Limits:
    return request.app.state.settings.limits


def note(request: Request, **fields: Any) -> None:
    """Fields for this request's access-log line."""
    request.scope.setdefault("intentrank", {}).update(fields)


async def run(request: Request, fn: Callable[..., Any], *args: Any, **kwargs: Any
              ) -> dict[str, Any]:
    """``fn(*args, **kwargs)`` on the pool; its ``fallbacks`` go to the access log."""
    result = await request.app.state.pool.run(partial(fn, *args, **kwargs),
                                              timeout=settings_of(request).timeout_s)
    if "fallbacks" in result:
        note(request, fallbacks=result["fallbacks"])
    return result


async def work(request: Request, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """:func:`run`, answered as JSON with the request id."""
    result = await run(request, fn, *args, **kwargs)
    result["request_id"] = request.scope["intentrank"]["request_id"]
    # built by the engine in the response model's shape (tests check it against the
    # schema); sent as is, skipping a second validation per request
    return JSONResponse(result)


def check_text(field: str, text: str, limit: int, blank_ok: bool = False) -> None:
    if len(text) > limit:
        raise RequestError(422, f"{field} is {len(text)} characters; the limit is {limit}")
    if not blank_ok and not text.strip():
        raise RequestError(422, f"{field} is empty")
