"""The ASGI layer under the service's routes: request ids, the body-size limit (413 before
the app reads an oversized body, chunked bodies too), the access log (one JSON line per
request; its Prometheus metrics through ``observe``: :mod:`intentrank.service.metrics`), 500
for anything unhandled, and the error body each API's clients expect."""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from intentrank.service.engine import redact
from intentrank.service.lifecycle import Drain

_ID_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
# The providers' APIs (POST /v1/rerank and /v2/rerank as Cohere's, POST /v1/embeddings as
# OpenAI's): a bad request is 400 (not 422) and an unknown model 404, as the providers answer
# and their clients expect; errors carry the message where each client looks for it.
COHERE_PATHS = frozenset({"/v1/rerank", "/v2/rerank"})
OPENAI_PATHS = frozenset({"/v1/embeddings"})
_OPENAI_TYPES = {401: "authentication_error", 403: "permission_error"}
_OPENAI_CODES = {401: "invalid_api_key", 404: "model_not_found"}


def error_body(path: str, status: int, message: str, rid: str) -> dict[str, Any]:
    """The error body for ``path``: ``{"error": message, "request_id"}``; Cohere's paths add
    ``message``; OpenAI's path has ``{"error": {"message", "type", "param", "code"}}``."""
    if path in OPENAI_PATHS:
        kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500
                                 else "invalid_request_error")
        return {"error": {"message": message, "type": kind, "param": None,
                          "code": _OPENAI_CODES.get(status)}, "request_id": rid}
    body: dict[str, Any] = {"error": message, "request_id": rid}
    if path in COHERE_PATHS:
        body["message"] = message
    return body


class _BodyTooLarge(Exception):
    pass


class AccessLog:
    """One JSON object per request and line: request id, method, path, status, latency,
    key name, index, pipeline, fallbacks (and the error message for 4xx/5xx)."""

    def __init__(self, target: Any) -> None:
        self._lock = threading.Lock()
        self._own = None
        if isinstance(target, (str, Path)):
            target = self._own = open(target, "a", encoding="utf-8")  # noqa: SIM115
        self._stream = sys.stderr if target is None else None if target is False else target

    def write(self, record: dict[str, Any]) -> None:
        if self._stream is None:
            return
        line = redact(json.dumps(record, ensure_ascii=False))
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        if self._own is not None:
            self._own.close()


class Gate:
    """Pure ASGI middleware: request id, body-size limit (``body_limits`` by path, else
    ``max_body``), access log, refusal while draining; ``observe(scope, info, status,
    seconds)`` sees every answered request (the service's metrics, service/metrics.py)."""

    def __init__(self, app: Any, max_body: int, log: AccessLog, drain: Drain,
                 body_limits: dict[str, int] | None = None,
                 observe: Callable[[dict, dict, int, float], None] | None = None) -> None:
        self.app, self.max_body, self.log, self.drain = app, max_body, log, drain
        self.body_limits = dict(body_limits or {})  # path -> its own limit
        self.observe = observe

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = given if 0 < len(given) <= 64 and set(given) <= _ID_OK else uuid.uuid4().hex[:16]
        info: dict[str, Any] = {"request_id": rid}
        scope["intentrank"] = info
        start, status, received = time.perf_counter(), [0], [0]

        async def send_logged(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", rid.encode()),
                                      (b"x-content-type-options", b"nosniff")]
            await send(message)

        async def send_error(code: int, message: str, *headers: tuple[bytes, bytes]) -> None:
            """The API's JSON error body for ``message`` with status ``code``."""
            body_out = json.dumps(error_body(scope.get("path", ""), code, message,
                                             rid)).encode()
            await send_logged({"type": "http.response.start", "status": code,
                               "headers": [(b"content-type", b"application/json"),
                                           (b"content-length", str(len(body_out)).encode()),
                                           *headers]})
            await send_logged({"type": "http.response.body", "body": body_out})

        def write_log(bytes_in: int) -> None:
            seconds = time.perf_counter() - start
            self.log.write({
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "request_id": rid,
                "method": scope.get("method"), "path": scope.get("path"),
                "status": status[0] or 500,
                "latency_ms": round(1000 * seconds, 2),
                "bytes_in": bytes_in,
                **{k: v for k, v in info.items() if k != "request_id"}})
            if self.observe is not None:
                try:
                    self.observe(scope, info, status[0] or 500, seconds)
                except Exception as exc:  # noqa: BLE001 (metrics never fail a request)
                    print(f"metrics: {type(exc).__name__}: {exc}", file=sys.stderr)

        if not self.drain.admit():
            # shutting down: refuse before reading anything
            info["error"] = "the service is shutting down; retry on another replica"
            await send_error(503, info["error"], (b"retry-after", b"1"),
                             (b"connection", b"close"))
            write_log(0)
            return
        limit = self.body_limits.get(scope.get("path", ""), self.max_body)
        try:
            length = int(headers.get(b"content-length", b"0") or 0)
        except ValueError:
            length = 0
        try:
            if length > limit:
                raise _BodyTooLarge
            body, more = [], True  # read (bounded) before the app sees it: chunked bodies too
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    break
                body.append(message.get("body", b""))
                received[0] += len(body[-1])
                more = message.get("more_body", False)
                if received[0] > limit:
                    raise _BodyTooLarge
            replay = [{"type": "http.request", "body": b"".join(body), "more_body": False}]

            async def receive_buffered() -> dict:
                return replay.pop() if replay else await receive()

            await self.app(scope, receive_buffered, send_logged)
        except _BodyTooLarge:
            info["error"] = f"the body is over the limit of {limit} bytes"
            if status[0] == 0:
                await send_error(413, info["error"], (b"connection", b"close"))
        except Exception as exc:  # anything unhandled: logged (redacted), answered 500
            info["exception"] = redact(f"{type(exc).__name__}: {exc}")[:500]
            print(redact("".join(traceback.format_exception(exc))), file=sys.stderr)
            if status[0] == 0:
                await send_error(500, f"internal error (request id {rid})")
        finally:
            write_log(max(received[0], length))
            self.drain.release()  # after its log line: a drain ends with a full log
