"""Map passage rankings back to their parent documents (max passage score)."""

from __future__ import annotations

from typing import Any

from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.index.store import Index
from intentrank.types import Ranking, Trace


class ParentDocuments(Stage):
    """Replace each passage by its parent document, scored by its best passage (MaxP). It
    brings in no document of its own: under a filter, a parent is there because a passage
    the filter let through is (the filter is on passages)."""

    name = "parents"

    def __init__(self, index: Index) -> None:
        self.parent_of = index.parent_of

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        out = []
        for r in rankings:
            best: dict[str, float] = {}
            for d in r.docs:
                parent = self.parent_of.get(d.doc_id, d.doc_id)
                if parent not in best:
                    best[parent] = d.score
            out.append(Ranking.from_scores(r.query, best, trace.path_of(self)))
        return out


@register_stage("parents")
def _parents(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    return ParentDocuments(ctx.require_index("parents"), **params)
