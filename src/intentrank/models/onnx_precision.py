"""Run a dynamically quantised ONNX model (the bundled int8 cross-encoder) with fp32
activations in some or all of its weight matrix products, without another model file.

``quantize_dynamic`` writes each weight product as ``DynamicQuantizeLinear(x)`` (the
activation rounded to uint8 with a scale taken from the run's own range) ->
``MatMulInteger(x_q, W_q)`` -> ``Cast`` -> ``Mul(scale_x * scale_W)``. :func:`dequantize`
replaces such a chain by ``MatMul(x, (W_q - zero_W) * scale_W)``: the same int8 weights,
dequantised (what the fp32 peers of bench/bench_peers.py load), with the activation in fp32.
A model with no ``DynamicQuantizeLinear`` left scores each pair independently of its batch,
so it can run batched (:func:`~intentrank.models.onnx_embedder.batch_dependent`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from intentrank.errors import ModelError

KeepInt8 = Callable[[str], bool]
"""Given a MatMulInteger node's name, whether it stays int8."""


def dequantize(model: bytes, keep_int8: KeepInt8 | None = None) -> bytes:
    """``model`` (serialised ONNX) with every dynamically quantised weight product for which
    ``keep_int8(node name)`` is false (default: all) turned back into an fp32 ``MatMul``."""
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load_from_string(model)
    graph = proto.graph
    init = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    drop: set[str] = set()
    instead: dict[str, object] = {}  # the scale Mul -> the MatMul in its place (graph order)
    new_inits, replaced = [], 0
    for node in graph.node:
        if node.op_type != "MatMulInteger" or (keep_int8 is not None and keep_int8(node.name)):
            continue
        quant = producer.get(node.input[0])
        chain = _output_chain(node, consumers)
        if quant is None or quant.op_type != "DynamicQuantizeLinear" or chain is None \
                or node.input[1] not in init:
            raise ModelError(f"cannot dequantise {node.name}: not a dynamic quantisation "
                             f"chain (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul)")
        cast, mul = chain
        stem = node.input[1].removesuffix("_quantized")
        w = numpy_helper.to_array(init[node.input[1]]).astype(np.float32)
        zero = numpy_helper.to_array(init[node.input[3]]).astype(np.float32) \
            if len(node.input) > 3 and node.input[3] in init else np.float32(0)
        scale = numpy_helper.to_array(init[f"{stem}_scale"]).astype(np.float32)
        name = f"{stem}_fp32"
        new_inits.append(numpy_helper.from_array((w - zero) * scale, name))
        instead[mul.name] = helper.make_node("MatMul", [quant.input[0], name], [mul.output[0]],
                                            name=f"{node.name}_fp32")
        scales = producer.get(mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0])
        drop.update(n.name for n in (node, cast, mul))
        if scales is not None and scales.op_type == "Mul":
            drop.add(scales.name)
        replaced += 1
    if not replaced:
        return model
    kept = [instead.get(n.name, n) for n in graph.node if n.name not in drop or n.name in instead]
    used = {i for n in kept for i in n.input}
    kept = [n for n in kept if n.op_type != "DynamicQuantizeLinear"
            or any(o in used for o in n.output)]
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_inits)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    live = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(live)
    return proto.SerializeToString()


def _output_chain(node: object, consumers: dict[str, list]) -> tuple[object, object] | None:
    """The ``Cast`` and the scale ``Mul`` that follow a MatMulInteger, or None."""
    after = consumers.get(node.output[0], [])  # type: ignore[attr-defined]
    if len(after) != 1 or after[0].op_type != "Cast":
        return None
    then = consumers.get(after[0].output[0], [])
    if len(then) != 1 or then[0].op_type != "Mul":
        return None
    return after[0], then[0]


def int8_products(model: bytes) -> list[str]:
    """The names of the model's dynamically quantised weight products, in graph order."""
    import onnx

    return [n.name for n in onnx.load_from_string(model).graph.node
            if n.op_type == "MatMulInteger"]
