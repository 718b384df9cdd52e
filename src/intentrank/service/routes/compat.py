"""The providers' APIs: POST /v1/rerank and /v2/rerank as Cohere's rerank, POST
/v1/embeddings as OpenAI's embeddings (docs/integrations.md), so those providers' clients
work with ``base_url`` set to this server: same keys, scopes, limits, pool and log; their
errors are 400/404 in each provider's shape (:func:`~intentrank.service.gate.error_body`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from intentrank.service.engine import RequestError
from intentrank.service.models import (
    CohereErrorOut,
    CohereRerankRequest,
    CohereRerankResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    OpenAIErrorOut,
)
from intentrank.service.principal import Reader
from intentrank.service.routes.common import (
    check_text,
    compatible_errors,
    engine_of,
    limits_of,
    note,
    run,
)
from intentrank.service.settings import Limits

router = APIRouter(tags=["compatible APIs"])


def rerank_texts(body: CohereRerankRequest, limits: Limits) -> list[str]:
    """The text each document is reranked by, checked against the limits."""
    if not body.documents:
        raise RequestError(400, "documents is empty: give 1 to "
                                f"{limits.max_candidates} documents")
    if len(body.documents) > limits.max_candidates:
        raise RequestError(400, f"{len(body.documents)} documents; the limit is "
                                f"{limits.max_candidates}")
    fields = body.rank_fields or ["text"]
    if any(not f for f in fields):
        raise RequestError(400, "rank_fields: a field name is empty")
    texts = []
    for i, doc in enumerate(body.documents):
        if isinstance(doc, str):  # its own text, whatever rank_fields names
            text = doc
        else:
            missing = [f for f in fields if not isinstance(doc.get(f), str)]
            if missing:
                raise RequestError(400, f"documents[{i}] has no string field "
                                        f"{missing[0]!r} (rank_fields: {fields})")
            text = " ".join(doc[f] for f in fields)
        check_text(f"documents[{i}]", text, limits.max_candidate_chars)
        texts.append(text)
    return texts


cohere: dict[str, Any] = {
    "response_model": CohereRerankResponse,
    "responses": compatible_errors(CohereErrorOut, (400, 401, 403, 404, 413, 503, 504))}


@router.post("/v2/rerank", summary="Cohere Rerank (v2 path)", **cohere)
@router.post("/v1/rerank", **cohere)
async def cohere_rerank(body: CohereRerankRequest, request: Request, who: Reader) -> Response:
    """Cohere's rerank (the `cohere` clients' `Client.rerank` and `ClientV2.rerank` with
    `base_url` set to this server): `model` is a reranker name from GET /pipelines;
    `relevance_score` is the reranker's own score, `index` the document's position.
    Limits as POST /rerank (documents: max_candidates, each max_candidate_chars); a bad
    request is 400, an unknown model 404."""
    limits, engine = limits_of(request), engine_of(request)
    check_text("query", body.query, limits.max_query_chars)
    if body.top_n is not None and body.top_n < 1:
        raise RequestError(400, f"top_n must be at least 1, got {body.top_n}")
    texts = rerank_texts(body, limits)
    rerankers = [n for n, s in engine.pipelines.items() if s.kind == "rerank"]
    name = body.model if body.model is not None else next(iter(rerankers), None)
    served = engine.pipelines.get(name) if name is not None else None
    if served is None or served.kind != "rerank":
        raise RequestError(404, f"unknown model {name!r}: the models here are the "
                                f"served rerankers: {', '.join(rerankers) or 'none'}")
    note(request, pipeline=served.name)
    who.check_pipeline(served.name)
    result = await run(request, engine.rerank_texts, served, body.query, texts,
                       body.top_n or len(texts), scope=who.scope)
    del result["fallbacks"]
    if body.return_documents:
        for r in result["results"]:
            doc = body.documents[r["index"]]
            r["document"] = {"text": doc} if isinstance(doc, str) else doc
    version = "2" if request.scope["path"].startswith("/v2/") else "1"
    result["id"] = request.scope["intentrank"]["request_id"]
    result["meta"] = {"api_version": {"version": version},
                      "billed_units": {"search_units": -(-len(texts) // 100)}}
    return JSONResponse(result)


@router.post("/v1/embeddings", response_model=EmbeddingsResponse,
             responses=compatible_errors(OpenAIErrorOut, (400, 401, 404, 413, 503, 504)))
async def embeddings(body: EmbeddingsRequest, request: Request, who: Reader) -> Response:
    """OpenAI's embeddings (the `openai` client's `embeddings.create` with `base_url`
    set to this server's /v1): `model` is an index name, whose dense query encoder
    encodes each input as a dense search encodes a query. Any valid key may use it.
    Limits: max_candidates inputs of max_candidate_chars; a bad request is 400, an
    unknown model 404."""
    limits, engine = limits_of(request), engine_of(request)
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if not texts:
        raise RequestError(400, "input is empty: give a text or a list of 1 to "
                                f"{limits.max_candidates} texts")
    if len(texts) > limits.max_candidates:
        raise RequestError(400, f"{len(texts)} inputs; the limit is {limits.max_candidates}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise RequestError(400, f"input[{i}] is token ids; this service embeds "
                                    f"text: send strings")
        check_text(f"input[{i}]", text, limits.max_candidate_chars)
    models = [m for m in engine.embedding_models() if who.allows_index(m)]
    name = body.model if body.model is not None else next(iter(models), None)
    if name not in models:
        raise RequestError(404, f"unknown model {name!r}: the models here are the "
                                f"served indexes with a dense leg: "
                                f"{', '.join(models) or 'none'}")
    note(request, index=name)
    dim = getattr(getattr(engine.indexes[name], "embedder", None), "dim", None)
    if body.dimensions is not None and body.dimensions != dim:
        raise RequestError(400, f"dimensions is {body.dimensions}; model {name!r} gives "
                                f"{dim}-dimensional embeddings (no truncation)")
    return JSONResponse(await run(request, engine.embed, name, texts,
                                  body.encoding_format == "base64", scope=who.scope))
