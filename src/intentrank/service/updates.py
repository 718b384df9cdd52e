"""Document writes behind POST /documents and the deletes: the index's own
``intentrank.index.update`` (``upsert``, ``delete``: each commits a new generation
atomically), within the writer's scope, then the service switches to the new generation.
Under ``serve --watch-index`` a write does not run the tiered merge policy itself: the
background merger (:mod:`intentrank.service.merging`) merges after the switch, off the
request.

Every write is checked by the caller's :class:`~intentrank.service.scope.ScopedIndex`, the
view its reads go through: a scoped key may only add documents its scope matches, replace
or delete documents it sees, create new ids only in its namespace (``<key name>:``), and
delete by a filter ANDed with its scope. An id outside its scope gets the same answer
whether a document holds it or not (docs/security.md, "Document ids")."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from intentrank.errors import IntentrankError
from intentrank.service import cluster
from intentrank.service.engine import Engine, RequestError
from intentrank.service.scope import Scope, parse_scope, require_scope
from intentrank.types import Document

_WRITING = threading.Lock()  # one write at a time from this process (the index locks too)
MERGE_WAIT_S = 300.0
"""A write waits this long for the service's running background merge (which holds the
index's writer lock) before trying anyway."""


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


def _after_merge(engine: Engine) -> Any:
    """The service's background merger (``serve --watch-index``; None without one), once its
    merge under way, which holds the index's writer lock, has ended (a write waits for it
    instead of failing). A write to an index it watches commits its segment and leaves the
    tiered policy's merges to it (it starts after the switch to the write's generation,
    :mod:`.merging`)."""
    merger = getattr(engine.generations, "merger", None)
    if merger is not None:
        merger.join(MERGE_WAIT_S)
    return merger


def _committed(engine: Engine, index_name: str, stats: Any) -> dict[str, Any]:
    """Switch the service to the generation the update committed."""
    engine.generations.reload()
    return _stats(index_name, stats, engine.generations.current.generations.get(index_name))


def upsert(engine: Engine, index_name: str, docs: list[Document], *, scope: Scope
           ) -> dict[str, Any]:
    """Add or replace ``docs`` in index ``index_name`` within ``scope``, each checked by the
    scope's view (:meth:`ScopedIndex.write_refusal`)."""
    require_scope(scope)
    with engine.generations.use() as snap:
        view = engine.view(snap, index_name, scope)
        for i, d in enumerate(docs):
            refusal = view.write_refusal(d)
            if refusal is not None:
                raise RequestError(refusal[0], f"documents[{i}] ({d.id!r}): {refusal[1]}")
    if cluster.is_cluster(engine.indexes.get(index_name)):  # shards on Ray actors
        return cluster.upsert(engine, index_name, docs)
    update, path = _update_module(), _directory(engine, index_name)
    with _WRITING:
        merger = _after_merge(engine)
        inline = merger is None or index_name not in merger.watched
        try:
            stats = update.upsert(path, docs, merge_policy=inline)
        except IntentrankError as exc:  # bad documents, a writer elsewhere holding the lock
            raise RequestError(422, f"not updated: {exc}") from None
        return _committed(engine, index_name, stats)


def delete(engine: Engine, index_name: str, ids: list[str] | None, user_filter: str | None,
           *, scope: Scope) -> dict[str, Any]:
    """Delete documents by id (each checked by the scope's view: one it does not see is a
    404, as an absent one) and/or by a filter ANDed with ``scope``."""
    require_scope(scope)
    if not ids and user_filter is None:
        raise RequestError(422, "give 'ids', 'filter' or both")
    on_cluster = cluster.is_cluster(engine.indexes.get(index_name))  # shards on Ray actors
    if not on_cluster:
        update, path = _update_module(), _directory(engine, index_name)
    with engine.generations.use() as snap:
        view = engine.view(snap, index_name, scope)
        for doc_id in ids or ():  # a passage, or a parent: all its passages
            if not view.deletable(doc_id):
                raise RequestError(404, f"no document {doc_id!r} among the documents of "
                                        f"index {index_name!r} this key sees")
    flt = engine.request_scope(scope, user_filter).filter if user_filter is not None else None
    if on_cluster:
        return cluster.delete(engine, index_name, ids,
                              parse_scope(flt) if flt is not None else None)
    with _WRITING:
        _after_merge(engine)  # (a delete never merges by policy)
        try:
            stats = update.delete(path, ids=list(ids or ()),
                                  filter=parse_scope(flt) if flt is not None else None)
        except IntentrankError as exc:
            raise RequestError(422, f"not updated: {exc}") from None
        return _committed(engine, index_name, stats)
