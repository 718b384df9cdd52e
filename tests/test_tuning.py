"""Weight tuning by grid search and k-fold cross-validation on hand-made rankings."""

from __future__ import annotations

import pytest

from intentrank.core.saved_params import load_params, save_params
from intentrank.errors import ConfigError
from intentrank.tune.grid import cross_validated_run, feature_matrix, grid_search, kfold
from intentrank.types import Query, Ranking, ScoredDoc


def _ranking(qid: str, rows: dict[str, tuple[float, float]]) -> Ranking:
    return Ranking(Query(qid, "q"), [ScoredDoc(d, 0.0, {"a": a, "b": b})
                                     for d, (a, b) in rows.items()])


def _data(n: int = 10):
    # feature "b" always puts the relevant doc first; "a" puts it last
    rankings = [_ranking(f"q{i}", {"rel": (0.1, 0.9), "x": (0.9, 0.2), "y": (0.5, 0.1)})
                for i in range(n)]
    qrels = {f"q{i}": {"rel": 1} for i in range(n)}
    return rankings, qrels


def test_grid_search_finds_the_informative_feature() -> None:
    rankings, qrels = _data()
    res = grid_search(rankings, qrels, ["a", "b"], {"a": [0, 0.5, 1], "b": [0, 0.5, 1]},
                      metric="MRR@10")
    assert res.best == {"a": 0, "b": 0.5} and res.score == pytest.approx(1.0)
    assert res.n_queries == 10 and len(res.table) == 8  # all-zero point left out
    worst = res.table[-1]
    assert worst[0] == {"a": 1, "b": 0} and worst[1] == pytest.approx(1 / 3)


def test_feature_matrix_normalises_and_fills_missing() -> None:
    r = Ranking(Query("q", "t"), [ScoredDoc("d1", 0, {"a": 2.0}), ScoredDoc("d2", 0, {"a": 4.0}),
                                  ScoredDoc("d3", 0, {"b": 1.0})])
    ids, mat = feature_matrix(r, ["a", "b"], normalise=True)
    assert ids == ["d1", "d2", "d3"]
    assert mat.tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]


def test_kfold_is_a_seeded_partition() -> None:
    ids = [f"q{i}" for i in range(23)]
    folds = kfold(ids, 5, seed=3)
    assert sorted(sum(folds, [])) == sorted(ids) and len(folds) == 5
    assert folds == kfold(list(reversed(ids)), 5, seed=3)
    with pytest.raises(ConfigError):
        kfold(ids, 1)


def test_cross_validation_tunes_without_the_held_out_fold() -> None:
    rankings, qrels = _data(10)
    run, results = cross_validated_run(rankings, qrels, ["a", "b"], {"a": [0, 1], "b": [0, 1]},
                                       metric="MRR@10", folds=5)
    assert set(run) == set(qrels) and len(results) == 5
    assert all(r.n_queries == 8 for r in results)
    assert all(max(run[q], key=run[q].get) == "rel" for q in run)


def test_tuning_without_judged_queries_is_an_error() -> None:
    rankings, _ = _data(3)
    with pytest.raises(ConfigError, match="judgments"):
        grid_search(rankings, {"other": {"d": 1}}, ["a"], {"a": [1]})


def test_named_parameter_sets_round_trip(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path))
    rankings, qrels = _data(4)
    res = grid_search(rankings, qrels, ["a", "b"], {"a": [0, 1], "b": [0, 1]}, metric="MRR@10")
    path = save_params("scifact-fuq", res, dataset="toy", split="train")
    assert path.is_relative_to(tmp_path)
    assert load_params("scifact-fuq") == res.best
    with pytest.raises(ConfigError, match="no saved parameter set"):
        load_params("missing")
    with pytest.raises(ConfigError):
        load_params("../escape")


def test_tied_weighted_scores_are_evaluated_in_the_order_a_stage_ranks_them() -> None:
    from intentrank.tune.grid import weighted_run

    ranking = _ranking("q", {"b": (0.5, 0.0), "a": (0.5, 0.0), "c": (0.9, 0.0)})
    run = weighted_run({"q": feature_matrix(ranking, ["a", "b"])}, [1.0, 0.0])
    ranked = Ranking.from_scores(Query("q", "q"), {"b": 0.5, "a": 0.5, "c": 0.9}, "s")
    assert list(run["q"]) == ranked.doc_ids == ["c", "a", "b"]
    assert run["q"]["c"] > run["q"]["a"] > run["q"]["b"]
    # "a", ranked second by every stage, is what tuning scores (trec_eval alone puts b first)
    res = grid_search([ranking], {"q": {"a": 1}}, ["a", "b"], {"a": [1], "b": [0]},
                      metric="MRR@10")
    assert res.score == pytest.approx(0.5)
