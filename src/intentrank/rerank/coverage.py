"""Coverage-aware list ranking (RichRAG, method 4): choose the top ``top_k`` one document at
a time by marginal aspect coverage (docs/coverage.md).

With aspects ``a_1..a_m`` (the ``aspects`` stage's; the query alone when it has none) and a
coverage score ``phi(d, a_i)`` in [0, 1], step ``t`` picks, among the pool documents not yet
chosen, the one maximising::

    Phi_t(d) = sum_i w_i^t * phi(d, a_i),
    w_i^t    = 1 - Norm_i(max_{d' in L_{t-1}} phi(d', a_i)),  Norm_i(x) = x_i / sum_j x_j

(``w_i^1 = 1``; when every maximum is 0 the weights are all 1). Ties, e.g. every gain 0 after
the first pick when there is one aspect, go to the larger unweighted ``sum_i phi(d, a_i)``
(relevance), then to the earlier pool position. So one aspect ranks by ``phi`` alone.

``phi`` is an :class:`AspectScorer` (a cross-encoder, or the index's cosine; optionally
min-max calibrated per aspect, :func:`minmax_columns`). The greedy builder is one
:class:`ListRanker`, the seam for a learned list ranker: anything with ``name`` and
``choose(query, aspects, doc_ids, k)`` can replace it (``CoverageReranker(index, ranker=...)``).

The pool is the first ``pool`` incoming candidates (default 100; none: all). The chosen
list gets scores ``top_k, top_k - 1, ...``; the rest of the incoming ranking stays below in
its order. Stage scores: ``<path>.gain`` (``Phi_t`` when chosen), ``<path>.covers`` (the
aspect number with the largest weighted contribution ``w_i^t phi(d, a_i)``: the aspect the
document was chosen for) and ``<path>.phi<i>`` per aspect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from intentrank.core.params import ParameterError, check_choice, check_int, check_optional_int
from intentrank.core.protocols import IndexLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.measures.ncom import coverage_weights
from intentrank.models.cross_encoder import PairScorer, load_cross_encoder
from intentrank.query.aspects import aspects_of
from intentrank.query.multi_faceted import aspect_text
from intentrank.rerank.base import rerank_head
from intentrank.rerank.cross_encoder import shared_scorer
from intentrank.types import Ranking, Trace

SCORERS = ("cross_encoder", "cosine")
AGAINST = ("query+aspect", "aspect")
CALIBRATIONS = ("none", "minmax")


@dataclass
class ListChoice:
    """A chosen list: pool positions in order, the gain of each pick and the aspect each
    pick covers; ``phi`` (pool x aspects) when the ranker computed one."""

    order: list[int]
    gains: list[float]
    covers: list[int]
    phi: np.ndarray | None = None


def greedy_coverage(phi: np.ndarray, k: int) -> ListChoice:
    """The greedy coverage list of up to ``k`` rows of ``phi`` (pool x aspects, >= 0); see
    the module doc for the gain, the weights and the tie-breaks."""
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2:
        raise ValueError(f"phi must be a (documents x aspects) matrix, got shape {phi.shape}")
    if phi.size and (not np.isfinite(phi).all() or (phi < 0).any()):
        raise ValueError("phi must hold finite coverage scores >= 0")
    n, m = phi.shape
    covered, left = np.zeros(m), np.ones(n, dtype=bool)
    relevance = phi.sum(axis=1)
    choice = ListChoice([], [], [], phi)
    for _ in range(min(k, n) if m else 0):
        w = coverage_weights(covered)
        gains = phi @ w
        cand = np.flatnonzero(left)
        # best gain, then best relevance, then earliest position
        best = int(cand[np.lexsort((cand, -relevance[cand], -gains[cand]))[0]])
        contrib = w * phi[best]
        choice.order.append(best)
        choice.gains.append(float(gains[best]))
        choice.covers.append(int(np.argmax(contrib if contrib.max() > 0 else phi[best])))
        covered = np.maximum(covered, phi[best])
        left[best] = False
    return choice


class AspectScorer(Protocol):
    """Coverage ``phi(d, a_i)`` in [0, 1] of each document (rows) for each aspect text
    (columns; ``query + aspect`` or the aspect alone)."""

    name: str

    def coverage(self, texts: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray: ...


class ListRanker(Protocol):
    """Chooses the top-``k`` list for a query, its aspects and a pool: the seam for a
    learned (generative) list ranker."""

    name: str

    def choose(self, query: str, aspects: Sequence[str], doc_ids: Sequence[str], k: int
               ) -> ListChoice: ...


def minmax_columns(phi: np.ndarray, logits: bool) -> np.ndarray:
    """Per-aspect min-max over the pool (a column with one value becomes 1), of the logits
    ``log(p / (1 - p))`` when ``logits`` (sigmoid scores that saturate near 1 keep their
    order and get spread out)."""
    x = np.asarray(phi, dtype=np.float64)
    if logits:
        p = np.clip(x, 1e-7, 1 - 1e-7)
        x = np.log(p / (1 - p))
    if not x.size:
        return x
    lo, hi = x.min(axis=0), x.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return np.where(hi > lo, (x - lo) / span, 1.0)


def _unit(scores: np.ndarray) -> np.ndarray:
    """Scores as [0, 1] coverage: a sigmoid unless they already lie in [0, 1]."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size and (scores.min() < 0 or scores.max() > 1):
        scores = 1.0 / (1.0 + np.exp(-scores))
    return scores


class CrossEncoderCoverage:
    """``phi`` = cross-encoder score of (``query + aspect``, document), in [0, 1]."""

    def __init__(self, index: IndexLike, scorer: PairScorer, batch_size: int = 8) -> None:
        self.index, self.scorer, self.batch_size = index, scorer, batch_size
        self.name = f"cross_encoder:{getattr(scorer, 'name', '-')}"

    def coverage(self, texts: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray:
        docs = [self.index.doc_text(d) for d in doc_ids]
        pairs = [(a, t) for t in docs for a in texts]
        scores = self.scorer.predict(pairs, self.batch_size) if pairs else np.zeros(0)
        return _unit(scores).reshape(len(doc_ids), len(texts))


class CosineCoverage:
    """``phi`` = max(0, cosine of the index embeddings of ``query + aspect`` and the
    document); needs the index's dense leg."""

    name = "cosine"

    def __init__(self, index: Any) -> None:
        self.index = index

    def coverage(self, texts: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray:
        if not doc_ids:
            return np.zeros((0, len(texts)))
        q = np.asarray(self.index.encode_queries(list(texts)), dtype=np.float64)
        rows = [self.index.row_of[d] for d in doc_ids]
        docs = np.asarray(self.index.embeddings[rows], dtype=np.float64)
        return np.clip(docs @ q.T, 0.0, None)


class GreedyCoverageRanker:
    """RichRAG's inference-time list builder: :func:`greedy_coverage` over ``phi`` from an
    :class:`AspectScorer`, each document scored against ``query + aspect`` (``against``
    ``"query+aspect"``, the paper's) or the aspect alone (``"aspect"``)."""

    def __init__(self, scorer: AspectScorer, against: str = "query+aspect",
                 calibrate: str = "none") -> None:
        self.scorer, self.against = scorer, check_choice("against", against, AGAINST)
        self.calibrate = check_choice("calibrate", calibrate, CALIBRATIONS)
        self.name = f"greedy({scorer.name}, {self.against}" + (
            f", calibrate={self.calibrate})" if self.calibrate != "none" else ")")

    def choose(self, query: str, aspects: Sequence[str], doc_ids: Sequence[str], k: int
               ) -> ListChoice:
        texts = [a if self.against == "aspect" else aspect_text(query, a) for a in aspects]
        phi = self.scorer.coverage(texts, doc_ids)
        if self.calibrate == "minmax":
            phi = minmax_columns(phi, logits=not isinstance(self.scorer, CosineCoverage))
        return greedy_coverage(phi, k)


class CoverageReranker(Stage):
    """Choose the top ``top_k`` of the pool by marginal aspect coverage (see the module
    doc); ``ranker`` replaces the greedy builder (a learned list ranker)."""

    def __init__(self, index: IndexLike, top_k: int = 10, pool: int | None = 100,
                 ranker: ListRanker | None = None, scorer: str = "cross_encoder",
                 model: str | Path | PairScorer | None = None, batch_size: int = 8,
                 against: str = "query+aspect", calibrate: str = "none",
                 name: str = "coverage") -> None:
        self.top_k, self.pool = check_int("top_k", top_k), check_optional_int("pool", pool)
        self.index, self.name = index, name
        if ranker is None:
            check_choice("scorer", scorer, SCORERS)
            if scorer == "cosine":
                aspect_scorer: AspectScorer = CosineCoverage(index)
            else:
                pairs = model if hasattr(model, "predict") else load_cross_encoder(model)  # type: ignore[arg-type]
                aspect_scorer = CrossEncoderCoverage(index, pairs,  # type: ignore[arg-type]
                                                     check_int("batch_size", batch_size))
            ranker = GreedyCoverageRanker(aspect_scorer, against, calibrate)
        elif not hasattr(ranker, "choose"):
            raise ParameterError(f"ranker must have choose(query, aspects, doc_ids, k), got "
                                 f"{ranker!r}")
        self.ranker = ranker

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        out = []
        for r in rankings:
            pool = r.docs[:self.pool] if self.pool else r.docs
            aspects = aspects_of(r.query)
            ids = [d.doc_id for d in pool]
            choice = self.ranker.choose(r.query.text, aspects, ids, self.top_k)
            trace.count(path_id, "pairs", len(ids) * len(aspects))
            scores, extra = {}, {}
            for t, (row, gain, covers) in enumerate(zip(choice.order, choice.gains,
                                                        choice.covers, strict=True)):
                doc = ids[row]
                scores[doc] = float(len(choice.order) - t)
                extra[doc] = {f"{path_id}.gain": gain, f"{path_id}.covers": float(covers)}
                if choice.phi is not None:
                    extra[doc].update({f"{path_id}.phi{i}": float(v)
                                       for i, v in enumerate(choice.phi[row])})
            out.append(rerank_head(r, scores, path_id, extra))
        return out

    def describe(self) -> str:
        return self.described(self.ranker.name, top_k=self.top_k, pool=self.pool)


@register_stage("coverage", renamed={"k": "top_k"})
def _coverage(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``coverage: {top_k: 10, pool: 100, scorer: cross_encoder|cosine, against:
    query+aspect|aspect, calibrate: none|minmax, model, batch_size}``:
    the greedy coverage list (the cross-encoder is shared with the config's other stages)."""
    index = ctx.require_index("coverage")
    if params.get("scorer", "cross_encoder") == "cross_encoder":
        params["model"] = shared_scorer(ctx, params.pop("model", None))
    return CoverageReranker(index, **params)


def aspect_labels(ranking: Ranking) -> list[str]:
    """For each document of ``ranking``, in order, the aspect it covers, for display: the
    aspect a coverage stage chose it for (a ``*.covers`` stage score), else the aspects whose
    multi-faceted search found it (``*.aspect<i>`` scores, joined by ``"; "``), else ``""``.
    Aspect numbers index ``query.derived_of("aspect")`` (the query itself when it has none)."""
    aspects = aspects_of(ranking.query)

    def text(i: int) -> str:
        return aspects[i] if 0 <= i < len(aspects) else f"aspect {i}"

    out = []
    for d in ranking.docs:
        covers = [v for k, v in d.stage_scores.items() if k.rsplit(".", 1)[-1] == "covers"]
        if covers:
            out.append(text(int(covers[-1])))
            continue
        found = sorted({int(k.rsplit(".aspect", 1)[1]) for k in d.stage_scores
                        if ".aspect" in k and k.rsplit(".aspect", 1)[1].isdigit()})
        out.append("; ".join(text(i) for i in found))
    return out
