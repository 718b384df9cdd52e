"""The BM25 retrieval backend (bm25s numpy or numba): the same rows and scores on real
corpora, switchable on a built index (sharded too), ties ordered by row, bad choices
refused with the backend named."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from tolerances import F32_ABS as ABS
from tolerances import F32_REL as REL

from intentrank.errors import IntentrankError
from intentrank.index import Index, IndexSettings, IndexSettingsError, build_index
from intentrank.index.bm25 import check_backend
from intentrank.index.settings import BM25Settings

pytestmark = pytest.mark.slow
pytest.importorskip("numba")


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.rows.tolist() == y.rows.tolist()
        np.testing.assert_allclose(x.scores, y.scores, rtol=REL, atol=ABS)


def _ties_by_row(hits) -> None:
    for h in hits:
        assert np.all(np.diff(h.scores) <= 0)
        assert h.rows.tolist() == h.rows[np.lexsort((h.rows, -h.scores))].tolist()


@pytest.mark.parametrize("k", [10, 100])
def test_numpy_and_numba_return_the_same_rows_on_scifact(scifact, scifact_bm25, k):
    queries, _ = scifact.split("test")
    texts = [q.text for q in queries]
    assert scifact_bm25.manifest["settings"]["bm25"]["backend"] == "numpy"
    assert scifact_bm25.bm25_backend == "numpy"
    numpy_hits = scifact_bm25.search_bm25(texts, k)
    scifact_bm25.set_bm25_backend("numba")  # the same index, not rebuilt
    try:
        numba_hits = scifact_bm25.search_bm25(texts, k)
    finally:
        scifact_bm25.set_bm25_backend("numpy")
    _same(numpy_hits, numba_hits)
    _ties_by_row(numpy_hits)
    assert sum(len(h.rows) for h in numpy_hits) > 0.9 * k * len(texts)


def test_a_tie_across_the_kth_place_is_resolved_by_row(scifact, scifact_bm25):
    """Scores tied at the k-th place: every backend keeps the lowest rows of the tie."""
    queries, _ = scifact.split("test")
    texts = [q.text for q in queries]
    deep = scifact_bm25.search_bm25(texts, 1000)
    cases = []  # (query, k) where the k-th and (k+1)-th scores are equal
    for j, h in enumerate(deep):
        s = h.scores
        cases += [(j, i + 1) for i in range(min(len(s) - 1, 200)) if s[i] == s[i + 1]][:1]
    assert cases, "SciFact has no tie in the first 200 BM25 results of any test query"
    for backend in ("numpy", "numba"):
        scifact_bm25.set_bm25_backend(backend)
        for j, k in cases[:20]:
            (hits,) = scifact_bm25.search_bm25([texts[j]], k)
            assert hits.rows.tolist() == deep[j].rows[:k].tolist(), (backend, j, k)
    scifact_bm25.set_bm25_backend("numpy")


def test_the_backend_switches_on_a_sharded_index(cranfield, tmp_path, monkeypatch):
    legs = ("bm25",)
    whole = build_index(cranfield.corpus(), tmp_path / "whole", IndexSettings(legs=legs))
    sharded = build_index(cranfield.corpus(), tmp_path / "sharded",
                          IndexSettings(legs=legs, shards=3,
                                        bm25=BM25Settings(backend="numba")))
    assert sharded.bm25_backend == "numba"  # the build's setting, recorded in the manifest
    queries, _ = cranfield.split("test")
    texts = [q.text for q in queries]
    numba_hits = sharded.search_bm25(texts, 100)
    sharded.set_bm25_backend("numpy")
    _same(sharded.search_bm25(texts, 100), numba_hits)
    # and the unsharded index's scores (a shard's float32 score may differ by one ulp, so a
    # tie there need not be one here: compare scores, not the order of near-ties)
    for w, s in zip(whole.search_bm25(texts, 100), numba_hits, strict=True):
        np.testing.assert_allclose(s.scores, w.scores, rtol=REL, atol=ABS)
    # reopening an index with another backend is not a mismatch: no rebuild
    again = build_index(cranfield.corpus(), tmp_path / "sharded",
                        IndexSettings(legs=legs, shards=3))
    assert again.generation == sharded.generation and again.bm25_backend == "numpy"
    reopened = Index(tmp_path / "sharded")
    assert reopened.bm25_backend == "numba"
    # the recorded numba is checked once, when the BM25 leg loads: refused without numba
    monkeypatch.setitem(sys.modules, "numba", None)
    with pytest.raises(IntentrankError, match=r"pip install 'intentrank\[scale\]'"):
        reopened.search_bm25(texts[:1], 10)
    reopened.set_bm25_backend("numpy")
    assert reopened.search_bm25(texts[:1], 10)[0].rows.tolist() == \
        numba_hits[0].rows[:10].tolist()
    for idx in (whole, sharded, again, reopened):
        idx.close()


def test_bad_backends_are_refused_with_the_backend_named(scifact_bm25, monkeypatch):
    with pytest.raises(IndexSettingsError, match="bm25.backend 'jax'"):
        BM25Settings(backend="jax")
    with pytest.raises(IndexSettingsError, match="bm25.backend 'numbra'"):
        scifact_bm25.set_bm25_backend("numbra")
    assert scifact_bm25.bm25_backend == "numpy"
    assert IndexSettings(bm25=BM25Settings(backend="numba")).differences(IndexSettings()) == []
    monkeypatch.setitem(sys.modules, "numba", None)  # numba not installed
    with pytest.raises(IntentrankError, match=r"pip install 'intentrank\[scale\]'"):
        check_backend("numba")
    with pytest.raises(IntentrankError, match="numba"):
        scifact_bm25.set_bm25_backend("numba")
