"""The dense leg over several segments: the small last segments are searched as one exact scan
(index/dense_search.py, TAIL_EXACT_ROWS), with the results an exact search gives."""

from __future__ import annotations

import numpy as np
import pytest
from test_index_update import QUERIES, abstracts_with_years

from intentrank.index import IndexSettings, build_index, dense_search, writer
from intentrank.index.settings import AnnSettings, DenseSettings
from intentrank.index.store import Index
from intentrank.index.update import merge, upsert


@pytest.fixture(scope="module")
def scifact():
    return abstracts_with_years()


def _segmented(docs, path, ann: str, monkeypatch) -> None:
    """SciFact abstracts as a build of 140 and three adds of 40, each segment with its own
    ANN structure (the size threshold lowered for the test), the merge policy off."""
    monkeypatch.setattr(writer, "SEGMENT_ANN_MIN_ROWS", 30)
    settings = IndexSettings(legs=("dense",), dense=DenseSettings(ann=AnnSettings(ann)))
    build_index(docs[:140], path, settings).close()
    for start in (140, 180, 220):
        upsert(path, docs[start:start + 40])


def _top(index: Index, k: int = 10) -> list[tuple[list[str], list[float]]]:
    return [(index.id_array[h.rows].tolist(), h.scores.tolist())
            for h in index.search_dense(QUERIES, k)]


def _exact_top(index: Index, k: int = 10) -> list[tuple[list[str], np.ndarray]]:
    scores = np.asarray(index.embeddings, dtype=np.float64) @ index.encode_queries(
        QUERIES).astype(np.float64).T
    out = []
    for j in range(scores.shape[1]):
        top = np.argsort(-scores[:, j], kind="stable")[:k]
        out.append((index.id_array[top].tolist(), scores[top, j]))
    return out


def test_small_hnsw_segments_are_searched_as_one_exact_scan(scifact, tmp_path, monkeypatch):
    path = tmp_path / "idx"
    _segmented(scifact, path, "hnsw", monkeypatch)
    with Index(path) as index:
        assert len(index.segments) == 4 and all(a is not None for a in index.ann)
        assert dense_search.exact_tail(index) == 0  # 260 rows: every part in one scan
        got = _top(index)
        for (ids, scores), (want_ids, want) in zip(got, _exact_top(index), strict=True):
            assert ids == want_ids
            np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-6)
        filtered = index.search_dense(QUERIES, 5, allow=np.arange(len(index)) % 2 == 0)
        assert all((h.rows % 2 == 0).all() and len(h.rows) == 5 for h in filtered)
    monkeypatch.setattr(dense_search, "TAIL_EXACT_ROWS", 0)  # each segment's own graph
    with Index(path) as index:
        assert dense_search.exact_tail(index) == len(index.shard_bounds)
        found = _top(index)
        overlap = [len(set(a) & set(b)) / 10 for (a, _), (b, _) in
                   zip(found, _exact_top(index), strict=True)]
        assert np.mean(overlap) >= 0.9


def test_exact_segments_search_as_the_merged_index(scifact, tmp_path, monkeypatch):
    path = tmp_path / "idx"
    _segmented(scifact, path, "exact", monkeypatch)
    with Index(path) as index:
        assert len(index.segments) == 4
        before = _top(index, 20)
    merge(path)
    with Index(path) as index:
        assert len(index.segments) == 1
        after = _top(index, 20)
    for (ids, scores), (ids2, scores2) in zip(before, after, strict=True):
        assert ids == ids2
        np.testing.assert_allclose(scores, scores2, rtol=1e-6, atol=1e-7)
