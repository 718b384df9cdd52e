"""Tune linear score weights by grid search on training queries, never on test.

Stages that combine several signals (FUQ's three components, the tri-modal weights) keep
each signal in the per-stage scores of their output; tuning re-weights those columns, so one
pass of the expensive stages serves the whole grid. Without a train split, weights are tuned
by k-fold cross-validation over queries: each fold is ranked with weights tuned on the others.
Tuned weights are saved as named parameter sets (``core/saved_params.py``) and reused.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from intentrank.data.trec import Qrels, Run, ranked_scores
from intentrank.errors import ConfigError
from intentrank.measures.metrics import evaluate
from intentrank.types import Ranking

Grid = Mapping[str, Sequence[float]]


@dataclass
class TuneResult:
    """Best weights, their score, and every grid point tried (best first)."""

    metric: str
    best: dict[str, float]
    score: float
    n_queries: int
    table: list[tuple[dict[str, float], float]] = field(default_factory=list)


def feature_matrix(ranking: Ranking, features: Sequence[str],
                   normalise: bool = False) -> tuple[list[str], np.ndarray]:
    """Doc ids and their ``features`` columns from stage scores (missing = 0; optional
    per-query min-max of each column over the documents that have it)."""
    ids = ranking.doc_ids
    mat = np.zeros((len(ids), len(features)))
    for j, name in enumerate(features):
        col = [(i, d.stage_scores[name]) for i, d in enumerate(ranking.docs)
               if name in d.stage_scores]
        if not col:
            continue
        rows, vals = zip(*col, strict=True)
        v = np.asarray(vals, dtype=float)
        if normalise:
            span = v.max() - v.min()
            v = (v - v.min()) / span if span > 0 else np.ones_like(v)
        mat[list(rows), j] = v
    return ids, mat


def weighted_run(cache: Mapping[str, tuple[list[str], np.ndarray]], weights: Sequence[float],
                 ) -> Run:
    """The run that scores each document by ``features . weights``, in the order a stage
    ranks them (score, ties by doc id: ``Ranking.from_scores``) with ties nudged apart
    (:func:`~intentrank.data.trec.ranked_scores`), so tuning evaluates that order."""
    w = np.asarray(weights, dtype=float)
    return {qid: ranked_scores(sorted(zip(ids, (mat @ w).tolist(), strict=True),
                                      key=lambda kv: (-kv[1], kv[0])))
            for qid, (ids, mat) in cache.items()}


def grid_points(grid: Grid) -> list[dict[str, float]]:
    """Every combination of the grid's values, all-zero combinations left out."""
    points = [dict(zip(grid, vals, strict=True)) for vals in itertools.product(*grid.values())]
    return [p for p in points if any(v != 0 for v in p.values())]


def grid_search(
    rankings: Sequence[Ranking],
    qrels: Qrels,
    features: Sequence[str],
    grid: Grid | Sequence[Mapping[str, float]],
    to_weights: Any = None,
    metric: str = "nDCG@10",
    normalise: bool = False,
) -> TuneResult:
    """Pick the grid point maximising ``metric`` over the judged queries of ``rankings``.

    ``grid``: a product grid (:func:`grid_points`) or the list of points itself.
    ``to_weights(point) -> sequence`` maps a grid point to one weight per feature (default:
    the point's values in grid order). Ties keep the first point in grid order.
    """
    to_weights = to_weights or (lambda p: list(p.values()))
    judged = {r.query.id for r in rankings} & {q for q, j in qrels.items() if j}
    if not judged:
        raise ConfigError("tuning needs queries with judgments in the training qrels")
    cache = {r.query.id: feature_matrix(r, features, normalise) for r in rankings
             if r.query.id in judged}
    sub = {q: qrels[q] for q in judged}
    table = []
    for point in grid_points(grid) if isinstance(grid, Mapping) else grid:
        score = evaluate(weighted_run(cache, to_weights(point)), sub, [metric]).aggregate[metric]
        table.append((dict(point), score))
    table.sort(key=lambda row: -row[1])  # stable: ties keep grid order
    return TuneResult(metric, dict(table[0][0]), table[0][1], len(judged), table)


def kfold(query_ids: Sequence[str], folds: int = 5, seed: int = 0) -> list[list[str]]:
    """Split query ids into ``folds`` disjoint groups, shuffled with a fixed seed."""
    if folds < 2:
        raise ConfigError(f"k-fold cross-validation needs at least 2 folds, got {folds}")
    ids = sorted(query_ids)
    random.Random(seed).shuffle(ids)
    return [ids[i::folds] for i in range(folds)]


def cross_validated_run(
    rankings: Sequence[Ranking], qrels: Qrels, features: Sequence[str], grid: Grid,
    to_weights: Any = None, metric: str = "nDCG@10", normalise: bool = False,
    folds: int = 5, seed: int = 0,
) -> tuple[Run, list[TuneResult]]:
    """Rank every query with weights tuned on the other folds; returns the run and the
    per-fold tuning results."""
    to_weights = to_weights or (lambda p: list(p.values()))
    by_id = {r.query.id: r for r in rankings}
    run: Run = {}
    results = []
    for held_out in kfold(list(by_id), folds, seed):
        held = set(held_out)
        train = [r for q, r in by_id.items() if q not in held]
        res = grid_search(train, qrels, features, grid, to_weights, metric, normalise)
        results.append(res)
        cache = {q: feature_matrix(by_id[q], features, normalise) for q in held_out}
        run.update(weighted_run(cache, to_weights(res.best)))
    return run, results


__all__ = ["TuneResult", "cross_validated_run", "feature_matrix", "grid_points",
           "grid_search", "kfold", "weighted_run"]
