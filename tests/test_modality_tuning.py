"""Tuning the static tri-modal weights on the real Cranfield index: never on test; the
re-weighted stage scores reproduce weighted fusion; the CLI saves weights a config loads."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import F32_ABS, F32_REL

from intentrank.errors import ConfigError, DataError
from intentrank.fuse.weighted import WeightedFusion
from intentrank.retrieve.retrievers import DenseRetriever, GraphRetriever, sparse_retriever
from intentrank.tune.grid import feature_matrix
from intentrank.tune.modality import (
    FEATURES,
    SCORES,
    modality_rankings,
    simplex_grid,
    tune_modality_on_split,
)


@pytest.fixture(scope="module")
def sample(cranfield):
    return cranfield.sample("test", 10, seed=0)


def _legs(index, depth=100):
    return [DenseRetriever(index, depth), sparse_retriever(index, depth),
            GraphRetriever(index, depth)]


class SplitSpy:
    """A dataset stand-in that records which split was read."""

    name = "spy"

    def __init__(self, queries, qrels, splits=("train", "test")) -> None:
        self.queries, self.qrels, self.splits, self.read = queries, qrels, list(splits), []

    def sample(self, split, n, seed):
        self.read.append(split)
        return self.queries, self.qrels


def test_simplex_grid() -> None:
    for step, n in ((0.1, 66), (0.05, 231)):
        grid = simplex_grid(step)
        assert len(grid) == n and all(sum(p) == pytest.approx(1) for p in grid)
    with pytest.raises(ConfigError):
        simplex_grid(0.3)


def test_modality_tuner_refuses_test_and_weights_sum_to_one(cranfield_index, sample) -> None:
    queries, qrels = sample
    spy = SplitSpy(queries[:6], qrels)
    with pytest.raises(DataError, match="on the test split"):
        tune_modality_on_split(spy, cranfield_index, split="test")
    res = tune_modality_on_split(spy, cranfield_index, split="train", step=0.1, depth=30)
    assert spy.read == ["train"]
    assert set(res.best) == set(FEATURES) and sum(res.best.values()) == pytest.approx(1)
    assert len(res.table) == 66 and res.score == max(s for _, s in res.table)


def test_reweighting_stage_scores_reproduces_weighted_fusion(cranfield_index, sample) -> None:
    queries = sample[0][:3]
    rankings = modality_rankings(cranfield_index, queries, depth=100)
    fused = (WeightedFusion(_legs(cranfield_index), (0.5, 0.35, 0.15)) % 100).run(queries)
    tri = {r.query.id: r for r in fused.rankings}
    for r in rankings:
        ids, mat = feature_matrix(r, SCORES, normalise=True)
        score = dict(zip(ids, mat @ np.array([0.5, 0.35, 0.15]), strict=True))
        for d in tri[r.query.id].docs[:10]:
            assert score[d.doc_id] == pytest.approx(d.score, rel=F32_REL, abs=F32_ABS)


def test_cli_tune_modality_saves_weights_a_config_can_load(cranfield, cranfield_index, tmp_path,
                                                           monkeypatch) -> None:
    """Real data: Cranfield's corpus and queries with 20 of its judged queries as a train
    split; the tuned weights are saved by name and a weighted fusion config loads them."""
    from typer.testing import CliRunner

    from intentrank.cli import app
    from intentrank.core.saved_params import load_params
    from intentrank.pipelines import pipeline_from_config

    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path / "cache"))
    ds = tmp_path / "cran-train"
    (ds / "qrels").mkdir(parents=True)
    for f in ("corpus.jsonl", "queries.jsonl"):
        (ds / f).symlink_to(cranfield.root / f)
    judged = list(cranfield.qrels["test"].items())[:20]
    (ds / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, docs in judged for d, g in docs.items()))
    res = CliRunner().invoke(app, ["tune-modality", str(ds), "--index",
                                   str(cranfield_index.path), "--step", "0.5",
                                   "--name", "cran-modality"])
    assert res.exit_code == 0, res.output
    weights = load_params("cran-modality")
    assert set(weights) == {"dense", "sparse", "graph"} and sum(weights.values()) == \
        pytest.approx(1)
    config = tmp_path / "tuned.yaml"
    config.write_text("pipeline:\n  - fuse: {method: weighted, params: cran-modality, inputs: "
                      "[{dense: {depth: 50}}, {sparse: {depth: 50}}, {graph: {depth: 50}}]}\n")
    fusion = pipeline_from_config(config, index=cranfield_index)
    assert fusion.stages[0].weights == [weights["dense"], weights["sparse"], weights["graph"]]
    assert fusion.search("boundary layer", k=3).docs
    refused = CliRunner().invoke(app, ["tune-modality", str(ds), "--split", "test"])
    assert refused.exit_code == 2 and "on the test split" in refused.output
