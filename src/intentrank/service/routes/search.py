"""POST /search and POST /answer: a pipeline over an index, within the caller's scope (its
key's forced filter ANDed with the request's ``filter``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from intentrank.service.engine import RequestError, Served
from intentrank.service.models import AnswerResponse, SearchRequest, SearchResponse
from intentrank.service.principal import Principal, Reader
from intentrank.service.routes.common import (
    ERRORS,
    check_text,
    engine_of,
    limits_of,
    note,
    settings_of,
    work,
)
from intentrank.service.scope import Scope
from intentrank.types import Query, Turn

router = APIRouter(tags=["retrieval"])


def check_search(request: Request, body: SearchRequest) -> tuple[str, tuple[Turn, ...]]:
    """The question and the earlier turns, checked against the limits."""
    limits = limits_of(request)
    if (body.query is None) == (body.conversation is None):
        raise RequestError(422, "give exactly one of 'query' and 'conversation'")
    if body.top_k > limits.max_top_k:
        raise RequestError(422, f"top_k is {body.top_k}; the limit is {limits.max_top_k}")
    if body.filter is not None:
        check_text("filter", body.filter, limits.max_query_chars)
    if body.query is not None:
        check_text("query", body.query, limits.max_query_chars)
        return body.query, ()
    conv = body.conversation
    assert conv is not None
    if len(conv.turns) > limits.max_turns:
        raise RequestError(422, f"the conversation has {len(conv.turns)} earlier turns; "
                                f"the limit is {limits.max_turns}")
    check_text("conversation.question", conv.question, limits.max_query_chars)
    for i, t in enumerate(conv.turns):
        check_text(f"conversation.turns[{i}].question", t.question, limits.max_query_chars)
        check_text(f"conversation.turns[{i}].answer", t.answer, limits.max_candidate_chars,
                   blank_ok=True)
    return conv.question, tuple(Turn(t.question, t.answer) for t in conv.turns)


def prepared(request: Request, body: SearchRequest, who: Principal
             ) -> tuple[Served, str, Query, Scope]:
    """The pipeline, the index, the query and the scope the request runs with."""
    engine, settings = engine_of(request), settings_of(request)
    text, history = check_search(request, body)
    index = engine.index_name(body.index, who.allows_index)
    note(request, index=index)
    who.check_index(index)
    served = engine.pipeline(body.pipeline or settings.default_for(bool(history)), "search")
    note(request, pipeline=served.name)
    who.check_pipeline(served.name)
    if settings.log_texts:
        note(request, query=text, filter=body.filter)
    scope = engine.request_scope(who.scope, body.filter)
    return served, index, Query("q", text, history=history), scope


@router.post("/search", response_model=SearchResponse, responses=ERRORS)
async def search(body: SearchRequest, request: Request, who: Reader) -> dict[str, Any]:
    """Run a pipeline on a query or a conversation: the ranking with every stage's
    score and rank, and the per-stage trace (seconds, LLM calls, cache hits,
    fallbacks)."""
    served, index, query, scope = prepared(request, body, who)
    return await work(request, engine_of(request).search, served, index, query, body.top_k,
                      body.include_text, False, scope=scope)


@router.post("/answer", response_model=AnswerResponse, responses=ERRORS)
async def answer(body: SearchRequest, request: Request, who: Reader) -> dict[str, Any]:
    """Run a pipeline whose last stage writes an answer: the answer with its numbered
    citations, and the ranking and trace as /search gives them."""
    engine = engine_of(request)
    served, index, query, scope = prepared(request, body, who)
    if not served.answers:
        answering = [n for n, s in engine.pipelines.items() if s.answers]
        raise RequestError(422, f"pipeline {served.name!r} does not produce answers "
                                f"(answering pipelines: {', '.join(answering) or 'none'})")
    return await work(request, engine.search, served, index, query, body.top_k,
                      body.include_text, True, scope=scope)
