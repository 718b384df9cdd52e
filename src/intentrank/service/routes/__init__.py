"""The service's routes by area, each an ``APIRouter`` whose operations take the caller
(:mod:`intentrank.service.principal`) as a dependency; ``ROUTERS`` in the order the
OpenAPI schema lists them."""

from __future__ import annotations

from intentrank.service.routes import (
    compat,
    documents,
    evaluate,
    metrics,
    pages,
    reports,
    rerank,
    search,
    service,
)

ROUTERS = [service.router, search.router, rerank.router, compat.router, evaluate.router,
           reports.router, documents.router, pages.router, metrics.router]
