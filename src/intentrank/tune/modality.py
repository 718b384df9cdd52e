"""Tune the static tri-modal weights (dense / sparse / graph) on judged queries, never on test.

One pass of the three legs serves the whole grid: the fused ranking keeps every leg's score
in its stage scores (``weighted/dense``, ``weighted/sparse``, ``weighted/graph``: the legs'
path ids), and re-weighting their per-query min-max normalised columns (a document a leg did
not return counts 0) gives exactly the scores of
:class:`~intentrank.fuse.weighted.WeightedFusion` with those weights. The grid is
the simplex of weights summing to 1 in steps of ``step`` (0.1: 66 points, 0.05: 231).

The weights are picked on a train or validation split (:func:`tune_modality_on_split`, which
refuses ``test``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from intentrank.core.protocols import IndexLike
from intentrank.data.dataset import refuse_test_split
from intentrank.data.trec import Qrels
from intentrank.errors import ConfigError
from intentrank.fuse.weighted import WeightedFusion
from intentrank.tune.grid import TuneResult, grid_search
from intentrank.types import Query, Ranking

FEATURES = ("dense", "sparse", "graph")
# the legs' stage scores in a weighted fusion's output (their path ids below the fusion)
SCORES = tuple(f"{WeightedFusion.method}/{leg}" for leg in FEATURES)
ModalityWeights = tuple[float, float, float]


def simplex_grid(step: float = 0.1) -> list[ModalityWeights]:
    """Every (dense, sparse, graph) in multiples of ``step`` summing to 1."""
    n = round(1 / step) if step > 0 else 0
    if n < 1 or abs(n * step - 1) > 1e-9:
        raise ConfigError(f"the weight step must divide 1 (e.g. 0.05 or 0.1), got {step}")
    return [(round(i / n, 10), round(j / n, 10), round((n - i - j) / n, 10))
            for i in range(n + 1) for j in range(n + 1 - i)]


def modality_rankings(index: IndexLike, queries: Sequence[Query],
                      depth: int = 100) -> list[Ranking]:
    """Each leg's top ``depth`` fused without a cut-off, so every grid point ranks the same
    candidates with the legs' scores in the stage scores."""
    from intentrank.retrieve.retrievers import DenseRetriever, GraphRetriever, sparse_retriever

    sparse = sparse_retriever(index, depth)
    fusion = WeightedFusion([DenseRetriever(index, depth), sparse, GraphRetriever(index, depth)])
    return fusion.run(queries).rankings


def _check_scored(rankings: Sequence[Ranking]) -> None:
    for r in rankings:
        if r.docs and not any(f in r.docs[0].stage_scores for f in SCORES):
            raise ConfigError(f"query {r.query.id!r} has no dense/sparse/graph stage scores; "
                              f"tune on modality_rankings() output")


def tune_modality_weights(rankings: Sequence[Ranking], qrels: Qrels, metric: str = "nDCG@10",
                          step: float = 0.1) -> TuneResult:
    """The simplex point maximising ``metric`` on ``rankings`` (best as dense/sparse/graph)."""
    _check_scored(rankings)
    points = [dict(zip(FEATURES, w, strict=True)) for w in simplex_grid(step)]
    return grid_search(rankings, qrels, SCORES, points, metric=metric, normalise=True)


def tune_modality_on_split(dataset: Any, index: IndexLike, split: str = "train",
                           metric: str = "nDCG@10", step: float = 0.1, sample: int = 0,
                           seed: int = 0, depth: int = 100) -> TuneResult:
    """Grid-search the static weights on ``split`` (optionally a fixed-seed sample)."""
    refuse_test_split(split, "tune modality weights")
    queries, qrels = dataset.sample(split, sample, seed)
    return tune_modality_weights(modality_rankings(index, queries, depth), qrels, metric, step)


__all__ = ["FEATURES", "SCORES", "modality_rankings", "simplex_grid", "tune_modality_on_split",
           "tune_modality_weights"]
