"""Weighted min-max fusion: each list's scores are min-max normalised over the candidates that
list returned (a list whose scores are all equal normalises to 1.0), then
``score(d) = sum_i w_i * norm_i(d)``; a missing document counts 0 for that list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from intentrank.core.registry import register_fuser
from intentrank.fuse.base import FusionStage, check_fusion_weights, minmax
from intentrank.types import Ranking, Trace


def weighted_minmax(
    score_lists: Sequence[Mapping[str, float]], weights: Sequence[float] | None = None
) -> dict[str, float]:
    """Sum of weighted min-max normalised scores; absent documents count 0."""
    ws = check_fusion_weights(weights, len(score_lists))
    fused: dict[str, float] = {}
    for w, scores in zip(ws, score_lists, strict=True):
        for doc_id, s in minmax(scores).items():
            fused[doc_id] = fused.get(doc_id, 0.0) + w * s
    return fused



@register_fuser
class WeightedFusion(FusionStage):
    """Weighted sum of min-max normalised scores."""

    method = "weighted"

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        return weighted_minmax(
            [{d.doc_id: d.score for d in r.docs} for r in rankings], self.weights
        )
