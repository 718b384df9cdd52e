"""The per-leg builders of an index generation: each writes its leg's files under the
generation directory and returns its build statistics (recorded in the manifest) or None.
:func:`build_leg` is what :mod:`intentrank.index.build` calls for every leg the settings
name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.index.embedding_cache import EmbeddingCache, model_key
from intentrank.index.entities import extract_entities
from intentrank.index.settings import IndexSettings
from intentrank.index.shards import build_bm25_shards, shard_bounds
from intentrank.index.terms import save_graph, save_tfidf, tfidf_from_rows, tfidf_rows

# Encodes passages into L2-normalised float32 vectors, one row per passage in order (the
# dense leg's model by default; intentrank.scale passes a Ray Data encoder).
Encoder = Callable[[list[str]], np.ndarray]


def build_leg(leg: str, texts: list[str], settings: IndexSettings, gen: Path, progress: bool,
              cache: EmbeddingCache | None = None, encoder: Encoder | None = None
              ) -> dict[str, Any] | None:
    """Build ``leg`` (``bm25``, ``dense``, ``tfidf`` or ``graph``) of the passages ``texts``
    into the generation directory ``gen``; its statistics, or None."""
    if leg == "bm25":
        return _build_bm25(texts, settings, gen / "bm25", progress)
    if leg == "dense":
        return _build_dense(texts, settings, gen / "dense", progress, cache, encoder)
    if leg == "tfidf":
        return _build_tfidf(texts, settings, gen / "tfidf")
    if leg == "graph":
        return _build_graph(texts, settings, gen / "graph")
    raise ValueError(f"unknown index leg {leg!r}")


def _build_bm25(texts: list[str], settings: IndexSettings, out: Path, progress: bool
                ) -> dict[str, Any] | None:
    from intentrank.index.bm25 import build_bm25

    s = settings.bm25
    if settings.shards > 1:
        return build_bm25_shards(texts, s, out.parent, shard_bounds(len(texts),
                                                                    settings.shards), progress)
    build_bm25(texts, s, out, progress)  # with its term rows, what updates start from
    return None


def _build_dense(texts: list[str], settings: IndexSettings, out: Path, progress: bool,
                 cache: EmbeddingCache | None, encoder: Encoder | None = None
                 ) -> dict[str, Any]:
    vecs, stats = encode_passages(texts, settings, progress, cache, encoder)
    return write_dense(vecs, settings, out, stats)


def encode_passages(texts: list[str], settings: IndexSettings, progress: bool,
                    cache: EmbeddingCache | None, encoder: Encoder | None = None
                    ) -> tuple[np.ndarray, dict[str, Any]]:
    """The dense leg's float32 vectors of ``texts`` (through the embedding cache, if given)
    and how many were encoded or found cached."""
    s = settings.dense
    if not texts:
        return np.zeros((0, 0), dtype=np.float32), {"cache_hits": 0, "encoded": 0}
    if encoder is None:
        encoder = functools.partial(s.load_embedder().encode_passages,
                                    batch_size=s.batch_size, progress=progress)
    if cache is None:
        vecs, stats = encoder(texts), {"cache_hits": 0, "encoded": len(texts)}
    else:
        key = f"{s.backend}:{model_key(s.model)}:{s.passage_prefix}"
        if s.backend != "onnx" and s.precision == "int8":
            key += ":int8"  # fp32 vectors keep the key they had before dense.precision
        before_hits, before_miss = cache.hits, cache.misses
        vecs = cache.encode(key, texts, encoder)
        stats = {"cache_hits": cache.hits - before_hits, "encoded": cache.misses - before_miss}
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    if vecs.shape[0] != len(texts):
        raise ValueError(f"the encoder returned {vecs.shape[0]} vectors for {len(texts)} "
                         f"passages")
    return vecs, stats


def write_dense(vecs: np.ndarray, settings: IndexSettings, out: Path, stats: dict[str, Any]
                ) -> dict[str, Any]:
    """Write the dense leg of these vectors (and its ANN structures) into ``out``."""
    s = settings.dense
    out.mkdir()
    np.save(out / "embeddings.npy", vecs)
    if s.ann.method != "exact":  # one faiss structure per shard (dense/ann.faiss unsharded)
        from intentrank.index.ann import ann_file, build_ann

        vecs = np.load(out / "embeddings.npy", mmap_mode="r")
        stats["ann"] = [build_ann(vecs[a:e], s.ann,
                                  out.parent / ann_file(i if settings.shards > 1 else None))
                        for i, (a, e) in enumerate(shard_bounds(len(vecs), settings.shards))]
    return stats


def _build_tfidf(texts: list[str], settings: IndexSettings, out: Path) -> None:
    rows = tfidf_rows(texts, settings.tfidf)
    rows.save(out.parent, "tfidf")  # what updates start from
    save_tfidf(*tfidf_from_rows(rows, settings.tfidf), out)


def _build_graph(texts: list[str], settings: IndexSettings, out: Path) -> dict[str, int]:
    return save_graph([extract_entities(t) for t in texts], settings.graph, out)
