"""GET /metrics (no key, like /health): the process's Prometheus metrics in the text format,
prometheus_client's default registry: the service's requests, errors and latency per endpoint
and per pipeline (:mod:`intentrank.service.metrics`); a cluster index's per shard replica
latency, errors, retries and hedges (:mod:`intentrank.scale.metrics`); counts and latencies
only, never a query or a document."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter(tags=["service"])


@router.get("/metrics", response_class=Response)
async def metrics() -> Response:
    """The metrics in Prometheus' text format."""
    from intentrank.extras import require

    client = require("prometheus_client", "service", "GET /metrics")
    return Response(client.generate_latest(), media_type=client.CONTENT_TYPE_LATEST)
