"""Swap metrics and error analysis on hand-made rankings; the stage cache on a real index."""

from __future__ import annotations

import pytest

from intentrank.core.cache import Cached
from intentrank.measures.error_analysis import degraded_queries
from intentrank.measures.swaps import position_swaps, swap_stats
from intentrank.retrieve.retrievers import BM25Retriever
from intentrank.types import Query, Ranking, ScoredDoc, Trace


def _r(qid: str, ids: list[str]) -> Ranking:
    return Ranking(Query(qid, qid), [ScoredDoc(d, -i) for i, d in enumerate(ids)])


def test_position_swaps_counts_inversions() -> None:
    assert position_swaps("abcd", "abcd") == 0
    assert position_swaps("abcd", "bacd") == 1
    assert position_swaps("abcd", "dcba") == 6
    assert position_swaps("abcd", "db") == 1  # only the output's documents count
    assert position_swaps("abc", "xba") == 1  # documents new to the list are left out


def test_swap_stats_over_queries() -> None:
    before = [_r("1", list("abcde")), _r("2", list("abcde")), _r("3", list("abc"))]
    after = [_r("1", list("abcde")), _r("2", list("cabde")), _r("3", list("cba"))]
    st = swap_stats(before, after, depth=3)
    # q1: 0 swaps; q2 top-3 "cab" vs "abc": 2 swaps; q3 "cba": 3 swaps
    assert st.mean_swaps == pytest.approx(5 / 3)
    assert st.top1_changed == pytest.approx(2 / 3)
    assert st.queries == 3 and st.depth == 3


def test_degraded_queries_profile() -> None:
    before = {"a": 0.8, "b": 0.5, "c": 0.2, "d": 0.4}
    after = {"a": 0.3, "b": 0.5, "c": 0.1, "d": 0.9}
    texts = {"a": "revenue in 2020", "b": "why is the sky blue", "c": "heat flux", "d": "x 1 2"}
    deg = degraded_queries(before, after, texts, worst=1)
    assert deg.count == 2 and deg.share == pytest.approx(0.5)
    assert deg.share_with_numbers == pytest.approx(0.5)
    assert deg.overall_share_with_numbers == pytest.approx(0.5)
    assert deg.mean_length == pytest.approx(2.5)
    assert deg.overall_mean_length == pytest.approx(3.25)
    assert deg.worst == [{"query_id": "a", "query": "revenue in 2020", "before": 0.8,
                          "after": 0.3}]


def test_cached_stage_replays_outputs_and_costs(cranfield_index) -> None:
    bm25 = BM25Retriever(cranfield_index, depth=10)
    cached = Cached(bm25)
    queries = [Query("1", "boundary layer"), Query("2", "supersonic flow over wings")]
    first, t1 = Trace(), Trace()
    out1 = cached([Ranking(q) for q in queries], t1)
    out2 = cached([Ranking(q) for q in queries], first)
    assert [r.doc_ids for r in out1] == [r.doc_ids for r in out2]
    assert out1[0].doc_ids == bm25.run(queries[:1]).rankings[0].doc_ids
    assert first.stages["bm25"].counters["replayed"] == 2
    assert first.stages["bm25"].queries == 2
    assert first.stages["bm25"].seconds == pytest.approx(t1.stages["bm25"].seconds)
    # a changed query is computed, not replayed
    t3 = Trace()
    cached([Ranking(Query("1", "heat transfer"))], t3)
    assert "replayed" not in t3.stages["bm25"].counters


def test_cached_output_replayed_under_another_path_id_is_relabelled(cranfield_index) -> None:
    """A stage computed alone (``bm25``) and replayed as a fusion branch (``weighted/bm25``),
    or the other way round, reads as if computed where it is replayed."""
    from intentrank.fuse.weighted import WeightedFusion
    from intentrank.retrieve.retrievers import TfidfRetriever

    queries = [Query("1", "boundary layer"), Query("2", "supersonic flow over wings")]

    def fused(store: dict):
        return WeightedFusion([Cached(BM25Retriever(cranfield_index, depth=10), store),
                               TfidfRetriever(cranfield_index, depth=10)])

    for order in ("alone first", "branch first"):
        store: dict = {}
        if order == "branch first":
            fused(store).run(queries)
        alone = Cached(BM25Retriever(cranfield_index, depth=10), store).run(queries)
        branch = fused(store).run(queries)
        assert set(alone.trace.stages) == {"bm25"}
        assert set(branch.trace.stages) == {"weighted/bm25", "weighted/tfidf", "weighted"}
        replayed = alone.trace if order == "branch first" else branch.trace
        assert replayed.replayed.keys() == {"bm25" if order == "branch first"
                                            else "weighted/bm25"}
        assert {n for r in alone.rankings for n in r.score_names()} == {"bm25"}
        assert {n for r in branch.rankings for n in r.score_names()} == {
            "weighted/bm25", "weighted/tfidf", "weighted"}
    assert alone.rankings == BM25Retriever(cranfield_index, depth=10).run(queries).rankings
