"""The cross-encoder stage on a real Cranfield index, with a tiny random BERT built locally."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tolerances import F32_ABS, F32_REL

from intentrank.core.registry import BuildContext
from intentrank.errors import ModelError
from intentrank.models.cross_encoder import default_reranker_dir, load_cross_encoder
from intentrank.pipelines import build_pipeline
from intentrank.rerank.cross_encoder import CrossEncoderReranker
from intentrank.retrieve.retrievers import BM25Retriever
from intentrank.types import Trace


def make_tiny_cross_encoder(path: Path) -> Path:
    """A randomly initialised 2-layer BERT with one output, and the MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from intentrank.models.inputs import minilm_path

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(minilm_path())
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, num_labels=1,
                        max_position_embeddings=512, initializer_range=0.2)
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny")


class LengthScorer:
    """Deterministic stand-in: longer passages score higher."""

    name = "length"

    def predict(self, pairs, batch_size=32):  # noqa: ANN001, ANN201
        return np.array([len(p) for _, p in pairs], dtype=np.float32)


def test_reranks_top_k_and_keeps_the_rest(cranfield, cranfield_index) -> None:
    queries, _ = cranfield.split("test")
    trace = Trace()
    bm25 = BM25Retriever(cranfield_index, depth=20).run(queries[:3], trace).rankings
    stage = CrossEncoderReranker(cranfield_index, LengthScorer(), top_k=5)
    out = stage(bm25, trace)
    assert trace.stages["cross_encoder"].counters["pairs"] == 15
    for before, after in zip(bm25, out, strict=True):
        head = after.docs[:5]
        lengths = [len(cranfield_index.doc_text(d.doc_id)) for d in head]
        assert lengths == sorted(lengths, reverse=True)
        assert {d.doc_id for d in head} == set(before.doc_ids[:5])
        assert after.doc_ids[5:] == before.doc_ids[5:]  # below k: order kept
        scores = [d.score for d in after.docs]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
        assert all("bm25" in d.stage_scores for d in after.docs)
        assert all("cross_encoder" in d.stage_scores for d in head)
        assert not any("cross_encoder" in d.stage_scores for d in after.docs[5:])


def test_torch_and_onnx_backends_on_a_tiny_model(cranfield, cranfield_index, tiny_model) -> None:
    from intentrank.training.reranker import export_onnx_int8

    queries, _ = cranfield.split("test")
    bm25 = BM25Retriever(cranfield_index, depth=10).run(queries[:2]).rankings
    torch_stage = CrossEncoderReranker(cranfield_index, str(tiny_model), top_k=10, max_length=64)
    ranked = torch_stage(bm25)
    pairs = [(r.query.text, cranfield_index.doc_text(d)) for r in bm25 for d in r.doc_ids]
    direct = torch_stage.scorer.predict(pairs)
    assert ((direct > 0) & (direct < 1)).all()  # sigmoid scores
    for r, chunk in zip(ranked, np.split(direct, 2), strict=True):
        assert [d.score for d in r.docs] == pytest.approx(sorted(chunk.tolist(), reverse=True),
                                                        rel=F32_REL, abs=F32_ABS)

    export_onnx_int8(tiny_model)
    onnx_scores = load_cross_encoder(tiny_model, "onnx", max_length=64).predict(pairs, 4)
    assert np.abs(onnx_scores - direct).max() < 0.02
    assert np.corrcoef(onnx_scores, direct)[0, 1] > 0.95


def test_config_stage_shares_one_model(cranfield_index, tiny_model) -> None:
    ctx = BuildContext(cranfield_index)
    node = [{"bm25": {"depth": 8}}, {"cross_encoder": {"model": str(tiny_model), "top_k": 4,
                                                   "max_length": 64}}]
    first, second = build_pipeline(node, ctx), build_pipeline(node, ctx)
    assert first.stages[1].scorer is second.stages[1].scorer
    top = first.search("boundary layer heat transfer", k=8)
    assert len(top.docs) == 8 and "cross_encoder" in top.docs[0].stage_scores


def test_missing_models_name_the_fix(tmp_path, cranfield_index) -> None:
    with pytest.raises(ModelError, match="train-reranker"):
        load_cross_encoder(tmp_path / "nope")
    with pytest.raises(ModelError, match="train-reranker"):
        CrossEncoderReranker(cranfield_index, str(tmp_path / "nope"), backend="onnx")
    with pytest.raises(ModelError, match="no ONNX model"):
        load_cross_encoder(tmp_path, "onnx")
    with pytest.raises(ModelError, match="unknown cross-encoder backend"):
        load_cross_encoder(tmp_path, "tensorrt")
    assert default_reranker_dir("cranfield").name == "cross-encoder-cranfield"


def test_bundled_reranker_is_the_default_and_reranks_real_queries(data_dir) -> None:
    """The cross-encoder shipped in the package loads with no training and no download, and
    reranks BM25's top 20 on SciFact test claims far better than chance and close to BM25 (it
    was trained on SciFact's train split only; on all 300 test claims BM25 -> CE is a few
    points below BM25 and RRF(BM25, CE) above both: docs/benchmarks.md)."""
    import json

    from intentrank.data.dataset import load_dataset
    from intentrank.measures.metrics import evaluate
    from intentrank.models.cross_encoder import OnnxCrossEncoder, bundled_reranker_dir

    scorer = load_cross_encoder()
    assert isinstance(scorer, OnnxCrossEncoder)
    assert scorer.onnx_path.parent == bundled_reranker_dir()
    assert scorer.max_length == 128
    info = json.loads((bundled_reranker_dir() / "training.json").read_text())
    assert info["split"] == "train" and info["dataset"] == "scifact"
    assert isinstance(load_cross_encoder("bundled"), OnnxCrossEncoder)
    with pytest.raises(ModelError, match="int8 ONNX only"):
        load_cross_encoder(backend="torch")

    ds = load_dataset(data_dir / "scifact")
    queries, qrels = ds.sample("test", 20, seed=1)
    docs = {d.id: d.full_text() for d in ds.corpus()}
    import bm25s

    ids = list(docs)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([docs[i] for i in ids], stopwords="en", show_progress=False),
                    show_progress=False)
    hits, _ = retriever.retrieve(bm25s.tokenize([q.text for q in queries], stopwords="en",
                                                show_progress=False), k=20, show_progress=False)
    bm25_run, ce_run, reversed_run = {}, {}, {}
    for q, rows in zip(queries, hits, strict=True):
        top = [ids[r] for r in rows]
        bm25_run[q.id] = {d: 20.0 - i for i, d in enumerate(top)}
        reversed_run[q.id] = {d: float(i) for i, d in enumerate(top)}  # a bad ranker
        scores = scorer.predict([(q.text, docs[d]) for d in top])
        ce_run[q.id] = dict(zip(top, map(float, scores), strict=True))
    bm25 = evaluate(bm25_run, qrels, ["nDCG@10"]).aggregate["nDCG@10"]
    ce = evaluate(ce_run, qrels, ["nDCG@10"]).aggregate["nDCG@10"]
    worst = evaluate(reversed_run, qrels, ["nDCG@10"]).aggregate["nDCG@10"]
    assert ce >= bm25 - 0.1 and ce > worst + 0.3, (ce, bm25, worst)


def test_bundled_scores_do_not_depend_on_the_batch(cranfield) -> None:
    """The bundled model is dynamically quantised (activations scaled by the batch's range):
    it scores one pair at a time, so a pair's score is the same alone, in any batch and in
    any order (batched, scores differed by up to 0.14 on Cranfield)."""
    from intentrank.models.onnx_embedder import batch_dependent

    scorer = load_cross_encoder()
    assert scorer.per_pair and batch_dependent(scorer.onnx_path.read_bytes())
    query = next(iter(cranfield.queries.values())).text
    docs = [d.full_text() for d in list(cranfield.corpus())[:12]]
    pairs = [(query, d) for d in docs]
    together = scorer.predict(pairs, batch_size=12)
    alone = np.array([scorer.predict([p])[0] for p in pairs])
    shuffled = scorer.predict(pairs[::-1], batch_size=5)[::-1]
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(together, shuffled)


def test_bundled_fp32_precision_is_its_int8_weights_in_fp32(cranfield, tmp_path) -> None:
    """precision fp32 turns the bundled file's int8 weight products back into fp32 MatMul
    over the dequantised weights: the same scores as those weights in torch (the fp32 copy
    the peers of bench/bench_peers.py run) within float32 noise, one pair per run, so a
    pair's score does not depend on its batch; int8 activations change the scores (issue
    51)."""
    from bench_helpers import load_bench
    from sentence_transformers import CrossEncoder

    from intentrank.models.cross_encoder import OnnxCrossEncoder
    from intentrank.models.onnx_embedder import batch_dependent
    from intentrank.models.onnx_precision import dequantize, int8_products

    fp32 = load_cross_encoder(precision="fp32")
    assert isinstance(fp32, OnnxCrossEncoder) and fp32.precision == "fp32"
    assert fp32.per_pair
    shipped = fp32.onnx_path.read_bytes()
    assert len(int8_products(shipped)) == 38 and not int8_products(dequantize(shipped))
    assert not batch_dependent(dequantize(shipped))
    query = next(iter(cranfield.queries.values())).text
    pairs = [(query, d.full_text()) for d in list(cranfield.corpus())[:12]]
    together = fp32.predict(pairs, batch_size=12)
    alone = np.array([fp32.predict([p])[0] for p in pairs])
    np.testing.assert_array_equal(together, alone)
    peers = load_bench("peers_systems")
    torch_model = CrossEncoder(str(peers.fp32_reranker(tmp_path)), max_length=128, device="cpu")
    reference = torch_model.predict(pairs, batch_size=12, show_progress_bar=False)
    np.testing.assert_allclose(together, reference, atol=1e-4)
    int8 = load_cross_encoder().predict(pairs)
    assert np.abs(int8 - together).max() > 1e-3
    stage = build_pipeline({"cross_encoder": {"top_k": 5, "precision": "fp32"}},
                           BuildContext(index=object()))  # type: ignore[arg-type]
    assert "precision=fp32" in stage.describe()
    with pytest.raises(ModelError, match="precision"):
        load_cross_encoder(precision="fp16")
