"""Fusion definitions checked against hand computations, and the operator algebra."""

from __future__ import annotations

import pytest
from fakes import Fixed

from intentrank.core.stage import Chain, Cutoff, Stage
from intentrank.fuse.base import minmax
from intentrank.fuse.interleave import InterleaveFusion, interleave
from intentrank.fuse.rrf import RRFFusion, rrf
from intentrank.fuse.weighted import WeightedFusion, weighted_minmax
from intentrank.types import Query, Ranking, ScoredDoc, Trace


def test_rrf_is_one_based_and_weights_multiply_each_list():
    fused = rrf([["a", "b", "c"], ["b", "d"]], rrf_k=60, weights=[2.0, 1.0])
    assert fused["a"] == pytest.approx(2 / 61)
    assert fused["b"] == pytest.approx(2 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(2 / 63)
    assert fused["d"] == pytest.approx(1 / 62)


def test_rrf_default_weights_and_errors():
    assert rrf([["x"], ["x"]]) == {"x": pytest.approx(2 / 61)}
    with pytest.raises(ValueError, match="2 weights for 3"):
        rrf([["a"], ["b"], ["c"]], weights=[1, 1])
    with pytest.raises(ValueError, match="non-negative"):
        rrf([["a"]], weights=[-1])


def test_weighted_minmax_normalises_each_list():
    assert minmax({"a": 5, "b": 5}) == {"a": 1.0, "b": 1.0}
    fused = weighted_minmax([{"a": 10, "b": 0, "c": 5}, {"b": 3, "d": 1}], weights=[0.7, 0.3])
    assert fused == pytest.approx({"a": 0.7, "b": 0.3, "c": 0.35, "d": 0.0})


def test_interleave_alternates_and_deduplicates():
    assert interleave([["a", "b", "c"], ["b", "d"], ["e"]]) == ["a", "b", "e", "d", "c"]


def test_operators_compose_and_keep_stage_scores():
    a = Fixed("a", {"d1": 3.0, "d2": 2.0, "d3": 1.0})
    b = Fixed("b", {"d3": 9.0, "d4": 1.0})
    pipe = (a | b) % 2
    assert isinstance(pipe, Chain) and isinstance(pipe.stages[-1], Cutoff)
    result = pipe.run([Query("q1", "x")])
    top = result.rankings[0]
    assert top.doc_ids == ["d3", "d1"]  # d3: 1/63 + 1/61 beats d1: 1/61
    assert top.docs[0].stage_scores["rrf/a"] == 1.0 and top.docs[0].stage_scores["rrf/b"] == 9.0
    assert set(result.trace.stages) == {"rrf/a", "rrf/b", "rrf"}
    assert pipe.describe() == "rrf(a | b, rrf_k=60) >> % 2"


class Boost(Stage):
    """A fake reranker: rescores the documents it knows, keeps the rest below."""

    def __init__(self, name: str, scores: dict[str, float]) -> None:
        self.name, self.scores = name, scores

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        from intentrank.rerank.base import rerank_head

        return [rerank_head(r, {d: s for d, s in self.scores.items() if d in r.doc_ids},
                            trace.path_of(self)) for r in rankings]


def test_every_stage_instance_has_its_own_path_id():
    """Same-named stages (two "dense" branches, two rerankers) get one Trace entry and one
    stage score each; the same pipeline gets the same ids on every run."""
    inner = RRFFusion([Fixed("dense", {"d1": 1.0}), Fixed("bm25", {"d2": 1.0})], rrf_k=10)
    pipe = (RRFFusion([Fixed("dense", {"d1": 2.0, "d2": 1.0}), Fixed("dense", {"d3": 5.0}),
                       inner]) >> Boost("ce", {"d1": 0.5}) >> Boost("ce", {"d2": 0.7}))
    ids = {"rrf/dense", "rrf/dense#2", "rrf/rrf", "rrf/rrf/dense", "rrf/rrf/bm25", "rrf",
           "ce", "ce#2"}
    first, second = pipe.run([Query("q", "x")]), pipe.run([Query("q", "x")])
    assert list(first.trace.stages) == list(second.trace.stages)
    assert set(first.trace.stages) == ids
    assert all(st.calls == 1 for st in first.trace.stages.values())
    fused = pipe.stages[0].run([Query("q", "x")]).rankings[0]
    by_doc = {d.doc_id: d.stage_scores for d in fused.docs}
    assert by_doc["d1"]["rrf/dense"] == 2.0 and by_doc["d3"]["rrf/dense#2"] == 5.0
    assert by_doc["d1"]["rrf/rrf/dense"] == 1.0 and by_doc["d2"]["rrf/rrf/bm25"] == 1.0
    assert [d.stage_scores for d in first.rankings[0].docs] == \
        [d.stage_scores for d in second.rankings[0].docs]
    last = {d.doc_id: d.stage_scores for d in first.rankings[0].docs}
    assert last["d2"]["ce#2"] == 0.7 and "ce#2" not in last["d1"] and last["d1"]["ce"] == 0.5
    assert last["d2"]["rrf/dense"] == 1.0 and last["d2"]["rrf/rrf/bm25"] == 1.0
    with pytest.raises(ValueError, match="without '/'"):
        Fixed("a/b", {}).run(["x"])


def test_fusers_flatten_and_interleave_scores():
    a, b, c = Fixed("a", {"x": 1.0}), Fixed("b", {"y": 1.0}), Fixed("c", {"z": 1.0})
    assert len(((a | b) | c).branches) == 3
    ranking = InterleaveFusion([a, b]).search("q")
    assert ranking.doc_ids == ["x", "y"] and ranking.docs[1].score == 0.5
    w = WeightedFusion([a, b], weights=[0.2, 0.8]).search("q")
    assert w.doc_ids == ["y", "x"]
    with pytest.raises(ValueError):
        RRFFusion([a, b], weights=[1.0])


def test_cutoff_rejects_nonpositive():
    with pytest.raises(ValueError):
        Cutoff(0)


def test_ranking_from_scores_keeps_previous_stage_scores():
    q = Query("q", "t")
    prev = Ranking(q, [ScoredDoc("a", 1.0, {"bm25": 1.0})])
    new = Ranking.from_scores(q, {"a": 0.3}, "ce", previous=prev)
    assert new.docs[0].stage_scores == {"bm25": 1.0, "ce": 0.3}


def test_rrf_with_input_fuses_the_input_order_and_the_rerankers_order():
    from intentrank.fuse.rrf_with_input import RRFWithInput

    first = Fixed("first", {"a": 3.0, "b": 2.0, "c": 1.0})
    reverse = Fixed("ce", {"a": 0.1, "b": 0.5, "c": 0.9})  # ranks c, b, a
    trace = Trace()
    out = (first >> RRFWithInput(reverse, name="ce_rrf"))([Ranking(Query("q", "x"))], trace)[0]
    # a: 1/61 + 1/63, b: 2/62, c: 1/63 + 1/61 -> a and c tie (broken by id), then b
    assert out.doc_ids == ["a", "c", "b"]
    assert out.docs[0].score == pytest.approx(1 / 61 + 1 / 63)
    assert out.docs[0].stage_scores["ce_rrf/ce"] == pytest.approx(0.1)  # the reranker's score
    assert set(trace.stages) == {"first", "ce_rrf/ce", "ce_rrf"}


def test_rrf_with_input_weights_the_input_against_the_reranker():
    from intentrank.core.params import ParameterError
    from intentrank.fuse.rrf_with_input import RRFWithInput

    first = Fixed("first", {"a": 3.0, "b": 2.0, "c": 1.0})
    reverse = Fixed("ce", {"a": 0.1, "b": 0.5, "c": 0.9})
    q = [Ranking(Query("q", "x"))]
    heavy_ce = (first >> RRFWithInput(reverse, weights=[1.0, 2.0]))(q)[0]
    assert heavy_ce.doc_ids == ["c", "b", "a"]  # c: 1/63 + 2/61, a: 1/61 + 2/63
    assert heavy_ce.docs[0].score == pytest.approx(1 / 63 + 2 / 61)
    assert (first >> RRFWithInput(reverse, weights=[1.0, 0.0]))(q)[0].doc_ids == ["a", "b", "c"]
    assert "weights=[1.0, 2.0]" in RRFWithInput(reverse, weights=[1, 2]).describe()
    with pytest.raises(ParameterError, match="weights"):
        RRFWithInput(reverse, weights=[1.0])


def test_fusion_parameters_are_checked():
    import math

    from intentrank.core.params import ParameterError

    a = Fixed("a", {"d1": 1.0})
    for bad_k in (0, -1, -60, math.nan, math.inf, "60", True):
        with pytest.raises(ParameterError, match="rrf_k"):
            RRFFusion([a, a], rrf_k=bad_k)
        with pytest.raises(ValueError, match="rrf_k"):
            rrf([["x"]], rrf_k=bad_k)
    for bad in ([math.nan, 1], [math.inf, 1], [-0.5, 1], ["1", 1], [True, 1]):
        with pytest.raises(ValueError, match="weights"):
            WeightedFusion([a, a], weights=bad)
        with pytest.raises(ValueError, match="weights"):
            weighted_minmax([{"x": 1.0}, {"y": 1.0}], weights=bad)
    with pytest.raises(ValueError, match="all zero"):
        WeightedFusion([a, a], weights=[0, 0])
    for cls in (RRFFusion, WeightedFusion, InterleaveFusion):
        with pytest.raises(ValueError, match="at least one branch"):
            cls([])
    with pytest.raises(ValueError, match="cut-off must be >= 1, got 0"):
        a % 0
    assert RRFFusion([a, a], rrf_k=0.5).rrf_k == 0.5  # any rrf_k > 0 is fine


def test_nested_rrf_with_its_own_rrf_k_is_not_flattened_into_the_outer_one() -> None:
    from intentrank.fuse.rrf import RRFFusion

    a, b, c = (Fixed(n, {"x": 1.0, "y": 0.5}) for n in "abc")
    inner = RRFFusion([a, b], rrf_k=1)
    outer = inner | c
    assert outer.branches == [inner, c] and outer.rrf_k == 60  # rrf_k=1 kept inside
    same = RRFFusion([a, b]) | c
    assert same.branches == [a, b, c]  # same parameters: one fusion of three lists
