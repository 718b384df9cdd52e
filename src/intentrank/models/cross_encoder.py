"""Cross-encoder reranking: score (query, passage) pairs jointly and reorder the top k.

Two backends share one ``predict(pairs, batch_size)`` interface:

- ``torch``: any sentence-transformers CrossEncoder (hub name or local directory);
- ``onnx``: an int8 ONNX export (``model_int8.onnx`` + ``tokenizer.json`` in the model
  directory, as written by ``intentrank train-reranker --onnx``), run by onnxruntime.

No pretrained cross-encoder is on PyPI, so intentrank ships its own inside the package: the
MiniLM cross-encoder trained here on SciFact's train qrels (int8 ONNX, 128 tokens; its
``training.json`` says how), at :func:`bundled_reranker_dir`. It is the default model (also
named ``bundled``). Its ``precision`` (:data:`PRECISIONS`): ``int8`` as shipped, or
``fp32``, the same int8 weights dequantised, with fp32 activations
(:mod:`intentrank.models.onnx_precision`; the quality and speed of each: docs/benchmarks.md,
"peers"). ``intentrank train-reranker`` fine-tunes one for your data and saves it under
:func:`default_reranker_dir` unless told otherwise; point the stage at it with ``model: DIR``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from intentrank.errors import ModelError
from intentrank.models.inputs import clip_texts
from intentrank.paths import cache_dir

ONNX_FILES = ("model_int8.onnx", "model.onnx", "onnx/model_int8.onnx", "onnx/model.onnx")
Pair = tuple[str, str]
PRECISIONS = ("int8", "fp32")
"""How the onnx backend runs a dynamically quantised model: ``int8`` as the file is (int8
activations), ``fp32`` with its weight products turned back into fp32 ``MatMul`` over the
dequantised int8 weights (fp32 activations); both one pair per run."""


BUNDLED = "bundled"


def default_reranker_dir(dataset: str = "scifact") -> Path:
    """Where ``intentrank train-reranker`` saves the cross-encoder trained on ``dataset``."""
    return cache_dir() / "models" / f"cross-encoder-{dataset}"


def bundled_reranker_dir() -> Path:
    """The cross-encoder shipped in the package (``model_int8.onnx``, ``tokenizer.json``,
    ``training.json``): the default model."""
    from importlib import resources

    return Path(str(resources.files("intentrank.models").joinpath("reranker")))


class PairScorer(Protocol):
    """Scores (query, passage) pairs; higher is more relevant."""

    name: str

    def predict(self, pairs: Sequence[Pair], batch_size: int = 8) -> np.ndarray: ...


def _looks_local(model: str) -> bool:
    """A path rather than a hub name (hub names are ``org/name``)."""
    return (model.startswith((".", "/", "~")) or model.count("/") > 1
            or Path(model).expanduser().exists())


def _missing(model: str) -> ModelError:
    return ModelError(f"no cross-encoder model at {model}: train one with `intentrank "
                      f"train-reranker <dataset>` or pass a sentence-transformers CrossEncoder "
                      f"(hub name or local directory)")


class TorchCrossEncoder:
    """A sentence-transformers CrossEncoder on CPU (fp32)."""

    def __init__(self, model: str, max_length: int = 256, device: str = "cpu") -> None:
        from sentence_transformers import CrossEncoder

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.name = model
        self.max_length = max_length
        try:
            self.model = CrossEncoder(model, device=device, max_length=max_length)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load cross-encoder {model!r} (offline machines need a "
                             f"local directory; train one with `intentrank train-reranker`): "
                             f"{exc}") from exc

    def predict(self, pairs: Sequence[Pair], batch_size: int = 8) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self.model.predict(_clip_pairs(pairs, self.max_length), batch_size=batch_size,
                                    show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(len(pairs))


def _clip_pairs(pairs: Sequence[Pair], max_length: int) -> list[list[str]]:
    """Each side cut before tokenising (:func:`~intentrank.models.inputs.clip_text`): the
    same tokens after truncation, in memory bounded by ``max_length``."""
    return [clip_texts(pair, max_length) for pair in pairs]


def find_onnx(model: str | Path) -> Path:
    """The ONNX file of a model directory (int8 preferred), or ``model`` if it is one."""
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".onnx":
        return path
    for name in ONNX_FILES:
        if (path / name).is_file():
            return path / name
    if not path.exists():
        raise _missing(str(model))
    raise ModelError(f"no ONNX model in {path} (looked for {', '.join(ONNX_FILES)}): export one "
                     f"with `intentrank train-reranker --onnx` or use backend 'torch'")


class OnnxCrossEncoder:
    """A cross-encoder exported to ONNX, run by onnxruntime (no torch); sigmoid scores.

    A dynamically quantised model (the bundled int8 one) scores each pair in its own run,
    several runs at once (:class:`~intentrank.models.onnx_embedder.ItemRunner`), so a pair's
    score never depends on the other pairs of the call (see ``batch_dependent``)."""

    def __init__(self, model: str | Path, max_length: int = 256, threads: int | None = None,
                 precision: str = "int8") -> None:
        from intentrank.models.onnx_embedder import ItemRunner, load_tokenizer, ort_session
        from intentrank.models.onnx_precision import dequantize

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        if precision not in PRECISIONS:
            raise ModelError(f"unknown cross-encoder precision {precision!r}; use "
                             f"{' or '.join(PRECISIONS)}")
        self.onnx_path = find_onnx(model)
        self.name = str(model)
        self.precision = precision
        self.tokenizer = load_tokenizer(self.onnx_path.parent, max_length)
        fp32 = precision == "fp32"  # one pair per single-threaded run, as many runs as cores:
        # 1.3x the pairs/s of batches on two threads (no padding, no sync inside an operator)
        self.session, self.per_pair = ort_session(
            self.onnx_path, threads, per_item=True if fp32 else None,
            transform=dequantize if fp32 else None)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.items = ItemRunner(self.session, self.input_names, threads) \
            if self.per_pair else None
        self.max_length = max_length

    def predict(self, pairs: Sequence[Pair], batch_size: int = 8) -> np.ndarray:
        from intentrank.models.onnx_embedder import length_batches, pad_encodings

        out = np.zeros(len(pairs), dtype=np.float32)
        if not pairs:
            return out
        encodings = self.tokenizer.encode_batch(
            [tuple(p) for p in _clip_pairs(pairs, self.max_length)])
        if self.items is not None:
            out[:] = [np.asarray(logit, dtype=np.float32).reshape(-1)[0]
                      for logit in self.items.map(encodings)]
        else:
            for idx in length_batches([len(e.ids) for e in encodings], batch_size):
                feeds = pad_encodings([encodings[i] for i in idx])
                logits = self.session.run(None, {n: feeds[n] for n in self.input_names})[0]
                out[idx] = np.asarray(logits, dtype=np.float32).reshape(len(idx), -1)[:, 0]
        return (1.0 / (1.0 + np.exp(-out))).astype(np.float32)


def trained_max_length(model: str | Path, default: int = 256) -> int:
    """The max_length a model from ``train-reranker`` was trained at (its training.json)."""
    path = Path(model).expanduser()
    path = path.parent if path.suffix == ".onnx" else path
    try:
        info = json.loads((path / "training.json").read_text())
        return int(info["settings"]["max_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return default


def load_cross_encoder(
    model: str | Path | None = None, backend: str | None = None,
    max_length: int | None = None, threads: int | None = None, precision: str | None = None,
) -> PairScorer:
    """A cross-encoder by backend; ``model`` defaults to the bundled one
    (:func:`bundled_reranker_dir`, also named ``"bundled"``).

    ``backend`` defaults to ``onnx`` for a local directory with an ONNX file, else ``torch``.
    ``max_length`` defaults to the length the model was trained at, else 256. ``precision``
    (onnx only, :data:`PRECISIONS`) defaults to ``int8``, the file as it is."""
    bundled = model is None or str(model) == BUNDLED
    model = str(bundled_reranker_dir() if bundled else model)
    local = Path(model).expanduser() if _looks_local(model) else None
    if local is not None and not local.exists():
        raise _missing(model)
    if backend is None:
        backend = "onnx" if local is not None and (
            local.suffix == ".onnx" or any((local / f).is_file() for f in ONNX_FILES)) \
            else "torch"
    if bundled and backend != "onnx":
        raise ModelError("the bundled cross-encoder is int8 ONNX only: use backend 'onnx', or "
                         "give a model trained with `intentrank train-reranker` (or a hub name) "
                         "for backend 'torch'")
    max_length = max_length or trained_max_length(model)
    if backend == "torch":
        if precision not in (None, "fp32"):
            raise ModelError(f"backend 'torch' runs fp32; precision {precision!r} is for "
                             f"backend 'onnx'")
        return TorchCrossEncoder(str(local or model), max_length)
    if backend == "onnx":
        return OnnxCrossEncoder(model, max_length, threads, precision or "int8")
    raise ModelError(f"unknown cross-encoder backend {backend!r}; use 'torch' or 'onnx'")
