"""Training a cross-encoder on real SciFact train queries for a few seconds; test is refused."""

from __future__ import annotations

import json
import random

import pytest

from intentrank.errors import ConfigError, DataError
from intentrank.training.reranker import train_reranker
from intentrank.training.run import mine_negatives, sample_epoch

pytestmark = pytest.mark.slow


def test_trains_within_budget_and_records_its_data(scifact, scifact_bm25, tmp_path) -> None:
    from intentrank.models.cross_encoder import load_cross_encoder, trained_max_length

    out = tmp_path / "ce"
    res = train_reranker(scifact, out, scifact_bm25, max_queries=12, negatives_per_query=3,
                         batch_size=8, max_length=64, time_budget_s=12, epochs=3,
                         onnx=False, progress=False)
    info = json.loads((out / "training.json").read_text())
    assert info == res.info and res.out_dir == out
    assert info["split"] == "train" and info["dataset"] == "scifact"
    text = (out / "training.json").read_text()  # path-free: the model directory ships as is
    assert str(scifact.root) not in text and str(tmp_path) not in text
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


def test_negatives_below_a_rank(cranfield, cranfield_index) -> None:
    queries, qrels = cranfield.split("test")
    queries = queries[:5]
    full = mine_negatives(cranfield_index, queries, qrels, depth=20)
    skipped = mine_negatives(cranfield_index, queries, qrels, depth=20, skip_top=10)
    texts = [q.text for q in queries]
    top10 = {leg: [set(cranfield_index.id_array[h.rows[:10]].tolist()) for h in hits]
             for leg, hits in (("bm25", cranfield_index.search_bm25(texts, 10)),
                               ("dense", cranfield_index.search_dense(texts, 10)))}
    for j, q in enumerate(queries):
        for leg, ids in skipped[q.id].items():
            assert ids and not set(ids) & top10[leg][j]  # nothing from the top 10
            assert ids == [d for d in full[q.id][leg] if d not in top10[leg][j]]
    for bad in (-1, 20):
        with pytest.raises(ConfigError, match="skip_top"):
            mine_negatives(cranfield_index, queries, qrels, depth=20, skip_top=bad)


def test_cli_help_and_refusal(data_dir, tmp_path) -> None:
    from typer.testing import CliRunner

    from intentrank.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["train-reranker", "--help"])
    assert res.exit_code == 0
    for opt in ("--out", "--index", "--budget-minutes", "--epochs", "--negatives",
                "--max-length", "--batch-size", "--seed", "--onnx", "--skip-top"):
        assert opt in res.output
    res = runner.invoke(app, ["train-reranker", str(data_dir / "scifact"), "--split", "test",
                              "--out", str(tmp_path / "ce"), "--index", str(tmp_path / "idx")])
    assert res.exit_code == 2 and "refusing to train" in res.output
    for command in (["train-reranker", str(data_dir / "cranfield"), "--out", str(tmp_path / "ce")],
                    ["train-embedder", str(data_dir / "cranfield"), str(tmp_path / "emb")]):
        res = runner.invoke(app, [*command, "--index", str(tmp_path / "idx"), "--skip-top", "30"])
        assert res.exit_code == 2 and "--skip-top must be >= 0 and below" in res.output
        assert not (tmp_path / "idx").exists() and not (tmp_path / "ce").exists()


def test_a_tiny_budget_stops_after_the_first_step_and_says_so(scifact, scifact_bm25, tmp_path,
                                                             capfd) -> None:
    """The budget callback stops CrossEncoderTrainer; bce trains on single pairs; no output
    without progress (no bars, no load report)."""
    out = tmp_path / "ce"
    capfd.readouterr()
    info = train_reranker(scifact, out, scifact_bm25, loss="bce", max_queries=6,
                          negatives_per_query=2, batch_size=4, max_length=32, epochs=2,
                          time_budget_s=1e-3, onnx=False, progress=False).info
    assert json.loads((out / "training.json").read_text())["stopped_by"] == "time budget"
    assert info["steps_done"] == 1 < info["steps_planned"]
    assert info["steps_planned"] == -(-2 * info["pairs_per_epoch"] // 4)
    assert info["pairs_trained"] == 4 and info["settings"]["loss_class"] == "BinaryCrossEntropyLoss"
    assert info["loss_first50"] == info["loss_last50"] > 0
    assert capfd.readouterr() == ("", "")


def test_learning_rate_warms_up_then_decays_by_steps_or_clock() -> None:
    import time

    from intentrank.training.budget import TimeBudget, lr_factor

    assert lr_factor(0.0, 0.1) == 0.01 and lr_factor(0.05, 0.1) == 0.5
    assert lr_factor(0.1, 0.1) == 1.0 and lr_factor(0.55, 0.1) == pytest.approx(0.5)
    assert lr_factor(1.0, 0.1) == 0.0
    by_steps = TimeBudget(time.perf_counter(), float("inf"), 0.1)
    assert by_steps.progress(3, 12) == 0.25
    by_clock = TimeBudget(time.perf_counter() - 30, 60.0, 0.1)
    assert 0.5 <= by_clock.progress(1, 100) < 0.6


def test_training_rows_group_a_positive_with_its_negatives() -> None:
    from intentrank.training.reranker import training_rows

    examples = [("q1", "p1", 1.0), ("q1", "n1", 0.0), ("q1", "n2", 0.0), ("q2", "p2", 1.0),
                ("q2", "p3", 1.0), ("q2", "n3", 0.0), ("q3", "p4", 1.0)]  # q3: no negatives
    text = {"q1": "Q1", "q2": "Q2", "q3": "Q3"}
    rows = training_rows(examples, "listwise", text, str.upper)
    assert rows["query"] == ["Q1", "Q2", "Q2"]
    assert rows["docs"] == [["P1", "N1", "N2"], ["P2", "N3"], ["P3", "N3"]]
    inf = float("inf")
    assert rows["labels"] == [[0.0, -inf, -inf], [0.0, -inf], [0.0, -inf]]  # one-hot softmax
    bce = training_rows(examples, "bce", text, str.upper)
    assert bce == {"query": ["Q1"] * 3 + ["Q2"] * 3 + ["Q3"], "doc": [d.upper() for _, d, _ in
                   examples], "label": [y for _, _, y in examples]}


def test_the_library_and_the_cli_default_to_the_same_onnx_export() -> None:
    import inspect

    import typer

    from intentrank.cli import app

    command = typer.main.get_command(app).commands["train-reranker"]  # type: ignore[attr-defined]
    cli_default = next(p.default for p in command.params if p.name == "onnx")
    assert inspect.signature(train_reranker).parameters["onnx"].default is cli_default is True
