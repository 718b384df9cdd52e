"""Per shard replica metrics of a cluster index, in Prometheus' text format.

Each :class:`~intentrank.scale.coordinator.ClusterIndex` records, per (index, shard,
replica): call latency (a histogram), errors (calls that failed: the replica died, was
unreachable or answered after the deadline), retries (calls sent to another replica after a
failure) and hedges (a second replica asked because the first had not answered within the
hedge delay). The collectors live in the process's default prometheus_client registry, so
any ``/metrics`` endpoint rendering it (``generate_latest()``) shows them; the service's
``/metrics`` does (:mod:`intentrank.service.routes.metrics`)."""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_METRICS: dict[str, Any] = {}
LABELS = ("index", "shard", "replica")
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def replica_metrics() -> dict[str, Any]:
    """The process's shard replica collectors (made once, in the default registry)."""
    from prometheus_client import Counter, Gauge, Histogram

    with _LOCK:
        if not _METRICS:
            _METRICS.update(
                latency=Histogram("intentrank_shard_replica_latency_seconds",
                                  "Latency of calls to a shard replica", LABELS,
                                  buckets=BUCKETS),
                errors=Counter("intentrank_shard_replica_errors_total",
                               "Calls to a shard replica that failed or timed out", LABELS),
                retries=Counter("intentrank_shard_replica_retries_total",
                                "Calls retried on this replica after another failed", LABELS),
                hedges=Counter("intentrank_shard_replica_hedges_total",
                               "Calls sent to this replica because another was slow",
                               LABELS),
                up=Gauge("intentrank_shard_replica_up",
                         "1 if the replica answered its last call or check", LABELS))
        return _METRICS


def render() -> bytes:
    """The default registry in Prometheus' text format."""
    from prometheus_client import generate_latest

    return generate_latest()
