"""GET /health (no key: liveness and load) and GET /pipelines (what the caller may use)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from intentrank.service import cluster
from intentrank.service.models import HealthResponse, PipelinesResponse
from intentrank.service.principal import Caller
from intentrank.service.routes.common import ERRORS, engine_of, settings_of

router = APIRouter(tags=["service"])


@router.get("/health", response_model=HealthResponse)
async def health(request: Request) -> dict[str, Any]:
    """Liveness and load, the index generation each index is served from (with the
    number of generation switches since start-up) and, for a cluster index, its shards,
    replicas, hosts and replication; needs no key."""
    engine, pool = engine_of(request), request.app.state.pool
    clusters = await run_in_threadpool(cluster.health, engine.indexes)
    return {"status": "ok", "indexes": len(engine.indexes),
            "pipelines": len(engine.pipelines), "in_flight": pool.in_flight,
            "workers": pool.workers, "queue_limit": pool.queue_limit,
            "generations": engine.generations.current.generations,
            "reloads": engine.generations.reloads,
            "reload_errors": engine.generations.reload_errors, "clusters": clusters}


@router.get("/pipelines", response_model=PipelinesResponse, responses=ERRORS)
async def pipelines(request: Request, who: Caller) -> dict[str, Any]:
    """The indexes your key may use (with the number of documents it sees in each), the
    pipelines (search) and rerankers, and the request limits."""
    engine, settings = engine_of(request), settings_of(request)
    return {
        "indexes": [{"name": n, "documents": engine.visible_documents(n, scope=who.scope)}
                    for n in engine.indexes if who.allows_index(n)],
        "pipelines": [{"name": s.name, "kind": s.kind, "description": s.description,
                       "answers": s.answers, "allowed": who.allows(s.name)}
                      for s in engine.pipelines.values()],
        "default_pipeline": settings.default, "limits": vars(settings.limits)}
