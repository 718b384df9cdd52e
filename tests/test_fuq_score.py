"""FUQ composite score against a hand computation, and its reranking on a real index."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tolerances import F32_ABS, F32_REL

from intentrank.rerank.fuq import FollowUpReranker, FUQWeights, fuq_components
from intentrank.types import Query, Ranking, ScoredDoc, Trace


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=float)
    return v / np.linalg.norm(v)


def test_composite_score_matches_hand_computation() -> None:
    q = _unit(1, 0, 0)
    f1, f2 = _unit(0, 1, 0), _unit(1, 1, 0)
    c = _unit(1, 1, 1)
    comps = fuq_components(q, np.stack([f1, f2]), c[None, :])[0]
    cos_q = 1 / math.sqrt(3)
    cos_f = (1 / math.sqrt(3) + 2 / math.sqrt(6)) / 2
    dist = math.sqrt((1 - 1 / math.sqrt(3)) ** 2 + 2 * (1 / 3))
    sig = 1 / (1 + math.exp(-dist))
    assert comps == pytest.approx([cos_q, cos_f, sig], rel=F32_REL, abs=F32_ABS)
    w = FUQWeights(alpha=0.5, beta=0.3, gamma=0.2)
    assert comps @ w.vector() == pytest.approx(0.5 * cos_q + 0.3 * cos_f - 0.2 * sig,
                                             rel=F32_REL, abs=F32_ABS)


def test_rerank_on_real_index_keeps_components_and_tail(cranfield_index) -> None:
    idx = cranfield_index
    ids = idx.ids[:8]
    query = Query("1", "boundary layer transition on a flat plate").with_derived(
        "followup", ["what causes transition to turbulence?"], "test")
    ranking = Ranking(query, [ScoredDoc(d, 1.0 - i / 10, {"prev": 1.0 - i / 10})
                              for i, d in enumerate(ids)])
    out = FollowUpReranker(idx, FUQWeights(1.0, 0.0, 0.0), top_k=5)([ranking], Trace())[0]
    assert sorted(out.doc_ids[:5]) == sorted(ids[:5])
    assert out.doc_ids[5:] == ids[5:]  # the tail keeps its order below the head
    head = out.docs[:5]
    assert [d.score for d in head] == sorted((d.score for d in head), reverse=True)
    assert head[0].score == pytest.approx(1.0) and head[-1].score == pytest.approx(0.0)
    # with alpha only, the order is the query cosine order of the stored embeddings
    qv = idx.encode_queries([query.text])[0]
    cos = {d: float(idx.embeddings[idx.row_of[d]] @ qv) for d in ids[:5]}
    assert out.doc_ids[:5] == sorted(cos, key=lambda d: -cos[d])
    assert all({"prev", "fuq", "fuq.cos", "fuq.followups", "fuq.distance"} <= set(d.stage_scores)
               for d in head)
    assert head[0].stage_scores["fuq.cos"] == pytest.approx(cos[head[0].doc_id], abs=1e-5)


def test_no_followups_uses_the_query(cranfield_index) -> None:
    idx = cranfield_index
    r = Ranking(Query("1", "shock waves"), [ScoredDoc(d, 0.0) for d in idx.ids[:4]])
    out = FollowUpReranker(idx, top_k=4)([r], Trace())[0]
    for d in out.docs:
        assert d.stage_scores["fuq.followups"] == pytest.approx(d.stage_scores["fuq.cos"],
                                                             rel=F32_REL, abs=F32_ABS)
