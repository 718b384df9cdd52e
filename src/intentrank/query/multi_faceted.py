"""Multi-faceted retrieval (RichRAG, method 4): run a retriever (or any pipeline node) once
per ``query + aspect`` (the aspects the ``aspects`` stage pushed; the query alone when there
are none), keep the top ``depth`` of each list and merge them into one de-duplicated pool.

Every pooled document remembers which aspects found it and with what score: the stage
score ``<path>.aspect<i>`` is the retriever's score for aspect ``i`` (0-based, in the order
of ``query.derived_of("aspect")``), present only for the aspects whose list held it. The
pool is ordered by ``merge``:

- ``max`` (default): the best score over the aspect lists (the "max-score pool" baseline;
  the scores of one retriever for different query texts are on one scale);
- ``rrf``: reciprocal rank fusion of the aspect lists (``rrf_k``, default 60): RAG-Fusion.
"""

from __future__ import annotations

from typing import Any

from intentrank.core.params import ParameterError, check_choice, check_optional_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.fuse.rrf import check_rrf_k, rrf
from intentrank.query.aspects import aspects_of
from intentrank.types import Query, Ranking, ScoredDoc, Trace

MERGES = ("max", "rrf")
SEP = "\x1f"


def aspect_text(query: str, aspect: str) -> str:
    """What is searched for one aspect: ``query + aspect`` (the query alone as its own
    aspect, the fallback, is not doubled)."""
    return query if aspect == query else f"{query} {aspect}"


def aspect_part(path_id: str, i: int) -> str:
    """The stage-score name of aspect ``i``'s score (``multi_faceted.aspect0``)."""
    return f"{path_id}.aspect{i}"


class MultiFacetedRetriever(Stage):
    """Retrieve for every ``query + aspect`` and pool the lists (see the module doc)."""

    def __init__(self, retriever: Stage, depth: int | None = None, merge: str = "max",
                 rrf_k: float = 60, name: str = "multi_faceted") -> None:
        if not isinstance(retriever, Stage):
            raise ParameterError(f"retriever must be a stage, got {retriever!r}")
        self.retriever, self.depth = retriever, check_optional_int("depth", depth)
        self.merge = check_choice("merge", merge, MERGES)
        self.rrf_k, self.name = check_rrf_k(rrf_k), name

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        queries = [r.query for r in rankings]
        expanded = [Ranking(Query(f"{q.id}{SEP}{i}", aspect_text(q.text, a),
                                   filter=q.filter))
                    for q in queries for i, a in enumerate(aspects_of(q))]
        lists: dict[str, list[Ranking]] = {}
        for r in self.retriever(expanded, trace):
            lists.setdefault(r.query.id.rsplit(SEP, 1)[0], []).append(r.top(self.depth)
                                                                      if self.depth else r)
        out = [self._pool(q, lists.get(q.id, []), path_id) for q in queries]
        trace.count(path_id, "aspect_queries", len(expanded))
        trace.count(path_id, "pooled", sum(len(r.docs) for r in out))
        return out

    def _pool(self, query: Query, lists: list[Ranking], path_id: str) -> Ranking:
        parts: dict[str, dict[str, float]] = {}
        for i, ranking in enumerate(lists):
            for d in ranking.docs:
                parts.setdefault(d.doc_id, {})[aspect_part(path_id, i)] = float(d.score)
        if self.merge == "rrf":
            scores = rrf([r.doc_ids for r in lists], rrf_k=self.rrf_k)
        else:
            scores = {doc: max(p.values()) for doc, p in parts.items()}
        ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        return Ranking(query, [ScoredDoc(doc, float(s), {**parts[doc], path_id: float(s)})
                               for doc, s in ordered])

    def describe(self) -> str:
        return self.described(self.retriever.describe(), depth=self.depth, merge=self.merge,
                              rrf_k=self.rrf_k if self.merge == "rrf" else None)


def aspects_found(doc: ScoredDoc, path_id: str = "multi_faceted") -> dict[int, float]:
    """Aspect number -> score, for the aspects whose list held ``doc`` (read back from its
    stage scores)."""
    prefix = f"{path_id}.aspect"
    return {int(name[len(prefix):]): v for name, v in doc.stage_scores.items()
            if name.startswith(prefix) and name[len(prefix):].isdigit()}


@register_stage("multi_faceted", renamed={"k": "depth"})
def _multi_faceted(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``multi_faceted: {retriever: <node>, depth: 30, merge: max|rrf, rrf_k: 60}``: one
    search per ``query + aspect``, pooled (``merge: rrf`` is RAG-Fusion)."""
    from intentrank.core.config import build_pipeline

    retriever = build_pipeline(params.pop("retriever", "dense"), ctx,
                               "multi_faceted.retriever")
    return MultiFacetedRetriever(retriever, **params)
