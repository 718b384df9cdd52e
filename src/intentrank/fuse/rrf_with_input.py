"""RRF of a reranker's output with its own input ranking."""

from __future__ import annotations

from typing import Any

from intentrank.core.fusion import check_fusion_weights
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import ConfigError
from intentrank.fuse.rrf import check_rrf_k, rrf
from intentrank.types import Ranking, Trace


class RRFWithInput(Stage):
    """RRF of each input ranking and ``stage``'s reranking of it: keeps the first stage's
    evidence when the reranker alone is weaker (the input is not retrieved again).
    ``weights``: ``[input, reranked]``, multiplying each list's RRF term (default equal)."""

    def __init__(self, stage: Stage, rrf_k: float = 60, name: str = "",
                 weights: list[float] | None = None) -> None:
        self.stage, self.rrf_k = stage, check_rrf_k(rrf_k)
        self.weights = None if weights is None else check_fusion_weights(weights, 2)
        self.name = name or "rrf_with_input"

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        trace = trace if trace is not None else Trace()
        with trace.enter(self) as path_id:  # the reranker runs below this stage's path id
            reranked = self.stage(list(rankings), trace)
            with trace.timed(path_id, n_queries=len(rankings)):
                out = []
                for before, after in zip(rankings, reranked, strict=True):
                    fused = rrf([before.doc_ids, after.doc_ids], rrf_k=self.rrf_k,
                                weights=self.weights)
                    out.append(Ranking.from_scores(after.query, fused, path_id, previous=after))
        return out

    def describe(self) -> str:
        w = f", weights={self.weights}" if self.weights else ""
        return f"rrf(input, {self.stage.describe()}, rrf_k={self.rrf_k:g}{w})"


@register_stage("rrf_with_input", renamed={"k": "rrf_k"})
def _rrf_with_input(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``rrf_with_input: {stage: <node>, rrf_k: 60, name: ce_rrf, weights: [1, 1]}``: RRF of
    the input ranking and ``stage``'s reranking of it (weights: input, reranked)."""
    from intentrank.core.config import build_pipeline

    if "stage" not in params:
        raise ConfigError("rrf_with_input: needs 'stage' (the reranker whose ranks are fused "
                          "with its input's)")
    inner = build_pipeline(params.pop("stage"), ctx, "rrf_with_input.stage")
    return RRFWithInput(inner, **params)
