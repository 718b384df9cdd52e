"""Per-element reranking (knowledge-aware diverse reranking, method 5): rerank the top
``top_k`` (N_rank) once per knowledge element, with ``question + element`` as the query, and
interleave the per-element lists (alternating picks, no repeats) into the final order.
``against: element`` scores against the element alone (an ablation, as coverage's
``against: aspect``: a long question leaves the element little weight in a 128-token window).
``with_question: true`` (not in the paper) lets the incoming order, the ranking against the
question itself, take part in the interleave as its first list, so a question that needs one
document keeps that document near the top whatever the elements say (no extra reranker calls).

The elements are those a ``knowledge`` stage pushed; a query without any keeps its ranking
(counted ``no_elements``). The interleaved head scores ``1 / position``; every document keeps
its earlier scores and gets the inner reranker's score for element ``i`` as
``<path>.element<i>``; documents below ``top_k`` stay below, in order.
"""

from __future__ import annotations

from typing import Any

from intentrank.core.params import ParameterError, check_bool, check_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.fuse.interleave import interleave
from intentrank.query.knowledge import knowledge_of
from intentrank.rerank.base import rerank_head
from intentrank.types import Query, Ranking, Trace

SEP = "\x1f"


AGAINST = ("question+element", "element")


def element_query(question: str, element: str, against: str = AGAINST[0]) -> str:
    """What the reranker scores against for one element: ``question + element`` (the
    paper's), or the element alone."""
    return element if against == "element" else f"{question} {element}"


class PerElementRerank(Stage):
    """Rerank the head once per knowledge element and interleave (see the module doc)."""

    def __init__(self, reranker: Stage, top_k: int = 100, against: str = AGAINST[0],
                 with_question: bool = False, name: str = "per_element") -> None:
        if not isinstance(reranker, Stage):
            raise ParameterError(f"reranker must be a stage, got {reranker!r}")
        if against not in AGAINST:
            raise ParameterError(f"against must be one of {', '.join(AGAINST)}, got {against!r}")
        self.reranker, self.top_k, self.name = reranker, check_int("top_k", top_k), name
        self.against = against
        self.with_question = check_bool("with_question", with_question)

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        expanded = []
        for r in rankings:
            head = r.docs[:self.top_k]
            for i, element in enumerate(knowledge_of(r)):
                query = Query(f"{r.query.id}{SEP}{i}",
                              element_query(r.query.text, element, self.against),
                              filter=r.query.filter)
                expanded.append(Ranking(query, list(head)))
        lists: dict[str, list[Ranking]] = {}
        for out in (self.reranker(expanded, trace) if expanded else []):
            lists.setdefault(out.query.id.rsplit(SEP, 1)[0], []).append(out)
        trace.count(path_id, "element_queries", len(expanded))
        result = []
        for r in rankings:
            mine = lists.get(r.query.id, [])
            if not mine:
                trace.count(path_id, "no_elements")
                result.append(r)
                continue
            heads = [m.doc_ids[:self.top_k] for m in mine]
            if self.with_question:
                heads.insert(0, r.doc_ids[:self.top_k])
            order = interleave(heads)
            extra: dict[str, dict[str, float]] = {}
            for i, m in enumerate(mine):
                for d in m.docs[:self.top_k]:
                    extra.setdefault(d.doc_id, {})[f"{path_id}.element{i}"] = float(d.score)
            scores = {doc: 1.0 / pos for pos, doc in enumerate(order, start=1)}
            result.append(rerank_head(r, scores, path_id, extra))
        return result

    def describe(self) -> str:
        return self.described(self.reranker.describe(), top_k=self.top_k,
                              against=None if self.against == AGAINST[0] else self.against,
                              with_question=self.with_question or None)


@register_stage("per_element")
def _per_element(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``per_element: {reranker: <node>, top_k: 100, against: question+element,
    with_question: false}``: rerank the top ``top_k`` once per knowledge element
    (``question + element``, or ``element`` alone) and interleave (``with_question``: the
    incoming order first); the reranker defaults to the bundled cross-encoder."""
    from intentrank.core.config import build_pipeline

    reranker = build_pipeline(params.pop("reranker", "cross_encoder"), ctx,
                              "per_element.reranker")
    return PerElementRerank(reranker, **params)
