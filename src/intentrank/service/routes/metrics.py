"""GET /metrics (no key, like /health): the process's Prometheus metrics in the text format:
prometheus_client's default registry (a cluster index's per shard replica latency, errors,
retries and hedges, :mod:`intentrank.scale.metrics`), then the service's own requests,
errors and latency per endpoint and pipeline (:mod:`intentrank.service.metrics`). Counts
and latencies only, never a query or a document."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

router = APIRouter(tags=["service"])


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """The metrics in Prometheus' text format."""
    from intentrank.extras import require

    client = require("prometheus_client", "service", "GET /metrics")
    own = getattr(request.app.state, "metrics", None)
    text = client.generate_latest() + (own.render() if own is not None else b"")
    return Response(text, media_type=client.CONTENT_TYPE_LATEST)
