"""POST /rerank: the caller's own passages reranked; no index data is read (only the first
index's query encoder, for rerankers that embed the query)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from intentrank.service.engine import RequestError
from intentrank.service.models import RerankRequest, SearchResponse
from intentrank.service.principal import Reader
from intentrank.service.routes.common import ERRORS, check_text, engine_of, limits_of, note, work
from intentrank.types import Document

router = APIRouter(tags=["retrieval"])


@router.post("/rerank", response_model=SearchResponse, responses=ERRORS)
async def rerank(body: RerankRequest, request: Request, who: Reader) -> dict[str, Any]:
    """Rerank your own passages (in the order given) for a query with a reranker."""
    limits, engine = limits_of(request), engine_of(request)
    check_text("query", body.query, limits.max_query_chars)
    if len(body.candidates) > limits.max_candidates:
        raise RequestError(422, f"{len(body.candidates)} candidates; the limit is "
                                f"{limits.max_candidates}")
    if body.top_k is not None and body.top_k > limits.max_top_k:
        raise RequestError(422, f"top_k is {body.top_k}; the limit is {limits.max_top_k}")
    docs, seen = [], set()
    for i, c in enumerate(body.candidates):
        doc_id = c.id if c.id is not None else f"c{i + 1}"
        if not doc_id.strip() or len(doc_id) > 200:
            raise RequestError(422, f"candidates[{i}].id must be 1 to 200 characters")
        if doc_id in seen:
            raise RequestError(422, f"candidates[{i}].id {doc_id!r} is given twice")
        seen.add(doc_id)
        check_text(f"candidates[{i}].text", c.text, limits.max_candidate_chars)
        check_text(f"candidates[{i}].title", c.title, limits.max_query_chars, blank_ok=True)
        docs.append(Document(doc_id, c.text, c.title))
    served = engine.pipeline(body.pipeline, "rerank")
    note(request, pipeline=served.name)
    who.check_pipeline(served.name)
    return await work(request, engine.rerank, served, body.query, docs, body.top_k,
                      scope=who.scope)
