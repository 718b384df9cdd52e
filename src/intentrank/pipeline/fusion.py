"""Fusion of several rankings: RRF, weighted min-max sum and alternate interleaving.

Definitions (pinned down because peers disagree):

* **RRF** (Cormack et al., 2009): ``score(d) = sum_i w_i / (k + rank_i(d))`` with ranks
  **1-based** (the top document has rank 1), ``k = 60`` by default and weights ``w_i``
  (default 1) multiplying each list's whole contribution. A document missing from list ``i``
  gets nothing from it. Ties are broken by document id.
* **Weighted min-max**: each list's scores are min-max normalised over the candidates that
  list returned (a list whose scores are all equal normalises to 1.0), then
  ``score(d) = sum_i w_i * norm_i(d)``; a missing document counts 0 for that list.
* **Interleave**: take the 1st of list 1, the 1st of list 2, ..., then the 2nd of each,
  skipping documents already taken; the fused score is ``1 / position`` (1-based).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from intentrank.pipeline.params import ParameterError, check_number, check_weights
from intentrank.pipeline.stage import Stage
from intentrank.types import Ranking, Trace


def _check_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """``n`` finite non-negative weights (all 1 when None); :class:`ParameterError` (a
    ValueError) otherwise."""
    if weights is None:
        return [1.0] * n
    return check_weights(weights, n)


def _check_rrf_k(k: float) -> float:
    """RRF's k must be a finite number > 0: ``k <= -1`` divides by zero at some rank and any
    k <= 0 gives the top ranks scores out of proportion (silently wrong fusions)."""
    return check_number("rrf k", k, above=0)


def rrf(
    rankings: Sequence[Sequence[str]], k: float = 60, weights: Sequence[float] | None = None
) -> dict[str, float]:
    """Reciprocal rank fusion of ordered doc-id lists (ranks 1-based, weights per list)."""
    k = _check_rrf_k(k)
    ws = _check_weights(weights, len(rankings))
    fused: dict[str, float] = {}
    for w, ranking in zip(ws, rankings, strict=True):
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + w / (k + rank)
    return fused


def minmax(scores: Mapping[str, float]) -> dict[str, float]:
    """Min-max normalise to [0, 1]; a constant list maps to 1.0."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return {d: 1.0 for d in scores}
    return {d: (s - lo) / (hi - lo) for d, s in scores.items()}


def weighted_minmax(
    score_lists: Sequence[Mapping[str, float]], weights: Sequence[float] | None = None
) -> dict[str, float]:
    """Sum of weighted min-max normalised scores; absent documents count 0."""
    ws = _check_weights(weights, len(score_lists))
    fused: dict[str, float] = {}
    for w, scores in zip(ws, score_lists, strict=True):
        for doc_id, s in minmax(scores).items():
            fused[doc_id] = fused.get(doc_id, 0.0) + w * s
    return fused


def interleave(rankings: Sequence[Sequence[str]]) -> list[str]:
    """Alternate between lists, skipping documents already taken."""
    seen: set[str] = set()
    out: list[str] = []
    depth = max((len(r) for r in rankings), default=0)
    for i in range(depth):
        for ranking in rankings:
            if i < len(ranking) and ranking[i] not in seen:
                seen.add(ranking[i])
                out.append(ranking[i])
    return out


class FusionStage(Stage):
    """Runs each branch on the same input and fuses their rankings per query."""

    method = "fusion"

    def __init__(self, branches: Sequence[Stage], weights: Sequence[float] | None = None) -> None:
        if isinstance(branches, Stage | str) or not hasattr(branches, "__iter__"):
            raise ParameterError(f"{self.method} fusion takes a list of stages, got "
                                 f"{branches!r}")
        branches = list(branches)
        if not all(isinstance(b, Stage) for b in branches):
            raise ParameterError(f"{self.method} fusion takes a list of stages, got "
                                 f"{branches!r}")
        flat: list[Stage] = []
        for b in branches:  # (a | b) | c fuses all three at once, with one weight each
            same = type(b) is type(self) and b.weights is None and weights is None
            flat.extend(b.branches if same else [b])
        if not flat:  # zip(*[]) would silently answer no query at all
            raise ParameterError(f"{self.method} fusion needs at least one branch, got none")
        self.branches = flat
        self.weights = None if weights is None else check_weights(
            weights, len(flat), allow_all_zero=False)
        self.name = self.method

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        raise NotImplementedError

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        trace = trace if trace is not None else Trace()
        outputs = [branch(list(rankings), trace) for branch in self.branches]
        with trace.timed(self.name, n_queries=len(rankings)):
            fused = []
            for per_query in zip(*outputs, strict=True):
                merged = _merge_stage_scores(per_query)
                query = per_query[0].query
                for other in per_query[1:]:
                    extra = tuple(d for d in other.query.derived if d not in query.derived)
                    query = type(query)(query.id, query.text, query.turns, query.derived + extra)
                result = Ranking.from_scores(query, self.fuse(per_query, trace), self.name)
                for d in result.docs:
                    d.stage_scores = {**merged.get(d.doc_id, {}), self.name: d.score}
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


class RRFFusion(FusionStage):
    """Reciprocal rank fusion (1-based ranks, weights multiply each list's term)."""

    method = "rrf"

    def __init__(
        self, branches: Sequence[Stage], weights: Sequence[float] | None = None, k: float = 60
    ) -> None:
        super().__init__(branches, weights)
        self.k = _check_rrf_k(k)

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        return rrf([r.doc_ids for r in rankings], k=self.k, weights=self.weights)


class WeightedFusion(FusionStage):
    """Weighted sum of min-max normalised scores."""

    method = "weighted"

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        return weighted_minmax(
            [{d.doc_id: d.score for d in r.docs} for r in rankings], self.weights
        )


class InterleaveFusion(FusionStage):
    """Alternate interleaving with de-duplication (score = 1 / position)."""

    method = "interleave"

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        order = interleave([r.doc_ids for r in rankings])
        return {doc_id: 1.0 / pos for pos, doc_id in enumerate(order, start=1)}


class RRFWithInput(Stage):
    """RRF of each input ranking and ``stage``'s reranking of it: keeps the first stage's
    evidence when the reranker alone is weaker (the input is not retrieved again)."""

    def __init__(self, stage: Stage, k: float = 60, name: str = "") -> None:
        self.stage, self.k = stage, _check_rrf_k(k)
        self.name = name or f"rrf_with_input:{stage.name}"

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        trace = trace if trace is not None else Trace()
        reranked = self.stage(list(rankings), trace)
        with trace.timed(self.name, n_queries=len(rankings)):
            out = []
            for before, after in zip(rankings, reranked, strict=True):
                fused = rrf([before.doc_ids, after.doc_ids], k=self.k)
                out.append(Ranking.from_scores(after.query, fused, self.name, previous=after))
        return out

    def describe(self) -> str:
        return f"rrf(input, {self.stage.describe()}, k={self.k:g})"
