"""The service's own Prometheus metrics (GET /metrics serves them with the rest of
prometheus_client's default registry): requests, errors and latency per endpoint, and per
pipeline. Labels are bounded: an endpoint is its route's path template
(``/documents/{doc_id}``, never an id; ``unmatched`` for paths no route has), a pipeline a
served name. Counts and latencies only, never a query, a key or a document. Without
prometheus_client (the ``service`` extra) nothing is recorded."""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_METRICS: dict[str, Any] | None = None
# seconds: from a cached BM25 search to a slow LLM answer
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _metrics() -> dict[str, Any] | None:
    """The metrics, registered once per process; None without prometheus_client."""
    global _METRICS
    with _LOCK:
        if _METRICS is None:
            try:
                from prometheus_client import Counter, Histogram
            except ImportError:
                return None
            _METRICS = {
                "requests": Counter("intentrank_http_requests", "Requests answered, by "
                                    "endpoint and status", ["method", "endpoint", "status"]),
                "errors": Counter("intentrank_http_errors", "Requests answered 4xx or 5xx, "
                                  "by endpoint and status class", ["method", "endpoint",
                                                                   "class"]),
                "latency": Histogram("intentrank_http_request_seconds", "Latency of a "
                                     "request, by endpoint", ["method", "endpoint"],
                                     buckets=BUCKETS),
                "pipeline_requests": Counter("intentrank_pipeline_requests", "Requests "
                                             "that ran a pipeline, by pipeline and status",
                                             ["pipeline", "status"]),
                "pipeline_errors": Counter("intentrank_pipeline_errors", "Requests that "
                                           "named a pipeline and were answered 4xx or 5xx",
                                           ["pipeline", "class"]),
                "pipeline_latency": Histogram("intentrank_pipeline_request_seconds",
                                              "Latency of a request that named a pipeline",
                                              ["pipeline"], buckets=BUCKETS),
            }
        return _METRICS


def endpoint_of(scope: dict[str, Any]) -> str:
    """The route's path template of an ASGI ``scope`` (after routing), else ``unmatched``."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else "unmatched"


def record(scope: dict[str, Any], status: int, seconds: float,
           pipeline: str | None) -> None:
    """Count one answered request (the gate calls this with its access-log line)."""
    m = _metrics()
    if m is None:
        return
    method, endpoint, code = str(scope.get("method")), endpoint_of(scope), str(status)
    m["requests"].labels(method, endpoint, code).inc()
    m["latency"].labels(method, endpoint).observe(seconds)
    failed = f"{status // 100}xx" if status >= 400 else None
    if failed:
        m["errors"].labels(method, endpoint, failed).inc()
    if pipeline is not None:
        m["pipeline_requests"].labels(pipeline, code).inc()
        m["pipeline_latency"].labels(pipeline).observe(seconds)
        if failed:
            m["pipeline_errors"].labels(pipeline, failed).inc()
