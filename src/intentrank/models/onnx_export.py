"""The embedder's own weights exported to ONNX: an fp32 export and its int8 copy.

fp32: one query in one single-threaded onnxruntime session, without torch's per-operator
overhead, its vector equal to torch's within float32 noise (checked at export, see
:data:`MAX_DIFF`). Queries of ``precision="fp32"`` embedders run here.

int8 (the default precision, for passages and queries): the export's weight matrix products
quantised to int8 (:func:`quantize_int8`), one text per single-threaded run, as many runs at
once as there are cores, so a text's vector never depends on the batch (checked against
torch's, see :data:`MIN_INT8_COSINE`). Speed and quality: docs/benchmarks.md, "speed".

The graph is exported with eager attention (plain matrix products: no masking ops that a
one-text run does not need). The export happens once per model and is kept in
``$INTENTRANK_CACHE/models/onnx/`` with the result of its checks against torch
(``check.json``), keyed by the model directory's files (name, size, time) or, for a hub name,
by the weights' digest. A later process with a local model finds it there and never loads
torch (cold start: see "latency"). Only models whose sentence-transformers pipeline is
Transformer -> mean pooling (-> Normalize) qualify; any other, or an export that fails or
disagrees with torch, keeps torch with one warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.paths import cache_dir

log = logging.getLogger(__name__)

PRECISIONS = ("int8", "fp32")
"""How a sentence-transformers embedder encodes texts: the int8 copy (default), or fp32
(passages on torch, queries on the fp32 export, equal to torch)."""
EXPORT_VERSION = 2
"""Part of every cache key: 2 = eager attention graph with an int8 passage model."""
MAX_DIFF = 1e-5
"""Largest element difference from torch on the probe texts for the fp32 export to be used
(float32 noise is about 2e-7)."""
MIN_INT8_COSINE = 0.98
"""Lowest cosine to torch on the probe texts for the int8 passage model to be used (a broken
quantisation gives < 0.9)."""
PROBES = ("dimension probe", "Does cold exposure increase brown adipose tissue recruitment?",
          " ".join(["truncated"] * 400),
          "Brown adipose tissue (BAT) dissipates energy as heat. Cold exposure recruits brown "
          "and beige adipocytes in adult humans, raising energy expenditure by up to 15%.")


QUALIFYING = (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"])
_OTHER_POOLING = ("cls_token", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens",
                  "lasttoken")


def mean_pooling(options: Mapping[str, Any]) -> bool:
    """Whether a Pooling module's options (its attributes or saved config) mean-pool."""
    mode = options.get("pooling_mode")  # sentence-transformers >= 5: a name
    if isinstance(mode, str):
        return mode == "mean"
    return bool(options.get("pooling_mode_mean_tokens")) and not any(
        options.get(f"pooling_mode_{m}") for m in _OTHER_POOLING)


def mean_pooled(st_model: Any) -> bool:
    """Whether ``st_model`` is Transformer -> mean pooling (-> Normalize): what the ONNX
    path computes."""
    kinds = [type(m).__name__ for m in st_model]
    return kinds in QUALIFYING and mean_pooling(vars(st_model[1]))


def local_key(path: str | Path, max_length: int | None) -> tuple[str, int] | None:
    """``(cache key, max tokens)`` of a local sentence-transformers directory whose
    ``modules.json`` says Transformer -> mean pooling (-> Normalize); None otherwise (a hub
    name, another pipeline, anything unreadable)."""
    root = Path(path)
    try:
        modules = json.loads((root / "modules.json").read_text())
        if [m["type"].rsplit(".", 1)[-1] for m in modules] not in QUALIFYING:
            return None
        pooling = json.loads((root / modules[1]["path"] / "config.json").read_text())
        length = max_length or json.loads(
            (root / "sentence_bert_config.json").read_text())["max_seq_length"]
        files = sorted(f for f in root.rglob("*") if f.is_file())
        stats = [(str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns)
                 for f in files]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    if not mean_pooling(pooling):
        return None
    h = hashlib.sha256(json.dumps([EXPORT_VERSION, str(root.resolve()), length, stats]).encode())
    return f"dir-{h.hexdigest()[:16]}", int(length)


def weights_digest(st_model: Any) -> str:
    """A digest of the model's parameters (what the export depends on)."""
    h = hashlib.sha256()
    h.update(str(EXPORT_VERSION).encode())
    for name, tensor in sorted(st_model[0].auto_model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def export(st_model: Any, out_dir: Path) -> Path:
    """Write ``model.onnx`` (input ids, mask, types -> last hidden state; eager attention)
    and ``tokenizer.json`` of ``st_model`` into ``out_dir`` atomically; returns ``out_dir``."""
    import torch

    if (out_dir / "model.onnx").is_file():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=".export-"))
    transformer = st_model[0].auto_model.eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    enc = st_model.tokenizer(list(PROBES[:2]), padding=True, return_tensors="pt")
    types = enc.get("token_type_ids", torch.zeros_like(enc["input_ids"]))
    axes = {"batch": 0, "tokens": 1}
    names = ["input_ids", "attention_mask", "token_type_ids"]
    attention = getattr(transformer.config, "_attn_implementation", None)
    with torch.no_grad(), warnings.catch_warnings(), _eager(transformer, attention):
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it fixes as constants
        torch.onnx.export(Hidden(), (enc["input_ids"], enc["attention_mask"], types),
                          str(tmp / "model.onnx"), input_names=names,
                          output_names=["last_hidden_state"], opset_version=17,
                          dynamic_axes={n: {v: k for k, v in axes.items()}
                                        for n in [*names, "last_hidden_state"]},
                          dynamo=False)
    st_model.tokenizer.backend_tokenizer.save(str(tmp / "tokenizer.json"))
    try:
        os.replace(tmp, out_dir)
    except OSError:  # another process exported it first
        if not (out_dir / "model.onnx").is_file():
            raise
    return out_dir


@contextmanager
def _eager(transformer: Any, attention: str | None) -> Iterator[None]:
    """``transformer`` with eager attention for the duration (restored after)."""
    if attention in (None, "eager"):
        yield
        return
    transformer.set_attn_implementation("eager")
    try:
        yield
    finally:
        transformer.set_attn_implementation(attention)


def quantize_int8(out: Path) -> Path:
    """``out/model-int8.onnx``: ``out/model.onnx`` with every weight matrix product in int8
    (weights per output channel, activations scaled per run by onnxruntime's dynamic
    quantisation; attention's activation-by-activation products stay fp32). Dynamic scales
    depend on the whole run, which is why passages are run one per run. Written atomically."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    target = out / "model-int8.onnx"
    if target.is_file():
        return target
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".int8-"))
    try:
        prepared = tmp / "prepared.onnx"  # constants folded, shapes inferred
        quant_pre_process(str(out / "model.onnx"), str(prepared), skip_symbolic_shape=True)
        model = onnx.load(str(prepared))
        weights = {init.name for init in model.graph.initializer}
        attention = [n.name for n in model.graph.node
                     if n.op_type == "MatMul" and not any(i in weights for i in n.input)]
        quantize_dynamic(prepared, tmp / "model-int8.onnx", per_channel=True,
                         op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                         nodes_to_exclude=attention,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        os.replace(tmp / "model-int8.onnx", target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


class OnnxEncoders:
    """The ONNX encoders of one sentence-transformers embedder, each made on first use:
    ``"fp32"`` (the export) and ``"int8"`` (its quantised copy); None (torch) where the model
    does not qualify or an export or its check against torch fails."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._made: dict[str, Any] = {}

    def get(self, embedder: Any, precision: str = "fp32") -> Any:
        if precision not in PRECISIONS:
            raise ValueError(f"unknown ONNX precision {precision!r}; use one of "
                             f"{list(PRECISIONS)}")
        if precision not in self._made:
            with self._lock:
                if precision not in self._made:
                    self._made[precision] = (
                        _make_fp32(embedder) if precision == "fp32" else
                        _make_int8(embedder, self.get(embedder, "fp32")))
        return self._made[precision]


def _make_fp32(embedder: Any) -> Any:
    root = cache_dir() / "models" / "onnx"
    local = embedder.local_key
    if (local is not None and embedder.device == "cpu"
            and _checks(root / local[0]).get("max_diff", np.inf) <= MAX_DIFF):
        checked = _loaded(root / local[0] / "model.onnx", embedder, local[1])
        if checked is not None:
            return checked
    st = embedder.model
    if not mean_pooled(st) or str(st.device) != "cpu":
        return None
    try:
        key = local[0] if local is not None else weights_digest(st)
        out = export(st, root / key)
        onnx = _encoder(out / "model.onnx", embedder, st.max_seq_length)
        diff = float(np.abs(onnx._encode(list(PROBES), 1, False)
                            - embedder.torch_encode(list(PROBES))).max())
    except Exception as exc:  # noqa: BLE001 (any failure keeps torch)
        log.warning("the ONNX export of %s failed (%s: %s): texts stay on torch",
                    embedder.name, type(exc).__name__, exc)
        return None
    if diff > MAX_DIFF:
        log.warning("the ONNX export of %s differs from torch by %.2g: texts stay on torch",
                    embedder.name, diff)
        return None
    _record(out, max_diff=diff, probes=len(PROBES))
    return onnx


def _make_int8(embedder: Any, fp32: Any) -> Any:
    if fp32 is None:  # the export itself is unusable (warned once)
        return None
    out = fp32.onnx_path.parent
    if _checks(out).get("int8_min_cosine", -1.0) >= MIN_INT8_COSINE:
        checked = _loaded(out / "model-int8.onnx", embedder, fp32.max_length)
        if checked is not None:
            return checked
    try:
        int8 = _encoder(quantize_int8(out), embedder, fp32.max_length)
        cosine = float((int8._encode(list(PROBES), 1, False)
                        * embedder.torch_encode(list(PROBES))).sum(axis=1).min())
    except Exception as exc:  # noqa: BLE001 (any failure keeps torch)
        log.warning("the int8 ONNX model of %s failed (%s: %s): passages stay on torch, "
                    "queries on the fp32 export", embedder.name, type(exc).__name__, exc)
        return None
    if cosine < MIN_INT8_COSINE:
        log.warning("the int8 ONNX model of %s is at cosine %.3f of torch (below %s): "
                    "passages stay on torch, queries on the fp32 export", embedder.name,
                    cosine, MIN_INT8_COSINE)
        return None
    _record(out, int8_min_cosine=cosine)
    return int8


def _encoder(path: Path, embedder: Any, max_length: int) -> Any:
    """The ONNX file at ``path`` (tokenizer beside it) run one text per run."""
    from intentrank.models.onnx_embedder import OnnxEmbedder

    encoder = OnnxEmbedder(embedder.query_prefix, embedder.passage_prefix,
                           max_length=max_length, onnx_path=path, tokenizer_path=path.parent,
                           per_item=True, threads=embedder.threads)
    encoder.name = f"{embedder.name} {'int8' if 'int8' in path.stem else 'fp32'} onnx"
    return encoder


def _checks(out: Path) -> dict[str, Any]:
    """What ``out/check.json`` records of the checks against torch ({} when none)."""
    try:
        found = json.loads((out / "check.json").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _record(out: Path, **results: float) -> None:
    """Add ``results`` to ``out/check.json`` (atomically)."""
    tmp = out / f".check-{os.getpid()}-{threading.get_ident()}.json"
    tmp.write_text(json.dumps({**_checks(out), **results}))
    os.replace(tmp, out / "check.json")


def _loaded(path: Path, embedder: Any, max_length: int) -> Any:
    """The checked ONNX model at ``path``; None if it cannot be loaded, after removing it
    (the whole export for ``model.onnx``) so that it is made and checked again."""
    try:
        return _encoder(path, embedder, max_length)
    except Exception as exc:  # noqa: BLE001 (a broken file: made and checked again)
        log.warning("the ONNX model %s cannot be used (%s); making it again", path, exc)
        if path.name == "model.onnx":
            shutil.rmtree(path.parent, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        return None
