"""Hardware limits of bench_peers.py's rows, measured in the same run: the fp32 matrix
product rate of numpy on this machine's cores (GFLOP/s) and its memory copy bandwidth (GB/s);
an encoder row's limit is the FLOPs of MiniLM-L6 per text at that rate (int8 rows: at
4x it), a BM25 row's the
bytes its postings and score accumulator move at that bandwidth."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HIDDEN, FFN, LAYERS = 384, 1536, 6  # all-MiniLM-L6-v2, and the reranker trained from it
LAYER_WEIGHTS = 4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN  # Q, K, V, output; the two FFN matrices


def encoder_flops(tokens: int) -> float:
    """Multiply-adds x 2 of one text of ``tokens`` tokens: the weight products and attention
    (QK^T and AV), without the embedding lookup, softmax or layer norms."""
    return LAYERS * (2.0 * LAYER_WEIGHTS * tokens + 4.0 * tokens * tokens * HIDDEN)


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


@dataclass
class Limits:
    gflops: float  # numpy fp32 GEMM, all cores
    gbps: float  # numpy copy of 256 MiB: bytes read + written per second

    @classmethod
    def measure(cls) -> Limits:
        a = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
        gemm = _best(lambda: a @ a)
        x = np.ones(64 * 2**20, np.float32)
        y = np.empty_like(x)
        copy = _best(lambda: np.copyto(y, x), 3)
        return cls(2 * 1024**3 / gemm / 1e9, 2 * x.nbytes / copy / 1e9)

    def best(self, other: Limits) -> Limits:
        """The higher of two measurements of each (the machine is shared: a measurement is
        at most what was attainable then)."""
        return Limits(max(self.gflops, other.gflops), max(self.gbps, other.gbps))

    def facts(self) -> dict:
        return {"gflops": self.gflops, "gbps": self.gbps}

    def seconds_for_bytes(self, nbytes: float) -> float:
        return nbytes / (self.gbps * 1e9)

    def encoder_rate(self, tokens: Sequence[int], int8: bool = False) -> float:
        """Texts per second at the GEMM rate, for texts of these token counts; ``int8``: at
        4x the fp32 rate (AVX-512 VNNI does four int8 multiply-adds per fp32 lane)."""
        flops = sum(encoder_flops(n) for n in tokens)
        return len(tokens) / (flops / (self.gflops * 1e9 * (4 if int8 else 1)))

    @staticmethod
    def tokens(texts: Sequence[str], max_length: int) -> list[int]:
        return [len(e.ids) for e in _tokenizer(max_length).encode_batch(list(texts))]

    @staticmethod
    def pair_tokens(pairs: Sequence[tuple[str, str]], max_length: int) -> list[int]:
        return [len(e.ids) for e in _tokenizer(max_length).encode_batch(list(pairs))]


def _tokenizer(max_length: int):
    """MiniLM's tokenizer as intentrank's models load it: truncated, not padded (the file
    pads to 128), so a text's FLOPs are those of its own tokens."""
    from intentrank.models.inputs import minilm_path
    from intentrank.models.onnx_embedder import load_tokenizer

    return load_tokenizer(minilm_path(), max_length)
