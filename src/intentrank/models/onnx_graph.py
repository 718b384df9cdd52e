"""Simplify an ONNX transformer graph before onnxruntime loads it, without changing what it
computes on tokenised text.

Exports of BERT attention through torch's scaled-dot-product attention guard each softmax
with ``Where(IsNaN(p), 0, p)``: a softmax row is NaN only when every key of the row is
masked out. A tokenised text always has unmasked keys ([CLS] and [SEP]; padding masks keys,
never a whole row), so the guard is the identity on every input these models get, and it
costs a full pass over the attention probabilities per layer. Without it the bundled
cross-encoder scores 1.16x the pairs/s at int8 and 1.09x at fp32, and the packaged int8
MiniLM encodes 1.31x the passages/s, all bit for bit the same (docs/benchmarks.md,
"onnx-graph").
"""

from __future__ import annotations


def drop_softmax_nan_guards(model: bytes) -> bytes:
    """``model`` (serialised ONNX) with every ``Where(IsNaN(p), c, p)`` whose ``p`` is a
    ``Softmax`` output replaced by ``p``; the model unchanged if it has none."""
    if b"IsNaN" not in model:  # cheap: most models have none, and parsing costs time
        return model
    import onnx

    proto = onnx.load_from_string(model)
    graph = proto.graph
    producer = {o: n for n in graph.node for o in n.output}
    uses: dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    instead: dict[str, str] = {}
    drop: set[int] = set()
    zeros: set[str] = set()  # the guards' fill values, dropped too if nothing else uses them
    for n in graph.node:
        if n.op_type != "Where" or len(n.input) != 3:
            continue
        cond = producer.get(n.input[0])
        p = n.input[2]
        source = producer.get(p)
        if cond is None or cond.op_type != "IsNaN" or cond.input[0] != p \
                or source is None or source.op_type != "Softmax" \
                or uses.get(cond.output[0]) != 1:
            continue
        if any(o.name == n.output[0] for o in graph.output):
            continue
        instead[n.output[0]] = p
        zeros.add(n.input[1])
        drop.update((id(n), id(cond)))
    if not instead:
        return model
    kept = [n for n in graph.node if id(n) not in drop]
    for n in kept:
        for i, name in enumerate(n.input):
            if name in instead:
                n.input[i] = instead[name]
    unused = zeros - {i for n in kept for i in n.input} - {o.name for o in graph.output}
    kept = [n for n in kept if n.op_type != "Constant" or n.output[0] not in unused]
    live = [i for i in graph.initializer if i.name not in unused]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(live)
    return proto.SerializeToString()
