"""Fusion scores the algebra needs: reciprocal rank fusion (the meaning of ``a | b``) and the
weight check every fusion shares. Pure functions of ranked doc-id lists; the stage classes
(:class:`~intentrank.core.stage.FusionStage`, :class:`~intentrank.core.stage.RRFFusion`)
live with the operators in ``core/stage.py``.

RRF (Cormack et al., 2009), pinned down because peers disagree:
``score(d) = sum_i w_i / (rrf_k + rank_i(d))`` with ranks **1-based** (the top document has
rank 1), ``rrf_k = 60`` by default and weights ``w_i`` (default 1) multiplying each list's whole
contribution. A document missing from list ``i`` gets nothing from it. Ties are broken by
document id."""

from __future__ import annotations

from collections.abc import Sequence

from intentrank.core.params import check_number, check_weights


def check_fusion_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """``n`` finite non-negative weights (all 1 when None); :class:`ParameterError` (a
    ValueError) otherwise."""
    if weights is None:
        return [1.0] * n
    return check_weights(weights, n)


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
