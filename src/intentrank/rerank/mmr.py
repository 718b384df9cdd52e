"""Maximal marginal relevance (Carbonell and Goldstein, 1998), the diversity baseline of
method 4: pick the top ``top_k`` of the pool one at a time by::

    MMR(d) = lambda * cos(q, d) - (1 - lambda) * max_{s chosen} cos(d, s)

with the index's embeddings (its dense leg: the query encoded as queries are, documents as
indexed). The first pick is the most similar to the query; ties go to the earlier pool
position. The pool is the first ``pool`` incoming candidates (default 100; none: all). The
chosen list gets scores ``top_k, top_k - 1, ...`` and the rest stays below in order; stage
scores ``<path>.relevance`` (cos(q, d)) and ``<path>.redundancy`` (the max cosine to the
documents chosen before it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from intentrank.core.params import check_int, check_number, check_optional_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.rerank.base import rerank_head
from intentrank.types import Ranking, Trace


def mmr_order(relevance: np.ndarray, similarity: np.ndarray, k: int, lam: float
              ) -> tuple[list[int], list[float]]:
    """Positions chosen by MMR and each one's redundancy when chosen."""
    n = len(relevance)
    chosen: list[int] = []
    redundancy: list[float] = []
    most = np.full(n, -np.inf)  # max similarity to the chosen ones
    left = np.ones(n, dtype=bool)
    for _ in range(min(k, n)):
        red = np.where(np.isfinite(most), most, 0.0)
        score = lam * relevance - (1 - lam) * red
        cand = np.flatnonzero(left)
        best = int(cand[np.lexsort((cand, -score[cand]))[0]])
        chosen.append(best)
        redundancy.append(float(red[best]))
        most = np.maximum(most, similarity[best])
        left[best] = False
    return chosen, redundancy


class MMRReranker(Stage):
    """Reorder the pool by maximal marginal relevance (see the module doc)."""

    def __init__(self, index: Any, top_k: int = 10, lam: float = 0.5, pool: int | None = 100,
                 name: str = "mmr") -> None:
        self.top_k, self.pool = check_int("top_k", top_k), check_optional_int("pool", pool)
        self.lam = check_number("lambda", lam, minimum=0, maximum=1)
        self.index, self.name = index, name

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        qvecs = (np.asarray(self.index.encode_queries([r.query.text for r in rankings]),
                            dtype=np.float64) if rankings else np.zeros((0, 0)))
        out = []
        for r, q in zip(rankings, qvecs, strict=True):
            pool = r.docs[:self.pool] if self.pool else r.docs
            if not pool:
                out.append(r)
                continue
            ids = [d.doc_id for d in pool]
            vecs = np.asarray(self.index.embeddings[[self.index.row_of[d] for d in ids]],
                              dtype=np.float64)
            relevance = vecs @ q
            order, redundancy = mmr_order(relevance, vecs @ vecs.T, self.top_k, self.lam)
            scores = {ids[p]: float(len(order) - t) for t, p in enumerate(order)}
            extra = {ids[p]: {f"{path_id}.relevance": float(relevance[p]),
                              f"{path_id}.redundancy": red}
                     for p, red in zip(order, redundancy, strict=True)}
            out.append(rerank_head(r, scores, path_id, extra))
        return out

    def describe(self) -> str:
        return self.described(top_k=self.top_k, lam=float(self.lam), pool=self.pool)


@register_stage("mmr", renamed={"k": "top_k"})
def _mmr(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``mmr: {top_k: 10, lambda: 0.5, pool: 100}``: maximal marginal relevance."""
    if "lambda" in params:
        params["lam"] = params.pop("lambda")
    return MMRReranker(ctx.require_index("mmr"), **params)
