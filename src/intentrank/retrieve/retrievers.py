"""Retrieval stages over an :class:`~intentrank.index.Index`: BM25, dense, TF-IDF, sparse
(0.5 * minmax(BM25) + 0.5 * minmax(TF-IDF)) and entity graph."""

from __future__ import annotations

from typing import Any

from intentrank.core.params import check_int, check_optional_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import DataError
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


class Retriever(Stage):
    """Base for index retrievers: fills each ranking with the top ``depth`` documents."""

    leg = ""

    def __init__(self, index: Index, depth: int = 100) -> None:
        self.index = index
        self.depth = check_int("depth", depth)
        self.name = self.leg

    def search_rows(self, texts: list[str]) -> list[Hits]:
        """The index's search of this retriever's leg (``search_<leg>``)."""
        return getattr(self.index, f"search_{self.leg}")(texts, self.depth)

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        texts = [check_query_text(r) for r in rankings]
        hits = self.search_rows(texts) if texts else []
        ids, path_id = self.index.id_array, trace.path_of(self)
        out = [Ranking.from_hits(r.query, ids[h.rows], h.scores, path_id)
               for r, h in zip(rankings, hits, strict=True)]
        trace.count(path_id, "empty_results", sum(1 for h in hits if not len(h.rows)))
        return out

    def describe(self) -> str:
        return self.described(depth=self.depth)


class BM25Retriever(Retriever):
    leg = "bm25"


class DenseRetriever(Retriever):
    leg = "dense"


class TfidfRetriever(Retriever):
    leg = "tfidf"


class GraphRetriever(Retriever):
    leg = "graph"


def sparse_retriever(index: Index, depth: int = 100, leg_depth: int | None = None) -> Stage:
    """0.5 * minmax(BM25) + 0.5 * minmax(TF-IDF), each leg searched to ``leg_depth`` (default
    ``depth``) and normalised over the candidates it returned; the fused list is cut at
    ``depth``."""
    depth = check_int("depth", depth)
    leg_depth = check_optional_int("leg_depth", leg_depth) or depth
    fused = WeightedFusion([BM25Retriever(index, leg_depth), TfidfRetriever(index, leg_depth)],
                           weights=[0.5, 0.5], name="sparse")
    return fused % depth


for _cls in (BM25Retriever, DenseRetriever, TfidfRetriever, GraphRetriever):
    register_stage(_cls.leg, renamed={"k": "depth"})(
        lambda ctx, p, _cls=_cls: _cls(ctx.require_index(_cls.leg), **p))


@register_stage("sparse", renamed={"k": "depth"})
def _sparse(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    return sparse_retriever(ctx.require_index("sparse"), **params)
