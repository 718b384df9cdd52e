"""A Postgres-backed index (:class:`~intentrank.index.postgres.PgIndex`) as a scoped caller
sees it: the key's forced filter is pushed down into every search's ``WHERE`` (pre-filtered
in Postgres, not a row mask), and a document read outside it is refused with
:class:`ScopeViolation`, as :class:`~intentrank.service.scope.ScopedIndex` does for an
intentrank index. :func:`scoped_view` picks the view for either kind of index."""

from __future__ import annotations

import threading
from typing import Any

from intentrank.filters import Filter, and_filters
from intentrank.index.postgres import PgIndex
from intentrank.service.scope import Scope, ScopedIndex, ScopedReads, require_scope


def scoped_view(index: Any, scope: Scope) -> Any:
    """``index`` as a caller with ``scope`` sees it."""
    if isinstance(index, PgIndex | PgScopedIndex):
        return PgScopedIndex(index, scope)
    return ScopedIndex(index, scope)


class PgScopedIndex(ScopedReads):
    """A :class:`PgIndex` seen through a request's :class:`Scope` (see the module). Like
    :class:`ScopedIndex` it answers only the names of :attr:`EXPOSED`."""

    EXPOSED = ("scope", "visible_count", "visible", "ids", "row_of", "doc_and_parent_ids",
               "doc", "doc_text", "search_vector", "search_fts", "count", "allows", "table",
               "settings", "embedder", "encode_queries", "has")
    _PASSED = frozenset({"table", "settings", "embedder", "encode_queries", "has"})

    def __init__(self, index: PgIndex | PgScopedIndex, scope: Scope) -> None:
        scope = require_scope(scope)
        if isinstance(index, PgScopedIndex):  # a view of a view: both filters
            scope = scope.narrowed(index.scope.filter)
            index = index._index
        self._index, self.scope = index, scope
        self._filter = None if scope.whole else Filter.from_value(scope.filter)
        self._seen: set[str] = set()  # rows a scoped search returned: visible
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name in PgScopedIndex._PASSED:  # they hold no document
            return getattr(self._index, name)
        raise AttributeError(f"a scoped view of a Postgres table has no {name!r}: it exposes "
                             f"only {', '.join(self.EXPOSED)}")

    def __len__(self) -> int:  # the documents this scope sees, as ScopedIndex
        return self.visible_count

    def __bool__(self) -> bool:
        return True

    @property
    def visible_count(self) -> int:
        return self._index.count(self._filter)

    def visible(self, doc_id: str) -> bool:
        with self._lock:
            if doc_id in self._seen:
                return True
        ok = self._index.allows(doc_id, self._filter)
        if ok:
            with self._lock:
                self._seen.add(doc_id)
        return ok

    @property
    def ids(self) -> list[str]:
        return self._index.ids_where(self._filter)

    @property
    def row_of(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.ids)}

    @property
    def doc_and_parent_ids(self) -> set[str]:
        return set(self.ids)

    def _seen_hits(self, found: list[list[tuple[str, float]]]) -> list[list[tuple[str, float]]]:
        with self._lock:
            self._seen.update(d for hits in found for d, _ in hits)
        return found

    def search_vector(self, texts: list[str], k: int, flt: Filter | str | None = None,
                      **kw: Any) -> list[list[tuple[str, float]]]:
        return self._seen_hits(self._index.search_vector(
            texts, k, and_filters(self._filter, flt), **kw))

    def search_fts(self, texts: list[str], k: int, flt: Filter | str | None = None,
                   **kw: Any) -> list[list[tuple[str, float]]]:
        return self._seen_hits(self._index.search_fts(
            texts, k, and_filters(self._filter, flt), **kw))

    def count(self, flt: Filter | str | None = None) -> int:
        return self._index.count(and_filters(self._filter, flt))

    def allows(self, doc_id: str, flt: Filter | str | None) -> bool:
        return self._index.allows(doc_id, and_filters(self._filter, flt))
