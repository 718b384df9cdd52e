"""The service's own Prometheus metrics: requests, errors and latency per endpoint and
pipeline, recorded by the gate (:class:`~intentrank.service.gate.Gate`) for every request,
refusals included (401, 403, 413, 429, 503 while draining or when the queue is full).

Labels: ``route`` is the route's template (``/documents/{doc_id}``, never the raw path;
``unmatched`` for a path no route serves), ``method`` (``OTHER`` for a method no route
knows), ``status`` the class (``2xx`` .. ``5xx``), ``pipeline`` the pipeline the request
ran or asked for once it was resolved (empty where the route runs none). Errors count
requests answered 4xx or 5xx, by exact ``code``. Each app has its own registry (a test
process makes many apps); ``GET /metrics`` renders it after the process's default
registry (the cluster index's per-replica metrics, :mod:`intentrank.scale.metrics`).
Counts and latencies only, never a query or a document."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

# seconds; a cached BM25 query is ~1 ms, an LLM stage several seconds
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
           30.0, 60.0)
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
LABELS = ("route", "method", "status", "pipeline")
UNMATCHED = "unmatched"


def route_template(scope: dict[str, Any], routes: Iterable[Any]) -> str:
    """The template of the route serving ``scope``: the one the router chose, or (for a
    request refused before routing) the first of ``routes`` whose path matches (any
    method: a 405 is still that route's)."""
    route = scope.get("route")
    if route is None:
        from starlette.routing import Match

        probe = {**scope, "type": "http"}
        for candidate in routes:
            try:
                match, _ = candidate.matches(probe)
            except Exception:  # noqa: BLE001 (a route that cannot judge: not this one)
                continue
            if match is not Match.NONE:
                route = candidate
                break
    path = getattr(route, "path", None)
    if path is None:
        return UNMATCHED
    return path or "/"


class ServiceMetrics:
    """The counters and the histogram of one app, in their own registry."""

    def __init__(self, routes: Callable[[], Iterable[Any]]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.routes = routes
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("intentrank_http_requests_total",
                                "HTTP requests answered, by route template, method, "
                                "status class and pipeline", LABELS, registry=self.registry)
        self.errors = Counter("intentrank_http_errors_total",
                              "HTTP requests answered 4xx or 5xx, by exact code",
                              ("route", "method", "code", "pipeline"),
                              registry=self.registry)
        self.latency = Histogram("intentrank_http_request_duration_seconds",
                                 "Seconds from a request's arrival to its answer", LABELS,
                                 buckets=BUCKETS, registry=self.registry)

    def observe(self, scope: dict[str, Any], info: dict[str, Any], status: int,
                seconds: float) -> None:
        """Record one answered request (called by the gate after its access-log line)."""
        route = route_template(scope, self.routes())
        method = str(scope.get("method") or "")
        method = method if method in METHODS else "OTHER"
        pipeline = str(info.get("pipeline") or "")
        status_class = f"{status // 100}xx"
        self.requests.labels(route, method, status_class, pipeline).inc()
        self.latency.labels(route, method, status_class, pipeline).observe(seconds)
        if status >= 400:
            self.errors.labels(route, method, str(status), pipeline).inc()

    def render(self) -> bytes:
        """This app's metrics in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def make(routes: Callable[[], Iterable[Any]]) -> ServiceMetrics | None:
    """:class:`ServiceMetrics`, or None where prometheus_client is not installed (then
    ``/metrics`` answers with the install hint, as before)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return None
    return ServiceMetrics(routes)
