"""Reciprocal rank fusion (Cormack et al., 2009), pinned down because peers disagree:
``score(d) = sum_i w_i / (rrf_k + rank_i(d))`` with ranks **1-based** (the top document has
rank 1), ``rrf_k = 60`` by default and weights ``w_i`` (default 1) multiplying each list's whole
contribution. A document missing from list ``i`` gets nothing from it. Ties are broken by
document id. This is the meaning of ``a | b``."""

from __future__ import annotations

from collections.abc import Sequence

from intentrank.core.params import check_number
from intentrank.core.registry import register_fuser
from intentrank.core.stage import Stage
from intentrank.fuse.base import FusionStage, check_fusion_weights
from intentrank.types import Ranking, Trace


def check_rrf_k(rrf_k: float) -> float:
    """RRF's constant must be a finite number > 0: ``rrf_k <= -1`` divides by zero at some
    rank and any rrf_k <= 0 gives the top ranks scores out of proportion (silently wrong
    fusions)."""
    return check_number("rrf_k", rrf_k, above=0)


def rrf(
    rankings: Sequence[Sequence[str]], rrf_k: float = 60, weights: Sequence[float] | None = None
) -> dict[str, float]:
    """Reciprocal rank fusion of ordered doc-id lists (ranks 1-based, weights per list)."""
    rrf_k = check_rrf_k(rrf_k)
    ws = check_fusion_weights(weights, len(rankings))
    fused: dict[str, float] = {}
    for w, ranking in zip(ws, rankings, strict=True):
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + w / (rrf_k + rank)
    return fused



@register_fuser
class RRFFusion(FusionStage):
    """Reciprocal rank fusion (1-based ranks, weights multiply each list's term)."""

    method = "rrf"
    renamed = {"k": "rrf_k"}

    def __init__(
        self, branches: Sequence[Stage], weights: Sequence[float] | None = None,
        rrf_k: float = 60, name: str | None = None,
    ) -> None:
        self.rrf_k = check_rrf_k(rrf_k)
        super().__init__(branches, weights, name)

    def fusion_params(self) -> tuple:
        return (self.rrf_k,)

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        return rrf([r.doc_ids for r in rankings], rrf_k=self.rrf_k, weights=self.weights)

    def describe(self) -> str:
        return super().describe()[:-1] + f", rrf_k={self.rrf_k:g})"
