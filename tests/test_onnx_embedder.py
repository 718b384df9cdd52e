"""The onnxruntime int8 MiniLM embedder against sentence-transformers on real passages."""

from __future__ import annotations

import numpy as np
import pytest

from intentrank.errors import ModelError
from intentrank.models.embedder import load_embedder
from intentrank.models.onnx_embedder import OnnxEmbedder, minilm_int8_onnx_path


@pytest.fixture(scope="module")
def onnx_embedder() -> OnnxEmbedder:
    emb = load_embedder("minilm", "onnx")
    assert isinstance(emb, OnnxEmbedder)
    return emb


@pytest.fixture(scope="module")
def passages(cranfield) -> list[str]:
    return [d.full_text() for _, d in zip(range(50), cranfield.corpus(), strict=False)]


def test_parity_with_sentence_transformers(onnx_embedder, passages) -> None:
    st = load_embedder("minilm", precision="fp32")  # torch, the reference
    a = onnx_embedder.encode_passages(passages, batch_size=16)
    b = st.encode_passages(passages, batch_size=16)
    cos = (a * b).sum(axis=1)
    assert cos.min() >= 0.999, f"min cosine {cos.min():.5f}"
    q = ["what similarity laws must be obeyed when constructing aeroelastic models"]
    assert (onnx_embedder.encode_queries(q) @ st.encode_queries(q).T).item() >= 0.999


def test_shape_norm_and_order(onnx_embedder, passages) -> None:
    vecs = onnx_embedder.encode_passages(passages[:20], batch_size=7, progress=True)
    assert vecs.shape == (20, onnx_embedder.dim) == (20, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    one_by_one = np.vstack([onnx_embedder.encode_passages([p]) for p in passages[:20:4]])
    assert ((vecs[::4] * one_by_one).sum(axis=1) > 0.999).all()  # order restored
    assert onnx_embedder.encode_passages([]).shape == (0, 384)


def test_prefixes_and_truncation(onnx_embedder) -> None:
    prefixed = OnnxEmbedder(query_prefix="query: ", passage_prefix="passage: ", max_length=16)
    text = "shock wave boundary layer interaction " * 10
    q = prefixed.encode_queries([text])
    p = prefixed.encode_passages([text])
    assert (q @ p.T).item() < 0.9999  # the prefixes make the two differ
    short = OnnxEmbedder(max_length=16)
    assert np.allclose(q, short.encode_passages(["query: " + text]), atol=1e-5)
    assert not np.allclose(short.encode_passages([text]), onnx_embedder.encode_passages([text]),
                           atol=1e-3)  # max_length truncates


def test_model_file_and_errors(tmp_path) -> None:
    assert minilm_int8_onnx_path().suffix == ".onnx"
    with pytest.raises(ModelError, match="cannot load ONNX model"):
        bad = tmp_path / "bad.onnx"
        bad.write_bytes(b"not a model")
        OnnxEmbedder(onnx_path=bad)
    with pytest.raises(ModelError, match="tokenizer file not found"):
        OnnxEmbedder(tokenizer_path=tmp_path)
    with pytest.raises(ModelError, match="unknown embedder backend"):
        load_embedder("minilm", "tensorrt")


def test_clipping_long_texts_does_not_change_embeddings(onnx_embedder, data_dir) -> None:
    """Texts are cut before tokenising (memory bounded by max_length, not the text); the
    vectors of real SciFact abstracts, the longest ones included, stay bit-identical."""
    from intentrank.data.dataset import load_dataset
    from intentrank.models.onnx_embedder import length_batches

    texts = sorted((d.full_text() for d in load_dataset(data_dir / "scifact").corpus()), key=len)
    picked = texts[-16:] + texts[len(texts) // 2:len(texts) // 2 + 8]
    encodings = onnx_embedder.tokenizer.encode_batch(picked)  # the whole texts, as before
    raw = np.zeros((len(picked), onnx_embedder.dim), dtype=np.float32)
    for idx in length_batches([len(e.ids) for e in encodings], 8):
        raw[idx] = onnx_embedder._run([encodings[i] for i in idx])
    assert np.array_equal(onnx_embedder.encode_passages(picked), raw)


def test_a_model_with_external_data_loads_from_its_bytes(tmp_path) -> None:
    """The file is read once (session and batch check share the bytes); weights kept in an
    external data file next to it are still found."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from intentrank.models.onnx_embedder import ort_session

    w = np.arange(64 * 8, dtype=np.float32).reshape(64, 8) / 100
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True,
                    location="m.onnx.data", size_threshold=0)
    session, per_text = ort_session(tmp_path / "m.onnx", threads=1)
    x = np.ones((1, 64), dtype=np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ w, rtol=1e-5)
    assert not per_text
    with pytest.raises(ModelError, match="cannot load ONNX model .*missing.onnx"):
        ort_session(tmp_path / "missing.onnx")


def test_item_runner_keeps_order_and_runs_each_item_alone() -> None:
    """Items run on several threads come back in input order, each from a run of its own."""
    from types import SimpleNamespace

    from intentrank.models.onnx_embedder import ItemRunner

    class Session:
        batch_sizes: list[int] = []

        def run(self, _outputs, feeds):
            self.batch_sizes.append(len(feeds["input_ids"]))
            return [feeds["input_ids"].astype(np.float32) * 2]

    encodings = [SimpleNamespace(ids=[i, i + 1], attention_mask=[1, 1], type_ids=[0, 0])
                 for i in range(40)]
    session = Session()
    out = ItemRunner(session, ["input_ids"], workers=3).map(encodings)
    assert [o.tolist() for o in out] == [[2.0 * i, 2.0 * i + 2] for i in range(40)]
    assert session.batch_sizes == [1] * 40
