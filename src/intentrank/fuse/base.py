"""What every fusion shares: a stage that runs branches on the same input and merges their
rankings per query, and min-max normalisation. One file per method beside this one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from intentrank.core.params import ParameterError, check_weights
from intentrank.core.stage import Stage
from intentrank.types import Query, Ranking, Trace


def check_fusion_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """``n`` finite non-negative weights (all 1 when None); :class:`ParameterError` (a
    ValueError) otherwise."""
    if weights is None:
        return [1.0] * n
    return check_weights(weights, n)


def minmax(scores: Mapping[str, float]) -> dict[str, float]:
    """Min-max normalise to [0, 1]; a constant list maps to 1.0."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return {d: 1.0 for d in scores}
    return {d: (s - lo) / (hi - lo) for d, s in scores.items()}


class FusionStage(Stage):
    """Runs each branch on the same input and fuses their rankings per query."""

    method = "fusion"
    renamed: dict[str, str] = {}  # old parameter name -> new one (refused in configs)

    def __init__(self, branches: Sequence[Stage], weights: Sequence[float] | None = None,
                 name: str | None = None) -> None:
        if isinstance(branches, Stage | str) or not hasattr(branches, "__iter__"):
            raise ParameterError(f"{self.method} fusion takes a list of stages, got "
                                 f"{branches!r}")
        branches = list(branches)
        if not all(isinstance(b, Stage) for b in branches):
            raise ParameterError(f"{self.method} fusion takes a list of stages, got "
                                 f"{branches!r}")
        flat: list[Stage] = []
        for b in branches:  # (a | b) | c fuses all three at once, with one weight each,
            # unless the inner fusion has weights or other parameters (its own rrf_k)
            same = (type(b) is type(self) and b.weights is None and weights is None
                    and b.name == b.method and b.fusion_params() == self.fusion_params())
            flat.extend(b.branches if same else [b])
        if not flat:  # zip(*[]) would silently answer no query at all
            raise ParameterError(f"{self.method} fusion needs at least one branch, got none")
        self.branches = flat
        self.weights = None if weights is None else check_weights(
            weights, len(flat), allow_all_zero=False)
        self.name = name or self.method

    def fusion_params(self) -> tuple:
        """The method's own parameters (set before ``__init__`` runs): fusions of one method
        with the same parameters merge into one when nested."""
        return ()

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        raise NotImplementedError

    def prepare(self, queries: Sequence[Query], trace: Trace) -> None:
        """Called once per batch, before :meth:`fuse` runs per query (e.g. one batched LLM
        step for all queries); nothing by default."""

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        trace = trace if trace is not None else Trace()
        with trace.enter(self) as path_id:  # the branches run below the fusion's path id
            outputs = [branch(list(rankings), trace) for branch in self.branches]
            with trace.timed(path_id, n_queries=len(rankings)):
                self.prepare([r.query for r in rankings], trace)
                fused = []
                for per_query in zip(*outputs, strict=True):
                    merged = _merge_stage_scores(per_query)
                    query = per_query[0].query
                    for other in per_query[1:]:
                        extra = tuple(d for d in other.query.derived if d not in query.derived)
                        query = replace(query, derived=query.derived + extra)
                    result = Ranking.from_scores(query, self.fuse(per_query, trace), path_id)
                    for d in result.docs:
                        d.stage_scores = {**merged.get(d.doc_id, {}), path_id: d.score}
                    fused.append(result)
        return fused

    def describe(self) -> str:
        inner = " | ".join(b.describe() for b in self.branches)
        w = f", weights={self.weights}" if self.weights else ""
        return f"{self.method}({inner}{w})"


def _merge_stage_scores(rankings: Sequence[Ranking]) -> dict[str, dict[str, float]]:
    merged: dict[str, dict[str, float]] = {}
    for r in rankings:
        for d in r.docs:
            merged.setdefault(d.doc_id, {}).update(d.stage_scores)
    return merged
