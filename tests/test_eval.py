"""Metrics, significance tests and experiment tables."""

from __future__ import annotations

import itertools

import ir_measures
import pytest

from intentrank.eval.harness import run_experiment
from intentrank.measures.metrics import evaluate, to_measure
from intentrank.measures.significance import paired_test
from intentrank.retrieve.retrievers import BM25Retriever, TfidfRetriever

QRELS = {"1": {"a": 2, "b": 1, "z": 0}, "2": {"c": 1}, "3": {"d": 1}}
RUN = {"1": {"b": 3.0, "x": 2.0, "a": 1.0}, "2": {"y": 1.0, "c": 0.5}}


def test_aliases_map_to_ir_measures():
    assert str(to_measure("MRR@10")) == "RR@10"
    assert str(to_measure("MAP")) == "AP"
    assert str(to_measure("Recall@100")) == "R@100"
    assert str(to_measure("HitRate@5")) == "Success@5"
    with pytest.raises(ValueError, match="unknown metric"):
        to_measure("Bogus@3")


def test_two_spellings_of_one_metric_both_get_values():
    res = evaluate({"q": {"a": 2.0, "c": 1.0}}, {"q": {"a": 1, "b": 1}},
                   ["R@3", "Recall@3", "P@3", "R@3"])
    assert res.metrics == ["R@3", "Recall@3", "P@3"]
    assert res.aggregate["R@3"] == res.aggregate["Recall@3"] == pytest.approx(0.5)


def test_unretrieved_queries_count_zero_and_values_match_ir_measures():
    res = evaluate(RUN, QRELS, ["nDCG@10", "MRR@10", "P@2", "HitRate@1"])
    assert res.per_query["3"] == {"nDCG@10": 0.0, "MRR@10": 0.0, "P@2": 0.0, "HitRate@1": 0.0}
    assert res.per_query["2"]["MRR@10"] == 0.5
    assert res.per_query["1"]["P@2"] == 0.5
    direct = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.nDCG @ 10],
                                                                 QRELS, RUN)}
    assert res.per_query["1"]["nDCG@10"] == pytest.approx(direct["1"])
    assert res.aggregate["MRR@10"] == pytest.approx((1 + 0.5 + 0) / 3)


def test_paired_test_behaviour():
    a = {str(i): 0.5 for i in range(30)}
    same = paired_test(a, dict(a), "m")
    assert same.p_ttest == 1.0 and same.p_randomization == 1.0
    better = paired_test(a, {q: v + 0.2 + 0.01 * int(q) for q, v in a.items()}, "m")
    assert better.delta > 0.2 and better.p_ttest < 1e-6 and better.p_randomization < 0.001
    with pytest.raises(ValueError, match="different queries"):
        paired_test(a, {"x": 1.0})


def _spec(stages, metrics, baseline=None):
    from intentrank.eval.spec import ExperimentSpec, PipelineSpec, TableSpec

    return ExperimentSpec([PipelineSpec(n, stage=s) for n, s in stages.items()], metrics,
                          baseline=baseline, report=[TableSpec("quality")]).check()


def test_experiment_on_real_index(cranfield, cranfield_index):
    from intentrank.report.markdown import render

    queries, qrels = cranfield.split("test")
    exp = run_experiment(_spec({"bm25": BM25Retriever(cranfield_index),
                                "tfidf": TfidfRetriever(cranfield_index)},
                               ["nDCG@10", "Recall@100"], "bm25"),
                         index=cranfield_index, queries=queries, qrels=qrels)
    table = render(exp).split("### Table I. Retrieval quality\n\n")[1]
    assert table.splitlines()[0] == "| system | nDCG@10 | Recall@100 | ms/query |"
    assert "bm25 (baseline)" in table and "n = 225 queries" in table
    test = exp.tests["tfidf"]["nDCG@10"]
    assert test.mean_a == pytest.approx(exp.pipelines[0].scores.aggregate["nDCG@10"])
    assert test.delta < 0  # TF-IDF is weaker than BM25 on Cranfield (0.334 vs 0.373)
    from intentrank.errors import ConfigError

    with pytest.raises(ConfigError, match="baseline"):
        _spec({"bm25": BM25Retriever(cranfield_index)}, ["nDCG@10"], baseline="nope")


def test_bad_metrics_are_refused_before_any_system_runs():
    from intentrank.core.stage import Stage
    from intentrank.errors import ConfigError
    from intentrank.measures.metrics import validate_metrics

    class Exploding(Stage):
        name = "exploding"

        def transform(self, rankings, trace):
            raise AssertionError("must not run")

    for bad in (["nDCG@0"], ["nDCG@10", "Bogus"], [], ["P@0", "MRR@10"]):
        with pytest.raises(ConfigError):
            _spec({"x": Exploding()}, bad)
    with pytest.raises(ConfigError, match="pipelines: none given"):
        _spec({}, ["nDCG@10"])
    assert validate_metrics(["MRR@10", " MRR@10 ", "HitRate@5"]) == ["MRR@10", "HitRate@5"]
    with pytest.raises(ValueError, match="cut-off must be >= 1"):
        to_measure("nDCG@0")  # trec_eval would abort the whole process


def test_queries_without_a_relevant_document_are_skipped_like_trec_eval() -> None:
    qrels = {"1": {"a": 1, "b": 0}, "2": {"c": 0}}
    run = {"1": {"a": 2.0, "b": 1.0}, "2": {"c": 1.0}}
    res = evaluate(run, qrels, ["nDCG@10", "P@1"])
    assert res.skipped == ["2"] and set(res.per_query) == {"1"}
    assert res.aggregate["P@1"] == 1.0  # not halved by the query with nothing to find


# -- tied scores: the ranking the user gets is the one evaluated ----------------------------
def _tied(order: list[str]):
    from intentrank.types import Query, Ranking, ScoredDoc

    # a and b tie; c scores above b in the ranking's own order (a reranker's kept score)
    scores = {"a": 1.0, "b": 1.0, "c": 1.2, "d": 0.5}
    return Ranking(Query("q", "x"), [ScoredDoc(d, scores[d]) for d in order])


@pytest.mark.parametrize(("order", "rank_of_a"), [(["a", "b", "c", "d"], 1),
                                                   (["b", "a", "c", "d"], 2),
                                                   (["b", "c", "a", "d"], 3)])
def test_a_run_of_tied_or_rising_scores_evaluates_in_the_returned_order(order, rank_of_a):
    import math

    from intentrank.core.stage import RunResult
    from intentrank.eval.harness import PipelineResult
    from intentrank.types import Trace

    qrels = {"q": {"a": 1}}
    ranking = _tied(order)
    for run in (RunResult([ranking]).to_run(),
                PipelineResult(None, "", [ranking], Trace(), None).to_run()):  # type: ignore[arg-type]
        assert list(run["q"]) == order
        scores = list(run["q"].values())
        assert all(x > y for x, y in itertools.pairwise(scores))
        assert run["q"]["a"] == 1.0 or rank_of_a > 1  # the first of a tie keeps its score
        res = evaluate(run, qrels, ["nDCG@10", "MRR@10"])
        assert res.per_query["q"]["MRR@10"] == pytest.approx(1 / rank_of_a)
        assert res.per_query["q"]["nDCG@10"] == pytest.approx(1 / math.log2(rank_of_a + 1))


def test_a_written_run_keeps_the_returned_order_and_strictly_decreasing_scores(tmp_path):
    from intentrank.core.stage import RunResult
    from intentrank.data.trec import load_run, write_run
    from intentrank.types import Query, Ranking, ScoredDoc

    near = Ranking(Query("p", "y"), [ScoredDoc("z", 2.0000001), ScoredDoc("y", 2.0000004),
                                     ScoredDoc("x", 2.0)])  # equal at six decimals
    run = RunResult([_tied(["b", "a", "c", "d"]), near]).to_run()
    write_run(run, tmp_path / "run.trec")
    back = load_run(tmp_path / "run.trec")
    assert {q: list(docs) for q, docs in back.items()} == {"q": ["b", "a", "c", "d"],
                                                            "p": ["z", "y", "x"]}
    for docs in back.values():
        scores = list(docs.values())
        assert all(x > y for x, y in itertools.pairwise(scores))
    qrels = {"q": {"a": 1}, "p": {"y": 1}}
    assert evaluate(back, qrels, ["MRR@10"]).per_query == {"q": {"MRR@10": 0.5},
                                                          "p": {"MRR@10": 0.5}}
    write_run({"q": {"d2": 0.5, "d1": 0.5, "d3": 0.9}}, tmp_path / "raw.trec")  # a plain dict
    lines = (tmp_path / "raw.trec").read_text().splitlines()
    assert [ln.split()[2] for ln in lines] == ["d3", "d2", "d1"]  # by score, ties as given
    assert lines[2] == "q Q0 d1 3 0.499999 intentrank"
    # at 1000 a millionth is below single precision (trec_eval's): the step is larger
    write_run({"m": {"m1": 1000.0, "m2": 1000.0}}, tmp_path / "big.trec")
    big = load_run(tmp_path / "big.trec")
    assert list(big["m"]) == ["m1", "m2"] and big["m"]["m2"] == 999.999938
    assert evaluate(big, {"m": {"m1": 1}}, ["MRR@10", "nDCG@10"]).per_query["m"] == {
        "MRR@10": 1.0, "nDCG@10": 1.0}
