"""Retrieval stages over an :class:`~intentrank.index.Index`: BM25, dense, TF-IDF, sparse
(0.5 * minmax(BM25) + 0.5 * minmax(TF-IDF)) and entity graph.

A retriever's own ``filter`` (YAML ``- bm25: {depth: 100, filter: 'team = "a"'}``) is ANDed
with each query's :attr:`~intentrank.types.Query.filter`; the queries are searched in groups
of one combined filter each, with ``allow=index.allowed_rows(filter)``: the top ``depth``
among the documents it lets through (pre-filtering)."""

from __future__ import annotations

from typing import Any

from intentrank.core.params import check_int, check_optional_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import ConfigError, DataError
from intentrank.filters import Filter, and_filters
from intentrank.fuse.weighted import WeightedFusion
from intentrank.index.hits import NO_HITS
from intentrank.index.store import Hits, Index
from intentrank.types import Ranking, Trace

MAX_QUERY_CHARS = 20_000


def check_query_text(ranking: Ranking) -> str:
    """The text a retriever searches with; empty or huge queries raise a clear error."""
    text = ranking.query.text
    if not text.strip():
        raise DataError(f"query {ranking.query.id!r} is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise DataError(f"query {ranking.query.id!r} has {len(text)} characters; the limit is "
                        f"{MAX_QUERY_CHARS} (cut it or retrieve with passages of it)")
    return text


class Retriever(Stage):
    """Base for index retrievers: fills each ranking with the top ``depth`` documents that
    its filter (``filter`` AND the query's) lets through."""

    leg = ""

    def __init__(self, index: Index, depth: int = 100,
                 filter: Filter | str | None = None) -> None:  # noqa: A002 (YAML's name)
        self.index = index
        self.depth = check_int("depth", depth)
        self.filter = Filter.from_value(filter, f"{self.leg}: filter")
        self.name = self.leg

    def search_rows(self, texts: list[str], filter: Filter | None = None) -> list[Hits]:  # noqa: A002
        """The index's search of this retriever's leg (``search_<leg>``), among the rows
        ``filter`` allows when given."""
        search = getattr(self.index, f"search_{self.leg}")
        if filter is None:
            return search(texts, self.depth)
        allowed_rows = getattr(self.index, "allowed_rows", None)
        if allowed_rows is None:
            raise ConfigError(f"{self.leg}: this index ({type(self.index).__name__}) cannot "
                              f"filter by metadata; filter: {filter}")
        return search(texts, self.depth, allow=allowed_rows(filter))

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        texts = [check_query_text(r) for r in rankings]
        groups: dict[Filter | None, list[int]] = {}
        own = self.filter
        for i, r in enumerate(rankings):  # Query.filter is a Filter or None already
            both = r.query.filter if own is None else and_filters(own, r.query.filter)
            groups.setdefault(both, []).append(i)
        hits: list[Hits] = [NO_HITS] * len(rankings)
        for filt, members in groups.items():
            found = self.search_rows([texts[i] for i in members], filt)
            for i, h in zip(members, found, strict=True):
                hits[i] = h
        ids, path_id = self.index.id_array, trace.path_of(self)
        out = [Ranking.from_hits(r.query, ids[h.rows], h.scores, path_id)
               for r, h in zip(rankings, hits, strict=True)]
        trace.count(path_id, "empty_results", sum(1 for h in hits if not len(h.rows)))
        if any(f is not None for f in groups):
            trace.count(path_id, "filtered_queries", sum(
                len(m) for f, m in groups.items() if f is not None))
        return out

    def describe(self) -> str:
        return self.described(depth=self.depth,
                              filter=None if self.filter is None else repr(str(self.filter)))


class BM25Retriever(Retriever):
    leg = "bm25"


class DenseRetriever(Retriever):
    leg = "dense"


class TfidfRetriever(Retriever):
    leg = "tfidf"


class GraphRetriever(Retriever):
    leg = "graph"


def sparse_retriever(index: Index, depth: int = 100, leg_depth: int | None = None,
                     filter: Filter | str | None = None) -> Stage:  # noqa: A002
    """0.5 * minmax(BM25) + 0.5 * minmax(TF-IDF), each leg searched to ``leg_depth`` (default
    ``depth``, among the documents ``filter`` lets through) and normalised over the
    candidates it returned; the fused list is cut at ``depth``."""
    depth = check_int("depth", depth)
    leg_depth = check_optional_int("leg_depth", leg_depth) or depth
    fused = WeightedFusion([BM25Retriever(index, leg_depth, filter),
                            TfidfRetriever(index, leg_depth, filter)],
                           weights=[0.5, 0.5], name="sparse")
    return fused % depth


for _cls in (BM25Retriever, DenseRetriever, TfidfRetriever, GraphRetriever):
    register_stage(_cls.leg, renamed={"k": "depth"})(
        lambda ctx, p, _cls=_cls: _cls(ctx.require_index(_cls.leg), **p))


@register_stage("sparse", renamed={"k": "depth"})
def _sparse(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    return sparse_retriever(ctx.require_index("sparse"), **params)
