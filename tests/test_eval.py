"""Metrics, significance tests and experiment tables."""

from __future__ import annotations

import ir_measures
import pytest

from intentrank.eval.harness import run_experiment
from intentrank.eval.metrics import evaluate, to_measure
from intentrank.eval.significance import paired_test
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
    from intentrank.eval.metrics import validate_metrics

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
