"""Queries encoded by an fp32 ONNX export of the sentence-transformers model itself.

A query is one short text: torch runs its few small matrix products with per-operator
overhead and, with two threads, waits on the other core. The same weights exported to ONNX
run one query in one single-threaded onnxruntime session: the dense stage of a SciFact query
took 7.6 ms against 540.7 with torch (docs/benchmarks.md, "latency"), with vectors equal to
torch's within float32 noise (checked at export, see :data:`MAX_DIFF`). Passages stay on
torch (long texts: no gain measured, section "speed").

The export happens once per model and is kept in ``$INTENTRANK_CACHE/models/onnx-queries/``
with the result of its check against torch (``check.json``), keyed by the model directory's
files (name, size, time) or, for a hub name, by the weights' digest. A later process with a
local model finds it there and never loads torch for queries (cold start: see "latency").
Only models whose sentence-transformers pipeline is Transformer -> mean pooling
(-> Normalize) qualify; any other, or an export that fails or disagrees with torch, keeps
torch with one warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.paths import cache_dir

log = logging.getLogger(__name__)

MAX_DIFF = 1e-5
"""Largest element difference from torch on the probe texts for the export to be used
(float32 noise is about 2e-7)."""
PROBES = ("dimension probe", "Does cold exposure increase brown adipose tissue recruitment?",
          " ".join(["truncated"] * 400))


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
    h = hashlib.sha256(json.dumps([str(root.resolve()), length, stats]).encode())
    return f"dir-{h.hexdigest()[:16]}", int(length)


def weights_digest(st_model: Any) -> str:
    """A digest of the model's parameters (what the export depends on)."""
    h = hashlib.sha256()
    for name, tensor in sorted(st_model[0].auto_model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def export(st_model: Any, out_dir: Path) -> Path:
    """Write ``model.onnx`` (input ids, mask, types -> last hidden state) and
    ``tokenizer.json`` of ``st_model`` into ``out_dir`` atomically; returns ``out_dir``."""
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
    with torch.no_grad(), warnings.catch_warnings():
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


class QueryEncoders:
    """The ONNX query encoder of one sentence-transformers embedder, made on first use; None
    (torch) where the model does not qualify or the export fails."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._encoder: Any = None

    def get(self, embedder: Any) -> Any:
        if self._done:
            return self._encoder
        with self._lock:
            if not self._done:
                self._encoder = self._make(embedder)
                self._done = True
        return self._encoder

    @staticmethod
    def _make(embedder: Any) -> Any:
        root = cache_dir() / "models" / "onnx-queries"
        local = embedder.local_key
        if local is not None and embedder.device == "cpu":
            checked = _load_checked(root / local[0], embedder, local[1])
            if checked is not None:
                return checked
        st = embedder.model
        if not mean_pooled(st) or str(st.device) != "cpu":
            return None
        try:
            key = local[0] if local is not None else weights_digest(st)
            out = export(st, root / key)
            onnx = _onnx(out, embedder, st.max_seq_length)
            torch_vecs = embedder.torch_encode(list(PROBES))
            diff = float(np.abs(onnx._encode(list(PROBES), 1, False) - torch_vecs).max())
        except Exception as exc:  # noqa: BLE001 (any failure keeps torch)
            log.warning("queries stay on torch: the ONNX export of %s failed (%s: %s)",
                        embedder.name, type(exc).__name__, exc)
            return None
        if diff > MAX_DIFF:
            log.warning("queries stay on torch: the ONNX export of %s differs from torch by "
                        "%.2g", embedder.name, diff)
            return None
        (out / "check.json").write_text(json.dumps({"max_diff": diff, "probes": len(PROBES)}))
        return onnx


def _onnx(out: Path, embedder: Any, max_length: int) -> Any:
    from intentrank.models.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder(embedder.query_prefix, embedder.passage_prefix, max_length=max_length,
                        onnx_path=out / "model.onnx", tokenizer_path=out, per_item=True)


def _load_checked(out: Path, embedder: Any, max_length: int) -> Any:
    """The export in ``out`` if it was checked against torch; None otherwise."""
    try:
        check = json.loads((out / "check.json").read_text())
        if float(check["max_diff"]) > MAX_DIFF:
            return None
        return _onnx(out, embedder, max_length)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    except Exception as exc:  # noqa: BLE001 (a broken file: checked against torch again)
        log.warning("the ONNX query model in %s cannot be used (%s)", out, exc)
        return None
