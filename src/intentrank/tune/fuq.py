"""Tuning FUQ's alpha / beta / gamma on training queries (never on test).

The reranker keeps its three raw components in each document's stage scores, so one pass
of dense retrieval + follow-up prediction + scoring serves the whole grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from intentrank.core.protocols import IndexLike, LLMLike
from intentrank.data.dataset import refuse_test_split
from intentrank.data.trec import Qrels
from intentrank.errors import ConfigError
from intentrank.rerank.fuq import COMPONENTS, FollowUpReranker, FUQWeights
from intentrank.tune.grid import Grid, TuneResult, grid_search
from intentrank.types import Ranking, Trace

FEATURES = tuple(f"fuq.{c}" for c in COMPONENTS)
DEFAULT_GRID: Grid = {
    "alpha": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "beta": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "gamma": (0.0, 0.05, 0.1, 0.2, 0.4),
}


def to_weights(point: dict[str, float]) -> list[float]:
    """Grid point -> weights on ``FEATURES`` (the distance penalty is subtracted)."""
    return FUQWeights(point["alpha"], point["beta"], point["gamma"]).vector().tolist()


def fuq_pipeline(index: IndexLike, llm: LLMLike, weights: FUQWeights | None = None,
                 depth: int = 100, m: int = 2) -> Any:
    """dense(top ``depth``) >> M follow-ups >> FUQ rerank of all ``depth``: the pipeline the
    paper evaluates."""
    from intentrank.query.followups import FollowUpPredictor
    from intentrank.retrieve.retrievers import DenseRetriever

    return (DenseRetriever(index, depth) >> FollowUpPredictor(llm, m=m)
            >> FollowUpReranker(index, weights, top_k=depth))


def tune_fuq(rankings: Sequence[Ranking], train_qrels: Qrels, metric: str = "nDCG@3",
             grid: Grid | None = None) -> TuneResult:
    """Best (alpha, beta, gamma) on FUQ-scored ``rankings`` of training queries."""
    _check_scored(rankings)
    return grid_search(rankings, train_qrels, FEATURES, grid or DEFAULT_GRID, to_weights,
                       metric)


def _check_scored(rankings: Sequence[Ranking]) -> None:
    for r in rankings:
        if r.docs and FEATURES[0] not in r.docs[0].stage_scores:
            raise ConfigError(f"query {r.query.id!r} was not scored by the FUQ reranker (no "
                              f"{FEATURES[0]!r} stage score); tune on fuq_pipeline output")


def tune_fuq_on_split(dataset: Any, index: IndexLike, llm: LLMLike, split: str = "train",
                      metric: str = "nDCG@3", sample: int = 0, seed: int = 0,
                      grid: Grid | None = None, trace: Trace | None = None) -> TuneResult:
    """Run the FUQ pipeline on ``split`` (optionally a fixed-seed sample) and grid-search the
    weights there. The test split is refused: tuning must never see test judgments.
    ``trace`` receives the pipeline's trace (LLM calls, fallbacks: see llm.health)."""
    refuse_test_split(split, "tune FUQ weights")
    queries, qrels = dataset.sample(split, sample, seed)
    rankings = fuq_pipeline(index, llm).run(queries, trace).rankings
    return tune_fuq(rankings, qrels, metric, grid)
