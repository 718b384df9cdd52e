"""Weighted min-max fusion: each list's scores are min-max normalised over the candidates that
list returned (a list whose scores are all equal normalises to 1.0), then
``score(d) = sum_i w_i * norm_i(d)``; a missing document counts 0 for that list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from intentrank.core.registry import BuildContext, register_fuser
from intentrank.core.saved_params import load_params
from intentrank.core.stage import Chain, Stage
from intentrank.errors import ConfigError
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

    @classmethod
    def from_config(cls, branches: Sequence[Stage], ctx: BuildContext,
                    **params: Any) -> WeightedFusion:
        """``params: NAME`` takes the weights of a saved parameter set (``intentrank
        tune-modality``), one per branch by branch name (dense, sparse, graph)."""
        saved = params.pop("params", None)
        if saved is not None:
            if "weights" in params:
                raise ConfigError("give 'weights' or 'params', not both")
            if not isinstance(saved, str) or not saved.strip():
                raise ConfigError(f"'params' must name a saved parameter set, got {saved!r}")
            named = load_params(saved)
            names = [_branch_name(b) for b in branches]
            missing = [n for n in names if n not in named]
            if missing:
                raise ConfigError(f"parameter set {saved!r} has no weight for branch(es) "
                                  f"{missing} (it has {sorted(named)})")
            params["weights"] = [named[n] for n in names]
        return cls(branches, **params)

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        return weighted_minmax(
            [{d.doc_id: d.score for d in r.docs} for r in rankings], self.weights
        )


def _branch_name(branch: Stage) -> str:
    """A branch's name; a chain (e.g. ``sparse``: a fusion cut to k) is named by its head."""
    return branch.stages[0].name if isinstance(branch, Chain) else branch.name
