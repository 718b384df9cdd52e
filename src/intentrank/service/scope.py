"""What a caller may see of an index, enforced below the pipelines.

A request with a scope (its key's forced filter, ANDed with the request's own ``filter``,
which can only narrow it) runs its pipeline on a :class:`ScopedIndex`: a view of the index
whose every leg searches only the allowed rows (pre-filter: the top k among them) and whose
document reads (``doc``, ``doc_text``) refuse any other row. So whatever a stage does, it
can neither rank nor read (nor put into an LLM prompt) a document outside the scope: the
view is the one place that decides, and a refused read fails the request
(:class:`ScopeViolation`) rather than answering from it. The query carries the same filter
(``Query.filter``) for the retrievers' own filtering.

LLM replies are cached per scope (:func:`scoped_llm`), so a reply computed from one scope's
passages is never served to another scope, even for the same prompt."""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
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


class ScopedIndex:
    """``index`` as a caller with filter ``text`` sees it (see the module): its rows from
    ``Index.allowed_rows``, every leg searched with ``allow``; everything else (ids,
    settings, the embedder, query encoding) is the index's."""

    def __init__(self, index: Any, text: str) -> None:
        self._index, self.scope = index, text
        self.mask = np.asarray(index.allowed_rows(parse_scope(text)), dtype=bool)
        self.visible_count = int(self.mask.sum())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def __len__(self) -> int:
        return len(self._index)

    def visible(self, doc_id: str) -> bool:
        row = self._index.row_of.get(doc_id)
        return row is not None and bool(self.mask[row])

    def _check(self, doc_id: str) -> None:
        if not self.visible(doc_id):
            raise ScopeViolation(f"document {doc_id!r} is outside the request's scope")

    def doc(self, doc_id: str) -> Any:
        self._check(doc_id)
        return self._index.doc(doc_id)

    def doc_text(self, doc_id: str) -> str:
        self._check(doc_id)
        return self._index.doc_text(doc_id)

    @property
    def parent_of(self) -> dict[str, str]:
        return {p: d for p, d in self._index.parent_of.items() if self.visible(p)}

    @property
    def doc_and_parent_ids(self) -> set[str]:
        visible = {d for d in self._index.ids if self.visible(d)}
        return visible | {self._index.parent_of[p] for p in visible
                          if p in self._index.parent_of}

    def allowed_rows(self, flt: Any = None) -> np.ndarray:
        """The scope's rows, narrowed by ``flt`` (a Filter or its text) if given."""
        if flt is None:
            return self.mask
        return self.mask & np.asarray(self._index.allowed_rows(flt), dtype=bool)

    def _search(self, leg: str, texts: list[str], k: int, allow: np.ndarray | None,
                **extra: Any) -> list[Any]:
        mask = self.mask if allow is None else self.mask & np.asarray(allow, dtype=bool)
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
