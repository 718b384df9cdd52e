"""What every fusion shares: a stage that runs branches on the same input and merges their
rankings per query (:class:`FusionStage`, defined in ``core/stage.py`` with the operators, as
``a | b`` needs it), the weight check, and min-max normalisation. One file per method beside
this one."""

from __future__ import annotations

from collections.abc import Mapping

from intentrank.core.fusion import check_fusion_weights
from intentrank.core.stage import FusionStage

__all__ = ["FusionStage", "check_fusion_weights", "minmax"]


def minmax(scores: Mapping[str, float]) -> dict[str, float]:
    """Min-max normalise to [0, 1]; a constant list maps to 1.0."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return {d: 1.0 for d in scores}
    return {d: (s - lo) / (hi - lo) for d, s in scores.items()}
