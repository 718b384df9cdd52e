"""Training a cross-encoder on real SciFact train queries for a few seconds; test is refused."""

from __future__ import annotations

import json
import random

import pytest

from intentrank.errors import DataError
from intentrank.index import IndexSettings, build_index
from intentrank.training.reranker import mine_negatives, sample_epoch, train_reranker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scifact(data_dir):
    from intentrank.data.dataset import load_dataset

    return load_dataset(data_dir / "scifact")


@pytest.fixture(scope="module")
def scifact_bm25(scifact, tmp_path_factory):
    """BM25 only: a dense SciFact index takes minutes to encode on 2 cores."""
    return build_index(scifact.corpus(), tmp_path_factory.mktemp("idx") / "scifact",
                       IndexSettings(legs=("bm25",)))


def test_trains_within_budget_and_records_its_data(scifact, scifact_bm25, tmp_path) -> None:
    from intentrank.models.cross_encoder import load_cross_encoder, trained_max_length

    out = tmp_path / "ce"
    res = train_reranker(scifact, out, scifact_bm25, max_queries=12, negatives_per_query=3,
                         batch_size=8, max_length=64, time_budget_s=12, epochs=3,
                         progress=False)
    info = json.loads((out / "training.json").read_text())
    assert info == res.info and res.out_dir == out
    assert info["split"] == "train" and info["dataset"] == "scifact"
    assert info["n_queries"] == len(info["query_ids"]) == 12
    assert not set(info["query_ids"]) & set(scifact.qrels["test"])
    # listwise: each positive is grouped with its query's 3 negatives
    assert info["negatives_per_epoch"] == 3 * info["positives_per_epoch"] >= 36
    assert info["negatives"]["sources"] == ["bm25 top-30"]
    assert 0 < info["steps_done"] <= info["steps_planned"]
    assert info["pairs_trained"] <= info["steps_done"] * 8
    secs = info["seconds"]
    assert secs["mining"] + secs["training"] < 12 + 10  # stops after the crossing step
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    assert trained_max_length(out) == 64 and info["settings"]["loss"] == "listwise"
    scores = load_cross_encoder(out).predict([("a claim", "an abstract")])
    assert 0 < float(scores[0]) < 1


def test_test_split_is_refused(scifact, tmp_path) -> None:
    with pytest.raises(DataError, match="refusing to train"):
        train_reranker(scifact, tmp_path / "ce", tmp_path / "no-index", split="test")
    assert not (tmp_path / "ce").exists()


def test_negatives_exclude_relevant_docs(cranfield, cranfield_index) -> None:
    queries, qrels = cranfield.split("test")
    queries = queries[:5]
    pools = mine_negatives(cranfield_index, queries, qrels, depth=20)
    for q in queries:
        assert set(pools[q.id]) == {"bm25", "dense"}
        relevant = {d for d, rel in qrels[q.id].items() if rel > 0}
        for ids in pools[q.id].values():
            assert ids and not set(ids) & relevant
    examples = sample_epoch(queries, qrels, pools, 4, random.Random(0), cranfield_index.row_of)
    negs = [e for e in examples if e[2] == 0.0]
    assert len(negs) == 20
    assert len({(q, d) for q, d, _ in negs}) == 20


def test_cli_help_and_refusal(data_dir, tmp_path) -> None:
    from typer.testing import CliRunner

    from intentrank.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["train-reranker", "--help"])
    assert res.exit_code == 0
    for opt in ("--out", "--index", "--budget-minutes", "--epochs", "--negatives",
                "--max-length", "--batch-size", "--seed", "--onnx"):
        assert opt in res.output
    res = runner.invoke(app, ["train-reranker", str(data_dir / "scifact"), "--split", "test",
                              "--out", str(tmp_path / "ce"), "--index", str(tmp_path / "idx")])
    assert res.exit_code == 2 and "refusing to train" in res.output


def test_listwise_batches_group_a_positive_with_its_negatives() -> None:
    from intentrank.training.reranker import make_batches

    examples = [("q1", "p1", 1.0), ("q1", "n1", 0.0), ("q1", "n2", 0.0), ("q2", "p2", 1.0),
                ("q2", "p3", 1.0), ("q2", "n3", 0.0), ("q3", "p4", 1.0)]  # q3: no negatives
    steps = make_batches(examples, "listwise", batch_size=6, rng=random.Random(0))
    groups = [g for s in steps for g in s]
    assert all(len(s) == 2 for s in steps[:-1])  # 6 // 3 pairs per group
    assert sorted(tuple(g) for g in groups) == [
        (("q1", "p1", 1.0), ("q1", "n1", 0.0), ("q1", "n2", 0.0)),
        (("q2", "p2", 1.0), ("q2", "n3", 0.0)), (("q2", "p3", 1.0), ("q2", "n3", 0.0))]
    bce = make_batches(examples, "bce", batch_size=4, rng=random.Random(0))
    assert [len(s) for s in bce] == [4, 3] and all(len(g) == 1 for s in bce for g in s)
