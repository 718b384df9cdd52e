"""Follow-up-aware reranking (FUQ, Algorithm 2 of the paper).

For query q with follow-ups f_1..f_M and candidate chunk c (unit-norm embeddings)::

    score(c) = alpha * cos(q, c) + beta * mean_i cos(f_i, c) - gamma * sigmoid(||q - c||)

Sign convention: the paper writes the distance term as ``+ gamma * sigmoid(euclid)`` and
calls it a penalty; we make the penalty explicit by subtracting it, so gamma >= 0 penalises
distant candidates (a negative gamma gives the literal ``+`` reading). A query with no
follow-ups uses the query itself in their place. Scores are min-max normalised per query
before ranking; the three raw components are kept in the stage scores (``fuq.cos``,
``fuq.followups``, ``fuq.distance``) so tuning can re-weight them without recomputing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from intentrank.core.params import ParameterError, check_int, check_number
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import ConfigError
from intentrank.fuse.base import minmax
from intentrank.index.store import Index
from intentrank.rerank.base import rerank_head
from intentrank.types import Ranking, Trace

COMPONENTS = ("cos", "followups", "distance")


@dataclass(frozen=True)
class FUQWeights:
    """alpha (query similarity), beta (follow-up similarity), gamma (distance penalty)."""

    alpha: float = 0.6
    beta: float = 0.3
    gamma: float = 0.1

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):  # a negative gamma is allowed (see above)
            check_number(f"fuq {name}", getattr(self, name))

    def vector(self) -> np.ndarray:
        """Weights to dot with the component columns ``COMPONENTS`` (penalty negated)."""
        return np.array([self.alpha, self.beta, -self.gamma])


def fuq_components(q: np.ndarray, followups: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """Rows: candidates; columns: cos(q,c), mean_f cos(f,c), sigmoid(euclid(q,c))."""
    cos_q = cands @ q
    cos_f = (cands @ followups.T).mean(axis=1)
    dist = np.linalg.norm(cands - q[None, :], axis=1)
    return np.stack([cos_q, cos_f, 1.0 / (1.0 + np.exp(-dist))], axis=1)


class FollowUpReranker(Stage):
    """Rerank the top ``top_k`` candidates by the FUQ composite score (the rest stay below)."""

    def __init__(self, index: Index, weights: FUQWeights | None = None, top_k: int = 100,
                 name: str = "fuq") -> None:
        if weights is not None and not isinstance(weights, FUQWeights):
            raise ParameterError(f"weights must be FUQWeights, got {weights!r}")
        top_k = check_int("top_k", top_k)
        self.index, self.weights, self.top_k = index, weights or FUQWeights(), top_k
        self.name = name

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        texts, spans = [], []
        for r in rankings:
            fups = r.query.derived_of("followup") or [r.query.text]
            spans.append((len(texts), len(fups)))
            texts += [r.query.text, *fups]
        vecs = self.index.encode_queries(texts) if texts else np.zeros((0, 0))
        w, path_id = self.weights.vector(), trace.path_of(self)
        out = []
        for r, (start, n) in zip(rankings, spans, strict=True):
            head = r.docs[: self.top_k]
            if not head:
                out.append(r)
                continue
            rows = [self.index.row_of[d.doc_id] for d in head]
            comps = fuq_components(vecs[start], vecs[start + 1: start + 1 + n],
                                   np.asarray(self.index.embeddings[rows], dtype=np.float32))
            ids = [d.doc_id for d in head]
            scores = minmax(dict(zip(ids, (comps @ w).tolist(), strict=True)))
            parts = {d: {f"{path_id}.{k}": float(v) for k, v in zip(COMPONENTS, c, strict=True)}
                     for d, c in zip(ids, comps, strict=True)}
            out.append(rerank_head(r, scores, path_id, parts))
        trace.count(path_id, "candidates", sum(min(len(r.docs), self.top_k)
                                                  for r in rankings))
        return out

    def describe(self) -> str:
        w = self.weights
        return self.described(alpha=w.alpha, beta=w.beta, gamma=w.gamma, top_k=self.top_k)


@register_stage("fuq", renamed={"k": "top_k"})
def _fuq(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``fuq: {alpha, beta, gamma, top_k}`` or ``fuq: {params: <saved name>, top_k}``."""
    from intentrank.core.saved_params import load_params

    saved = params.pop("params", None)
    if saved is not None and (not isinstance(saved, str) or not saved.strip()):
        raise ConfigError(f"fuq: 'params' must name a saved parameter set (see `intentrank "
                          f"tune-fuq`), got {saved!r}")
    weights = {**(load_params(saved) if saved else {}),
               **{w: params.pop(w) for w in ("alpha", "beta", "gamma") if w in params}}
    return FollowUpReranker(ctx.require_index("fuq"), FUQWeights(**weights), **params)
