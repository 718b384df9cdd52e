"""The softmax NaN guards dropped before onnxruntime loads a model
(intentrank.models.onnx_graph): only guards of a softmax go, and the shipped models score
real text bit for bit as the files as they are do."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from conftest import DATA
from onnx import TensorProto, helper

from intentrank.models.onnx_graph import drop_softmax_nan_guards


def _ops(model: bytes) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load_from_string(model).graph.node)


def _guarded(source_op: str) -> bytes:
    """x -> source_op -> Where(IsNaN(p), 0, p) -> Identity -> y."""
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    nodes = [helper.make_node(source_op, ["x"], ["p"], **({"axis": -1}
                                                         if source_op == "Softmax" else {})),
             helper.make_node("IsNaN", ["p"], ["nan"]),
             helper.make_node("Where", ["nan", "zero", "p"], ["guarded"]),
             helper.make_node("Identity", ["guarded"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 3])], [zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


def test_only_a_softmax_guard_is_dropped():
    out = onnx.load_from_string(drop_softmax_nan_guards(_guarded("Softmax")))
    onnx.checker.check_model(out)
    assert [n.op_type for n in out.graph.node] == ["Softmax", "Identity"]
    assert out.graph.node[1].input[0] == "p" and not out.graph.initializer
    other = _guarded("Relu")  # a NaN there may be real: the guard stays
    assert drop_softmax_nan_guards(other) == other
    plain = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])).SerializeToString()
    assert drop_softmax_nan_guards(plain) is plain


@pytest.mark.parametrize("which", ["reranker", "embedder"])
def test_the_shipped_models_score_real_text_as_the_files_do(which):
    import onnxruntime as ort

    from intentrank.data.dataset import load_dataset
    from intentrank.models.cross_encoder import bundled_reranker_dir
    from intentrank.models.inputs import minilm_path
    from intentrank.models.onnx_embedder import (
        load_tokenizer,
        minilm_int8_onnx_path,
        pad_encodings,
    )

    if which == "reranker":
        path, tokenizer = bundled_reranker_dir() / "model_int8.onnx", bundled_reranker_dir()
    else:
        path, tokenizer = minilm_int8_onnx_path(), minilm_path()
    raw = path.read_bytes()
    new = drop_softmax_nan_guards(raw)
    assert _ops(raw)["IsNaN"] > 0 and _ops(new)["IsNaN"] == 0
    ds = load_dataset(DATA / "scifact")
    docs = [d for _, d in zip(range(12), ds.corpus(), strict=False)]
    tok = load_tokenizer(tokenizer, 128)
    queries = [q.text for q in ds.split("test")[0][:2]]
    encodings = [tok.encode(q, d.text) for q in queries for d in docs] \
        if which == "reranker" else [tok.encode(d.text) for d in docs]
    runs = []
    for model in (raw, new):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        runs.append([session.run(None, {n: f[n] for n in names})[0] for f in
                     (pad_encodings([e]) for e in encodings)])
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)
