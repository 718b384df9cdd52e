"""Document writes behind POST /documents and the deletes: the index's own
``intentrank.index.update`` (``upsert``, ``delete``: each commits a new generation
atomically), within the writer's scope, then the service switches to the new generation.

A scoped key may only add documents its scope matches, replace or delete documents it
sees, and delete by a filter ANDed with its scope; a document id taken by a document it
does not see is refused (403), never overwritten."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from intentrank.errors import IntentrankError
from intentrank.service import cluster
from intentrank.service.engine import Engine, RequestError
from intentrank.service.scope import parse_scope
from intentrank.types import Document

_WRITING = threading.Lock()  # one write at a time from this process (the index locks too)


def _update_module() -> Any:
    try:
        from intentrank.index import update
    except ImportError:
        raise RequestError(501, "document updates need intentrank.index.update, which this "
                                "build lacks") from None
    return update


def _directory(engine: Engine, index_name: str) -> Path:
    where = engine.settings.indexes[index_name]
    if not isinstance(where, (str, Path)):
        raise RequestError(422, f"index {index_name!r} is served as an object, not from a "
                                f"directory: it cannot be updated here")
    return Path(where)


def _stats(index_name: str, stats: Any, generation: str | None) -> dict[str, Any]:
    return {"index": index_name, **{k: getattr(stats, k, 0) for k in (
        "added", "replaced", "unchanged", "deleted")},
        "seconds": float(getattr(stats, "seconds", 0.0)), "generation": generation}


def _committed(engine: Engine, index_name: str, stats: Any) -> dict[str, Any]:
    """Switch the service to the generation the update committed."""
    engine.generations.reload()
    return _stats(index_name, stats, engine.generations.current.generations.get(index_name))


def upsert(engine: Engine, index_name: str, docs: list[Document],
           scope: str | None) -> dict[str, Any]:
    """Add or replace ``docs`` in index ``index_name`` within ``scope``."""
    if scope is not None:
        flt = parse_scope(scope)
        for i, d in enumerate(docs):
            if not flt.matches({**d.metadata, "id": d.id, "parent_id": d.parent_id}):
                raise RequestError(403, f"documents[{i}] ({d.id!r}): its metadata is outside "
                                        f"this key's scope")
        with engine.generations.use() as snap:
            view = engine.view(snap, index_name, scope)
            taken = [d.id for d in docs if d.id in view.row_of and not view.visible(d.id)]
        if taken:
            raise RequestError(403, f"document id {taken[0]!r} is taken by a document this "
                                    f"key does not see")
    if cluster.is_cluster(engine.indexes.get(index_name)):  # shards on Ray actors
        return cluster.upsert(engine, index_name, docs)
    update, path = _update_module(), _directory(engine, index_name)
    with _WRITING:
        try:
            stats = update.upsert(path, docs)
        except IntentrankError as exc:  # bad documents, a writer elsewhere holding the lock
            raise RequestError(422, f"not updated: {exc}") from None
        return _committed(engine, index_name, stats)


def delete(engine: Engine, index_name: str, ids: list[str] | None, user_filter: str | None,
           scope: str | None) -> dict[str, Any]:
    """Delete documents by id and/or by a filter, within ``scope``."""
    if not ids and user_filter is None:
        raise RequestError(422, "give 'ids', 'filter' or both")
    on_cluster = cluster.is_cluster(engine.indexes.get(index_name))  # shards on Ray actors
    if not on_cluster:
        update, path = _update_module(), _directory(engine, index_name)
    with engine.generations.use() as snap:
        idx = snap.indexes[index_name]
        seen = engine.view(snap, index_name, scope) if scope is not None else None
        for doc_id in ids or ():  # a passage, or a parent: all its passages
            rows = [doc_id] if doc_id in idx.row_of else \
                [p for p, parent in idx.parent_of.items() if parent == doc_id]
            if not rows or (seen is not None and not all(map(seen.visible, rows))):
                raise RequestError(404, f"no document {doc_id!r} among the documents of "
                                        f"index {index_name!r} this key sees")
    flt = engine.request_filter(scope, user_filter) if user_filter is not None else None
    if on_cluster:
        return cluster.delete(engine, index_name, ids,
                              parse_scope(flt) if flt is not None else None)
    with _WRITING:
        try:
            stats = update.delete(path, ids=list(ids or ()),
                                  filter=parse_scope(flt) if flt is not None else None)
        except IntentrankError as exc:
            raise RequestError(422, f"not updated: {exc}") from None
        return _committed(engine, index_name, stats)
