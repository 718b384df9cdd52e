"""One stage protocol and the operators that compose stages into pipelines.

A stage maps a list of rankings (one per query, possibly empty) to a new list of rankings.
Retrievers fill empty rankings, rerankers reorder them, query transformers push derived
texts onto the query, fusers combine the outputs of several branches.

Operators (PyTerrier style):
    ``a >> b``  run ``a`` then ``b``;
    ``a % k``   keep the top ``k`` of ``a``;
    ``a | b``   fuse the outputs of ``a`` and ``b`` with reciprocal rank fusion (rrf_k=60).

The fusion base class (:class:`FusionStage`) and RRF (:class:`RRFFusion`) live here with the
operators, so ``a | b`` needs nothing above the core; the other fusion methods are in
``fuse/``, one file each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from intentrank.core.fusion import check_rrf_k, rrf
from intentrank.core.params import ParameterError, check_int, check_weights
from intentrank.core.registry import register_fuser
from intentrank.data.trec import ranked_scores
from intentrank.filters import Filter
from intentrank.types import Query, Ranking, Trace


@dataclass
class RunResult:
    """Rankings of a pipeline run together with its trace."""

    rankings: list[Ranking]
    trace: Trace = field(default_factory=Trace)

    def to_run(self) -> dict[str, dict[str, float]]:
        """``{query_id: {doc_id: score}}``, the shape ir-measures and TREC files use: the
        rankings' order, tied scores nudged to strictly decreasing (:func:`ranked_scores`),
        so the ranking returned is the one evaluated."""
        return {r.query.id: ranked_scores((d.doc_id, d.score) for d in r.docs)
                for r in self.rankings}


def as_queries(queries: Iterable[Query | str]) -> list[Query]:
    """Accept Query objects or plain strings (numbered q1, q2, ...)."""
    return [q if isinstance(q, Query) else Query(id=f"q{i}", text=str(q))
            for i, q in enumerate(queries, 1)]


class Stage:
    """Base class: subclasses implement :meth:`transform` and set ``name`` (at construction;
    it is never changed afterwards).

    A run gives every stage instance a unique path id (``weighted/dense``, ``rrf/dense#2``;
    a stage of the top-level chain keeps its bare name, see :class:`~intentrank.types.PathIds`).
    The Trace and ``ScoredDoc.stage_scores`` use it: inside :meth:`transform` a stage labels
    what it records with ``trace.path_of(self)``, never with ``self.name``.
    """

    name: str = "stage"

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        raise NotImplementedError

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        trace = trace if trace is not None else Trace()
        with trace.enter(self) as path_id, trace.timed(path_id, n_queries=len(rankings)):
            return self.transform(rankings, trace)

    # -- running -----------------------------------------------------------------------
    def run(self, queries: Iterable[Query | str], trace: Trace | None = None) -> RunResult:
        """Run the pipeline on queries; returns rankings and the per-stage trace."""
        trace = trace if trace is not None else Trace()
        rankings = [Ranking(q) for q in as_queries(queries)]
        return RunResult(self(rankings, trace), trace)

    def search(self, text: str, k: int | None = None,
               filter: Filter | str | None = None) -> Ranking:  # noqa: A002 (Query.filter)
        """Answer one query string, among the documents ``filter`` lets through when given;
        keep the top ``k`` when given."""
        if k is not None:
            check_int("k", k)
        ranking = self.run([Query(id="q", text=text, filter=filter)]).rankings[0]
        return ranking.top(k) if k is not None else ranking

    # -- algebra -----------------------------------------------------------------------
    def __rshift__(self, other: Stage) -> Chain:
        return Chain([self, other])

    def __mod__(self, k: int) -> Chain:
        return Chain([self, Cutoff(k)])

    def __or__(self, other: Stage) -> Stage:
        return RRFFusion([self, other])

    def describe(self) -> str:
        return self.name

    def described(self, *args: object, **params: object) -> str:
        """``name(arg, ..., key=value, ...)``, None values left out: how a stage with
        parameters describes itself. Every parameter that changes its results belongs in it
        (the experiment harness shares outputs between stages that describe alike)."""
        parts = [*map(str, args), *(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in params.items() if v is not None)]
        return f"{self.name}({', '.join(parts)})"

    def __repr__(self) -> str:
        return self.describe()


class Chain(Stage):
    """Stages run one after another."""

    name = "chain"

    def __init__(self, stages: Sequence[Stage]) -> None:
        flat: list[Stage] = []
        for s in stages:
            if not isinstance(s, Stage):
                raise ParameterError(f"a pipeline step must be a Stage, got {s!r}")
            flat.extend(s.stages if isinstance(s, Chain) else [s])
        self.stages = flat

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        trace = trace if trace is not None else Trace()
        for stage in self.stages:
            rankings = stage(rankings, trace)
        return rankings

    def describe(self) -> str:
        return " >> ".join(s.describe() for s in self.stages)


class Cutoff(Stage):
    """Keep the top ``k`` candidates of each ranking."""

    def __init__(self, k: int) -> None:
        self.k = check_int("cut-off", k)
        self.name = f"cutoff@{k}"

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        return [r.top(self.k) for r in rankings]

    def describe(self) -> str:
        return f"% {self.k}"


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
                    fused.append(Ranking.from_scores(query, self.fuse(per_query, trace), path_id,
                                                     prior=merged))
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
