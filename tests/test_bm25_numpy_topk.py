"""The numpy BM25 backend's exact top k (each query's whole score array, then a partition)
gives, bit for bit, what it gave through bm25s's ``retrieve`` with ties re-ordered by row and
retrieved deeper across the k-th place: the same rows and float32 scores on every test query
of SciFact, Cranfield and Vaswani, for several k and with row masks (filters)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DATA

from intentrank.index import IndexSettings, build_index
from intentrank.index.bm25 import retrieve, retrieve_deeper
from intentrank.index.hits import NO_HITS, bm25_tokenize

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["scifact", "cranfield", "vaswani"])
def test_numpy_top_k_is_bm25s_retrieve_reordered(name, tmp_path):
    from intentrank.data.dataset import load_dataset

    ds = load_dataset(DATA / name)
    index = build_index(ds.corpus(), tmp_path / name, IndexSettings(legs=("bm25",)))
    s = index.settings.bm25
    queries, _ = ds.split("test")
    tokens = bm25_tokenize([q.text for q in queries] + ["zzzz unknown", ""], s.stopwords,
                           s.stemmer)
    bm25, n = index.bm25, len(index)
    masks = [None, np.random.default_rng(0).random(n) < 0.3, np.arange(n) < 5]
    compared = 0
    for k in (1, 10, 100, 1000):
        for allow in masks:
            got = retrieve(bm25, tokens, k, "numpy", offset=7, allow=allow)
            mask = None if allow is None else allow.astype(np.float32)
            live = [i for i, t in enumerate(tokens) if any(w in bm25.vocab_dict for w in t)]
            want = retrieve_deeper(bm25, tokens, live, min(k, n), "numpy", 7, mask,
                                   [NO_HITS for _ in tokens])
            for g, w in zip(got, want, strict=True):
                assert g.rows.dtype == w.rows.dtype and g.scores.dtype == w.scores.dtype
                assert g.rows.tolist() == w.rows.tolist()
                assert g.scores.tobytes() == w.scores.tobytes()
                compared += len(g.rows)
    assert got[-1] is NO_HITS and got[-2] is NO_HITS
    assert compared > 100 * len(queries)
    index.close()
