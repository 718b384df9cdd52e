"""Retrieval stages over an :class:`~intentrank.index.Index`: BM25, dense, TF-IDF, sparse
(0.5 * minmax(BM25) + 0.5 * minmax(TF-IDF)) and entity graph.

A retriever's own ``filter`` (YAML ``- bm25: {depth: 100, filter: 'team = "a"'}``) is ANDed
with each query's :attr:`~intentrank.types.Query.filter`; the queries are searched in groups
of one combined filter each, with ``allow=index.allowed_rows(filter)``: the top ``depth``
among the documents it lets through (pre-filtering)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from intentrank.core.params import check_int, check_optional_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import ConfigError, DataError
from intentrank.filters import Filter, and_filters
from intentrank.fuse.weighted import WeightedFusion
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


class FilteredRetriever(Stage):
    """Base of the first stages that fill each ranking with the top ``depth`` documents its
    filter (``filter`` AND the query's) lets through: the queries are searched in groups of
    one combined filter each (:meth:`search_group`). The index retrievers below and the
    Postgres ones (:mod:`intentrank.retrieve.postgres`) are such stages."""

    stage = ""  # the registered name: the stage's name, and the label of its errors

    def __init__(self, index: Any, depth: int = 100,
                 filter: Filter | str | None = None) -> None:  # noqa: A002 (YAML's name)
        self.index = index
        self.depth = check_int("depth", depth)
        self.filter = Filter.from_value(filter, f"{self.stage}: filter")
        self.name = self.stage

    def search_group(self, texts: list[str], filter: Filter | None,  # noqa: A002
                     query_ids: list[str]) -> list[tuple[Sequence[str], Sequence[float]]]:
        """Each text's top ``depth`` (document ids, scores), best first, among the documents
        ``filter`` lets through (None: all); ``query_ids`` name the texts' queries."""
        raise NotImplementedError

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        texts = [check_query_text(r) for r in rankings]
        groups: dict[Filter | None, list[int]] = {}
        for i, r in enumerate(rankings):  # Query.filter is a Filter or None already
            groups.setdefault(and_filters(self.filter, r.query.filter), []).append(i)
        found: list[tuple[Sequence[str], Sequence[float]]] = [((), ())] * len(rankings)
        for filt, members in groups.items():
            hits = self.search_group([texts[i] for i in members], filt,
                                     [rankings[i].query.id for i in members])
            for i, h in zip(members, hits, strict=True):
                found[i] = h
        path_id = trace.path_of(self)
        trace.count(path_id, "empty_results", sum(1 for ids, _ in found if not len(ids)))
        if any(f is not None for f in groups):
            trace.count(path_id, "filtered_queries", sum(
                len(m) for f, m in groups.items() if f is not None))
        return [Ranking.from_hits(r.query, ids, scores, path_id)
                for r, (ids, scores) in zip(rankings, found, strict=True)]


class Retriever(FilteredRetriever):
    """Base for index retrievers: a stage named as the leg of the :class:`Index` it searches
    (``search_<stage>``)."""

    def search_rows(self, texts: list[str], filter: Filter | None = None) -> list[Hits]:  # noqa: A002
        """The index's search of this retriever's leg (``search_<leg>``), among the rows
        ``filter`` allows when given."""
        search = getattr(self.index, f"search_{self.stage}")
        if filter is None:
            return search(texts, self.depth)
        allowed_rows = getattr(self.index, "allowed_rows", None)
        if allowed_rows is None:
            raise ConfigError(f"{self.stage}: this index ({type(self.index).__name__}) cannot "
                              f"filter by metadata; filter: {filter}")
        return search(texts, self.depth, allow=allowed_rows(filter))

    def search_group(self, texts: list[str], filter: Filter | None,  # noqa: A002
                     query_ids: list[str]) -> list[tuple[Sequence[str], Sequence[float]]]:
        ids = self.index.id_array
        return [(ids[h.rows], h.scores) for h in self.search_rows(texts, filter)]

    def describe(self) -> str:
        return self.described(depth=self.depth,
                              filter=None if self.filter is None else repr(str(self.filter)))


class BM25Retriever(Retriever):
    stage = "bm25"


class DenseRetriever(Retriever):
    stage = "dense"


class TfidfRetriever(Retriever):
    stage = "tfidf"


class GraphRetriever(Retriever):
    stage = "graph"


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
    register_stage(_cls.stage, renamed={"k": "depth"})(
        lambda ctx, p, _cls=_cls: _cls(ctx.require_index(_cls.stage), **p))


@register_stage("sparse", renamed={"k": "depth"})
def _sparse(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    return sparse_retriever(ctx.require_index("sparse"), **params)
