"""What a caller may see of an index, enforced below the pipelines.

Every request carries a :class:`Scope` (its key's forced filter, ANDed with the request's own
``filter``, which can only narrow it), which every engine and update call requires. A
request with a filter runs its pipeline on a :class:`ScopedIndex`: a view of the index
whose every leg searches only the allowed rows (pre-filter: the top k among them) and whose
document reads (``doc``, ``doc_text``) refuse any other row. So whatever a stage does, it
can neither rank nor read (nor put into an LLM prompt) a document outside the scope: the
view is the one place that decides, and a refused read fails the request
(:class:`ScopeViolation`) rather than answering from it. The query carries the same filter
(``Query.filter``) for the retrievers' own filtering. Writes are checked by the same view.

LLM replies are cached per scope (:func:`scoped_llm`), so a reply computed from one scope's
passages is never served to another scope, even for the same prompt."""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from intentrank.errors import IntentrankError


class ScopeViolation(IntentrankError):
    """A stage asked for a document outside the request's scope (the request fails)."""


def parse_scope(text: str) -> Any:
    """A filter of :mod:`intentrank.filters` from its text; bad text is a FilterError
    (a ValueError) naming the position and the token."""
    from intentrank.filters import parse_filter

    return parse_filter(text)


def combine(*texts: str | None) -> str | None:
    """The filters' conjunction as text (None parts ignored): a user's filter ANDed to a
    forced scope can only narrow it."""
    from intentrank.filters import and_filters

    combined = and_filters(*(parse_scope(t) for t in texts if t is not None))
    return None if combined is None else str(combined)


@dataclass(frozen=True)
class Scope:
    """What one request may see and write, required by every engine and update call (no
    default: a call that forgets it is a TypeError, never an unscoped request).

    ``filter``: the text of the filter every read is ANDed with (the key's forced scope,
    narrowed by the request's own filter); None: every document. ``namespace``: the prefix
    a scoped writer's new ids must start with (``<key name>:``); None: any id."""

    filter: str | None
    namespace: str | None

    @classmethod
    def everything(cls) -> Scope:
        """Every document, any id (keys off, or a key without tenant, groups or filter)."""
        return cls(None, None)

    @classmethod
    def of_key(cls, name: str, forced: str | None) -> Scope:
        """The scope of key ``name`` whose forced filter is ``forced``."""
        return cls.everything() if forced is None else cls(forced, f"{name}:")

    def narrowed(self, user: str | None) -> Scope:
        """This scope ANDed with a request's ``user`` filter (which can only narrow it); a
        malformed one is a FilterError (a ValueError naming the position and the token)."""
        return self if user is None else replace(self, filter=combine(self.filter, user))

    @property
    def whole(self) -> bool:
        """Whether it sees every document."""
        return self.filter is None


def require_scope(scope: Any) -> Scope:
    """``scope`` if it is a :class:`Scope`; a TypeError otherwise (a filter's text passed by
    hand, or None, is refused rather than run unscoped)."""
    if not isinstance(scope, Scope):
        raise TypeError(f"scope must be a Scope, not {type(scope).__name__}: every engine and "
                        f"update call states what the caller may see")
    return scope


class RowGuard:
    """A row-aligned array of the index (``id_array``, ``embeddings``) read through a scope:
    indexing rows the scope allows gives the index's values; any other row is a
    :class:`ScopeViolation`. Nothing else of the array is reachable."""

    __slots__ = ("_array", "_mask", "_what")

    def __init__(self, array: Any, mask: np.ndarray, what: str) -> None:
        self._array, self._mask, self._what = array, mask, what

    def __len__(self) -> int:
        return len(self._mask)

    def __getitem__(self, key: Any) -> Any:
        rows = key[0] if isinstance(key, tuple) else key
        if isinstance(rows, slice):
            rows = np.arange(len(self._mask))[rows]
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        if rows.size and not bool(np.all(self._mask[rows.astype(np.int64)])):
            raise ScopeViolation(f"{self._what}: a row outside the request's scope")
        return self._array[key]


class ScopedReads:
    """The document reads both scoped views share (:class:`ScopedIndex`, and
    :class:`~intentrank.service.pg_scope.PgScopedIndex` for a Postgres table): ``doc`` and
    ``doc_text`` of an id the view's :meth:`visible` refuses raise :class:`ScopeViolation`;
    any other is read from the index."""

    _index: Any

    def visible(self, doc_id: str) -> bool:
        """Whether the scope lets ``doc_id`` be read."""
        raise NotImplementedError

    def _check(self, doc_id: str) -> None:
        if not self.visible(doc_id):
            raise ScopeViolation(f"document {doc_id!r} is outside the request's scope")

    def doc(self, doc_id: str) -> Any:
        self._check(doc_id)
        return self._index.doc(doc_id)

    def doc_text(self, doc_id: str) -> str:
        self._check(doc_id)
        return self._index.doc_text(doc_id)


class ScopedIndex(ScopedReads):
    """``index`` as a caller with :class:`Scope` ``scope`` sees it (see the module).

    It answers only the names of :attr:`EXPOSED` (no attribute passes through to the index):
    ``len``, ``ids``, ``row_of``, ``parent_of``, ``doc_and_parent_ids`` and ``documents()``
    hold only the visible documents; ``doc`` and ``doc_text`` of any other id, and rows of
    ``id_array`` or ``embeddings`` outside the scope, raise :class:`ScopeViolation`. Rows are
    the index's own (``row_of``, ``allowed_rows``, ``id_array``, ``embeddings`` are aligned
    with it), so a stage learns the index's number of rows, never another row's id, text,
    metadata or vector. ``settings``, ``embedder``, ``encode_queries`` and ``has`` hold no
    document. Writes are checked by the same view (:meth:`write_refusal`,
    :meth:`deletable`)."""

    EXPOSED = ("scope", "visible_count", "visible", "ids", "row_of", "id_array", "embeddings",
               "parent_of", "doc_and_parent_ids", "documents", "doc", "doc_text",
               "allowed_rows", "search_bm25", "search_dense", "search_tfidf", "search_graph",
               "settings", "embedder", "encode_queries", "has", "write_refusal", "deletable")

    def __init__(self, index: Any, scope: Scope) -> None:
        self._index, self.scope = index, require_scope(scope)
        rows = None if scope.whole else index.allowed_rows(parse_scope(scope.filter))
        self._mask = np.ones(len(index), dtype=bool) if rows is None else \
            np.asarray(rows, dtype=bool)
        self._mask.setflags(write=False)
        self.visible_count = int(self._mask.sum())
        self._ids: list[str] | None = None
        self._parents: dict[str, str] | None = None

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"a scoped view of an index has no {name!r}: it exposes only "
                             f"{', '.join(self.EXPOSED)}")

    def __len__(self) -> int:
        return self.visible_count

    # -- documents -----------------------------------------------------------------------
    def visible(self, doc_id: str) -> bool:
        row = self._index.row_of.get(doc_id)
        return row is not None and bool(self._mask[row])

    @property
    def ids(self) -> list[str]:
        """The visible documents' ids, in row order."""
        if self._ids is None:
            self._ids = [d for d in self._index.ids if self.visible(d)]
        return self._ids

    @property
    def row_of(self) -> Mapping[str, int]:
        """Visible id -> its row in the index."""
        return _VisibleRows(self)

    @property
    def id_array(self) -> RowGuard:
        return RowGuard(self._index.id_array, self._mask, "id_array")

    @property
    def embeddings(self) -> RowGuard:
        return RowGuard(self._index.embeddings, self._mask, "embeddings")

    @property
    def parent_of(self) -> dict[str, str]:
        """Visible passage id -> its parent document's id."""
        if self._parents is None:
            self._parents = {p: d for p, d in self._index.parent_of.items()
                             if self.visible(p)}
        return self._parents

    @property
    def doc_and_parent_ids(self) -> set[str]:
        return set(self.ids) | set(self.parent_of.values())

    def documents(self) -> Iterator[Any]:
        """The visible documents, in row order."""
        return map(self.doc, self.ids)

    # -- search ----------------------------------------------------------------------------
    def allowed_rows(self, flt: Any = None) -> np.ndarray:
        """The scope's rows, narrowed by ``flt`` (a Filter or its text) if given."""
        if flt is None:
            return self._mask
        rows = self._index.allowed_rows(flt)
        return self._mask if rows is None else self._mask & np.asarray(rows, dtype=bool)

    def _search(self, leg: str, texts: list[str], k: int, allow: np.ndarray | None,
                **extra: Any) -> list[Any]:
        mask = self._mask if allow is None else self._mask & np.asarray(allow, dtype=bool)
        return getattr(self._index, f"search_{leg}")(texts, k, allow=mask, **extra)

    def search_bm25(self, texts: list[str], k: int, allow: np.ndarray | None = None
                    ) -> list[Any]:
        return self._search("bm25", texts, k, allow)

    def search_dense(self, texts: list[str], k: int, query_vectors: np.ndarray | None = None,
                     allow: np.ndarray | None = None) -> list[Any]:
        return self._search("dense", texts, k, allow, query_vectors=query_vectors)

    def search_tfidf(self, texts: list[str], k: int, allow: np.ndarray | None = None
                     ) -> list[Any]:
        return self._search("tfidf", texts, k, allow)

    def search_graph(self, texts: list[str], k: int, allow: np.ndarray | None = None
                     ) -> list[Any]:
        return self._search("graph", texts, k, allow)

    # -- what holds no document ------------------------------------------------------------
    @property
    def settings(self) -> Any:
        return self._index.settings

    @property
    def embedder(self) -> Any:
        return self._index.embedder

    def encode_queries(self, texts: list[str]) -> Any:
        return self._index.encode_queries(texts)

    def has(self, leg: str) -> bool:
        return bool(self._index.has(leg))

    # -- writes ----------------------------------------------------------------------------
    def write_refusal(self, doc: Any) -> tuple[int, str] | None:
        """Why the caller may not add or replace ``doc`` (an HTTP status and a reason), or
        None. The answer for an id outside the scope is the same whether a document holds it
        or not: a visible id is replaced; any other id must start with the scope's
        namespace."""
        record = {**doc.metadata, "id": doc.id, "parent_id": doc.parent_id}
        if not self.scope.whole and not parse_scope(self.scope.filter).matches(record):
            return 403, "its metadata is outside this key's scope"
        ns = self.scope.namespace
        if self.visible(doc.id) or ns is None:
            return None
        if not doc.id.startswith(ns):
            return 422, (f"a new document's id must start with this key's namespace {ns!r} "
                         f"(any other id can only replace a document this key sees)")
        if doc.id in self._index.row_of:  # only an unscoped writer can have put it there
            return 409, (f"its id, in this key's namespace {ns!r}, is held by a document this "
                         f"key does not see (written by an unscoped key or the operator)")
        return None

    def deletable(self, doc_id: str) -> bool:
        """Whether ``doc_id`` names a visible passage, or a parent whose passages are all
        visible (and at least one): what a delete by id may remove."""
        if doc_id in self._index.row_of:
            return self.visible(doc_id)
        rows = [p for p, parent in self._index.parent_of.items() if parent == doc_id]
        return bool(rows) and all(map(self.visible, rows))


class _VisibleRows(Mapping[str, int]):
    """``row_of`` of a :class:`ScopedIndex`: the visible ids only."""

    def __init__(self, view: ScopedIndex) -> None:
        self._view = view

    def __getitem__(self, doc_id: str) -> int:
        if not self._view.visible(doc_id):
            raise KeyError(doc_id)
        return int(self._view._index.row_of[doc_id])

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self._view.visible(doc_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._view.ids)

    def __len__(self) -> int:
        return self._view.visible_count


class ScopedReplyCache:
    """An LLM reply cache seen through a scope: every key is prefixed by the scope's digest,
    so two scopes never share a reply."""

    def __init__(self, inner: Any, scope: str) -> None:
        self._inner = inner
        self._prefix = hashlib.sha256(scope.encode("utf-8")).hexdigest()

    def _key(self, key: str) -> str:
        return hashlib.sha256(f"{self._prefix}:{key}".encode()).hexdigest()

    def get(self, key: str) -> Any:
        return self._inner.get(self._key(key))

    def put(self, key: str, reply: Any, backend: str, model: str) -> None:
        self._inner.put(self._key(key), reply, backend, model)

    def __len__(self) -> int:
        return len(self._inner)


def scoped_llm(client: Any, scope: str) -> Any:
    """``client`` (an LLM client) with its reply cache seen through ``scope``; the backend,
    retries and concurrency slots stay shared."""
    if getattr(client, "cache", None) is None:
        return client
    view = copy.copy(client)
    view.cache = ScopedReplyCache(client.cache, scope)
    return view


class Recent:
    """The ``limit`` most recently used values by key, each made once when missing."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, ...], Any] = OrderedDict()

    def get(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        made = make()  # outside the lock: a build may take a while
        with self._lock:
            made = self._items.setdefault(key, made)
            self._items.move_to_end(key)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)
            return made


class Views:
    """What one index generation keeps for scoped requests: the scoped views (a row mask
    each) by (index, filter), and the pipelines built on them by (pipeline, index, filter),
    the most recently used of each."""

    def __init__(self, views: int = 64, stages: int = 512) -> None:
        self.views, self.stages = Recent(views), Recent(stages)
