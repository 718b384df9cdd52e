"""Alternate interleaving: the 1st of list 1, the 1st of list 2, ..., then the 2nd of each,
skipping documents already taken; the fused score is ``1 / position`` (1-based)."""

from __future__ import annotations

from collections.abc import Sequence

from intentrank.core.registry import register_fuser
from intentrank.fuse.base import FusionStage
from intentrank.types import Ranking, Trace


def interleave(rankings: Sequence[Sequence[str]]) -> list[str]:
    """Alternate between lists, skipping documents already taken."""
    seen: set[str] = set()
    out: list[str] = []
    depth = max((len(r) for r in rankings), default=0)
    for i in range(depth):
        for ranking in rankings:
            if i < len(ranking) and ranking[i] not in seen:
                seen.add(ranking[i])
                out.append(ranking[i])
    return out


@register_fuser
class InterleaveFusion(FusionStage):
    """Alternate interleaving with de-duplication (score = 1 / position)."""

    method = "interleave"

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        order = interleave([r.doc_ids for r in rankings])
        return {doc_id: 1.0 / pos for pos, doc_id in enumerate(order, start=1)}
