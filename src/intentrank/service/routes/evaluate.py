"""POST /evaluate: metrics of a run against qrels, both sent in the request (no index data);
needs the ``evaluate`` permission."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from intentrank.service.engine import RequestError
from intentrank.service.models import EvaluateRequest, EvaluateResponse
from intentrank.service.principal import Evaluator
from intentrank.service.routes.common import ERRORS, engine_of, work

router = APIRouter(tags=["evaluation"])


@router.post("/evaluate", response_model=EvaluateResponse, responses=ERRORS)
async def evaluate(body: EvaluateRequest, request: Request, who: Evaluator) -> dict[str, Any]:
    """Metrics (trec_eval semantics) of a TREC run against qrels, both as text."""
    if not body.metrics or len(body.metrics) > 20:
        raise RequestError(422, f"give 1 to 20 metrics, got {len(body.metrics)}")
    return await work(request, engine_of(request).evaluate, body.run, body.qrels,
                      body.metrics, body.per_query)
