"""The per-leg builders of an index generation: each writes its leg's files under the
generation directory and returns its build statistics (recorded in the manifest) or None.
:func:`build_leg` is what :mod:`intentrank.index.build` calls for every leg the settings
name."""

from __future__ import annotations

import functools
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.index.embedding_cache import EmbeddingCache, model_key
from intentrank.index.entities import entity_edges, extract_entities, pagerank_sparse
from intentrank.index.settings import IndexSettings
from intentrank.index.shards import build_bm25_shards, no_terms_error, shard_bounds, token_ids
from intentrank.index.store import bm25_tokenize

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
    import bm25s

    s = settings.bm25
    if settings.shards > 1:
        return build_bm25_shards(texts, s, out.parent, shard_bounds(len(texts),
                                                                    settings.shards), progress)
    tokens = bm25_tokenize(texts, s.stopwords, s.stemmer, progress=progress)
    if not any(tokens):
        raise no_terms_error(s)
    retriever = bm25s.BM25(method=s.method, k1=s.k1, b=s.b)
    retriever.index(bm25s.tokenization.Tokenized(*token_ids(tokens)), show_progress=progress)
    retriever.save(str(out))
    return None


def _build_dense(texts: list[str], settings: IndexSettings, out: Path, progress: bool,
                 cache: EmbeddingCache | None, encoder: Encoder | None = None
                 ) -> dict[str, Any]:
    s = settings.dense
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
    import scipy.sparse
    from sklearn.feature_extraction.text import TfidfVectorizer

    s = settings.tfidf
    vectorizer = TfidfVectorizer(ngram_range=(1, s.ngram_max), max_features=s.max_features,
                                 stop_words=s.stop_words, sublinear_tf=s.sublinear_tf,
                                 dtype=np.float32)
    matrix = vectorizer.fit_transform(texts)
    out.mkdir()
    with open(out / "vectorizer.pkl", "wb") as fh:
        pickle.dump(vectorizer, fh)
    scipy.sparse.save_npz(out / "matrix.npz", matrix.tocsr())


def _build_graph(texts: list[str], settings: IndexSettings, out: Path) -> dict[str, int]:
    s = settings.graph
    entities = [extract_entities(t) for t in texts]
    edges = entity_edges(entities, window=s.window, min_shared=s.min_shared)
    pr = pagerank_sparse(len(entities), edges, s.damping)
    out.mkdir()
    (out / "entities.json").write_text(json.dumps([sorted(e) for e in entities]))
    np.save(out / "pagerank.npy", pr)
    np.save(out / "edges.npy", edges)
    return {"edges": int(len(edges)),
            "docs_with_entities": int(sum(1 for e in entities if e))}
