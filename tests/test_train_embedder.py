"""Fine-tuning the dense encoder on a few real SciFact train claims; test is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from intentrank.data.dataset import Dataset
from intentrank.errors import ConfigError, DataError
from intentrank.index import IndexSettings, build_index
from intentrank.training.embedder import train_embedder

pytestmark = pytest.mark.slow


def test_refuses_the_test_split_before_loading_anything(tmp_path) -> None:
    with pytest.raises(DataError, match="refusing to train an embedder on the test split"):
        train_embedder(tmp_path / "no-such-dataset", tmp_path / "m", split="test")
    with pytest.raises(DataError, match="test split"):
        train_embedder(tmp_path / "no-such-dataset", tmp_path / "m",
                       extra=[(tmp_path / "gen", "TEST")])
    assert not (tmp_path / "m").exists()


def test_bad_settings_are_named(tmp_path) -> None:
    with pytest.raises(ConfigError, match="batch_size=1"):
        train_embedder(tmp_path, tmp_path / "m", batch_size=1)


def test_empty_training_set_is_a_clear_error(scifact, scifact_bm25, tmp_path) -> None:
    empty = Dataset(root=tmp_path, queries=scifact.queries,
                    qrels={"train": {}}, corpus_path=scifact.corpus_path)
    with pytest.raises(DataError, match="train"):
        train_embedder(empty, tmp_path / "m", scifact_bm25, progress=False)
    assert not (tmp_path / "m").exists()


def test_gold_documents_outside_the_index_give_no_pairs(scifact, scifact_bm25, tmp_path
                                                        ) -> None:
    q = next(iter(scifact.qrels["train"]))
    other = Dataset(root=tmp_path, queries=scifact.queries,
                    qrels={"train": {q: {"not-a-scifact-doc": 1}}},
                    corpus_path=scifact.corpus_path)
    with pytest.raises(DataError, match="no training pairs"):
        train_embedder(other, tmp_path / "m", scifact_bm25, progress=False)


def test_a_few_steps_write_a_loadable_model_that_moved(scifact, scifact_bm25, tmp_path
                                                       ) -> None:
    from sentence_transformers import SentenceTransformer

    from intentrank.models.inputs import minilm_path

    out = tmp_path / "emb"
    res = train_embedder(scifact, out, scifact_bm25, max_queries=12, batch_size=6,
                         max_seq_length=48, epochs=1, lr=1e-4, time_budget_s=40,
                         progress=False)
    info = json.loads((out / "training.json").read_text())
    assert res.out_dir == out and info["steps_done"] == res.info["steps_done"] >= 2
    assert info["sources"][0]["split"] == "train" and info["sources"][0]["queries"] == 12
    text = (out / "training.json").read_text()  # path-free: the model directory ships as is
    assert str(scifact.root) not in text and str(scifact_bm25.path) not in text
    assert info["index"] == scifact_bm25.path.name
    assert info["rows_per_epoch"] >= 12 and info["negatives"]["sources"] == ["bm25 top-30"]
    assert info["settings"]["loss"] == "MultipleNegativesRankingLoss"
    texts = [q.text for q in list(scifact.queries.values())[:4]]
    tuned = SentenceTransformer(str(out), device="cpu").encode(texts, normalize_embeddings=True)
    base = SentenceTransformer(minilm_path(), device="cpu").encode(texts,
                                                                   normalize_embeddings=True)
    assert tuned.shape == base.shape == (4, 384)
    assert np.allclose(np.linalg.norm(tuned, axis=1), 1.0, rtol=1e-5)
    assert float(np.abs(tuned - base).max()) > 1e-3  # the weights moved
    assert float(np.min(np.sum(tuned * base, axis=1))) > 0.5  # ... without collapsing


def test_an_index_encodes_with_the_model_directory(scifact, scifact_bm25, tmp_path) -> None:
    """``dense.model`` takes the directory: a small dense index built with it finds a
    document by its own text and records the directory in its settings."""
    from itertools import islice

    from intentrank.index import Index
    from intentrank.index.settings import DenseSettings

    out = tmp_path / "emb"
    train_embedder(scifact, out, scifact_bm25, max_queries=8, batch_size=4,
                   max_seq_length=32, time_budget_s=20, progress=False)
    docs = list(islice(scifact.corpus(), 20))
    build_index(docs, tmp_path / "idx", IndexSettings(legs=("dense",),
                                                      dense=DenseSettings(model=str(out))),
                embedding_cache=False)
    idx = Index(tmp_path / "idx")
    assert idx.settings.dense.model == str(out)
    hits = idx.search_dense([docs[3].title], 1)[0]
    assert idx.ids[int(hits.rows[0])] == docs[3].id


def test_cli_trains_on_real_claims_and_refuses_bad_options(data_dir, scifact_bm25, tmp_path
                                                           ) -> None:
    """`intentrank train-embedder` end to end on 8 real SciFact train claims; the test split,
    a malformed --extra and a bad number exit 2 with the option named, writing nothing."""
    from typer.testing import CliRunner

    from intentrank.cli import app

    runner = CliRunner()
    ds, out = str(data_dir / "scifact"), tmp_path / "emb"
    for args, message in ((["--split", "test"], "test split"),
                          (["--extra", "nocolon"], "give DIR:SPLIT"),
                          (["--batch-size", "1"], "--batch-size")):
        bad = runner.invoke(app, ["train-embedder", ds, str(out), "--index",
                                  str(scifact_bm25.path), *args])
        assert bad.exit_code == 2 and message in bad.output, bad.output
        assert not out.exists()
    res = runner.invoke(app, ["train-embedder", ds, str(out), "--index", str(scifact_bm25.path),
                              "--max-queries", "8", "--batch-size", "4",
                              "--budget-minutes", "2"])
    assert res.exit_code == 0, res.output
    assert "embedder saved" in res.output and "--model" in res.output
    info = json.loads((out / "training.json").read_text())
    assert info["n_queries"] == 8 and info["steps_done"] >= 1
