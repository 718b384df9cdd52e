"""POST /documents (add or replace), DELETE /documents/{doc_id} and POST /documents/delete
(by ids and/or a filter): the ``write`` permission, within the key's scope
(:mod:`intentrank.service.updates`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from intentrank.service import updates
from intentrank.service.models import DeleteRequest, UpdateResponse, UpsertRequest
from intentrank.service.principal import Principal, Writer
from intentrank.service.routes.common import ERRORS, engine_of, note, work
from intentrank.types import Document

router = APIRouter(tags=["documents"])
WRITE_ERRORS = {**ERRORS, 501: {"model": ERRORS[400]["model"],
                                "description": "this build cannot update indexes"}}


def _index(request: Request, name: str | None, who: Principal) -> str:
    index = engine_of(request).index_name(name, who.allows_index)
    note(request, index=index)
    who.check_index(index)
    return index


@router.post("/documents", response_model=UpdateResponse, responses=WRITE_ERRORS)
async def upsert_documents(body: UpsertRequest, request: Request, who: Writer
                           ) -> dict[str, Any]:
    """Add documents, or replace those whose id exists (unchanged ones are skipped); the
    service serves the new index generation when the response is sent."""
    index = _index(request, body.index, who)
    docs = [Document(d.id, d.text, d.title, d.parent_id, d.metadata) for d in body.documents]
    return await work(request, updates.upsert, engine_of(request), index, docs,
                      scope=who.scope)


@router.delete("/documents/{doc_id}", response_model=UpdateResponse, responses=WRITE_ERRORS)
async def delete_document(doc_id: str, request: Request, who: Writer,
                          index: str | None = None) -> dict[str, Any]:
    """Delete one document (of ``index``, default the first)."""
    name = _index(request, index, who)
    return await work(request, updates.delete, engine_of(request), name, [doc_id], None,
                      scope=who.scope)


@router.post("/documents/delete", response_model=UpdateResponse, responses=WRITE_ERRORS)
async def delete_documents(body: DeleteRequest, request: Request, who: Writer
                           ) -> dict[str, Any]:
    """Delete documents by id and/or by a filter (ANDed with the key's scope)."""
    name = _index(request, body.index, who)
    return await work(request, updates.delete, engine_of(request), name, body.ids,
                      body.filter, scope=who.scope)
