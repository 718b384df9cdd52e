"""Dense HNSW search over several segments: every segment's graph walked in one compiled call,
the walks sharing one top list (index/hnsw_walk.py). Real SciFact abstracts and queries, real
MiniLM vectors; each segment of 100 rows or more carries its own faiss graph (the threshold
lowered for the test), the exact tail scan off, so every segment is walked."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import numpy as np
import pytest
from test_index_update import DATA

from intentrank.data.corpus import iter_corpus
from intentrank.index import IndexSettings, build_index, dense_search, update, writer
from intentrank.index.settings import AnnSettings, DenseSettings
from intentrank.index.store import Index
from intentrank.index.update import delete, upsert

pytest.importorskip("faiss")
pytest.importorskip("numba")

RECALL_AT_10 = 0.95  # the bar, at the default settings, for 1 to 20 segments


@pytest.fixture(scope="module")
def abstracts() -> list:
    return list(iter_corpus(DATA / "scifact" / "corpus.jsonl.gz"))


@pytest.fixture(scope="module")
def query_texts() -> list[str]:
    lines = (DATA / "scifact" / "queries.jsonl").read_text().splitlines()[:200]
    return [json.loads(line)["text"] for line in lines]


@contextlib.contextmanager
def _graphs_everywhere() -> Iterator[None]:
    """Segments of 100 rows or more get a graph; no tail scan; adds merge nothing."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer, "SEGMENT_ANN_MIN_ROWS", 100)
        mp.setattr(dense_search, "TAIL_EXACT_ROWS", 0)
        mp.setattr(update, "merge_candidates", lambda entries: None)
        yield


def _segmented(docs: list, path, count: int) -> None:
    """``docs`` as a build and ``count - 1`` adds of equal size, dense HNSW (defaults)."""
    settings = IndexSettings(legs=("dense",), dense=DenseSettings(ann=AnnSettings("hnsw")))
    step = len(docs) // count
    build_index(docs[:step], path, settings).close()
    for c in range(1, count):
        upsert(path, docs[c * step:len(docs) if c == count - 1 else (c + 1) * step])


def _exact(index: Index, q: np.ndarray, k: int, allow: np.ndarray | None = None
           ) -> list[tuple[list[int], np.ndarray]]:
    scores = np.asarray(index.embeddings, dtype=np.float64) @ q.astype(np.float64).T
    if allow is not None:
        scores[~allow] = -np.inf
    out = []
    for j in range(scores.shape[1]):
        top = np.argsort(-scores[:, j], kind="stable")[:k]
        out.append((top.tolist(), scores[top, j]))
    return out


def _recall(index: Index, q: np.ndarray, k: int = 10, allow: np.ndarray | None = None
            ) -> float:
    got = index.search_dense([], k, query_vectors=q, allow=allow)
    want = _exact(index, q, k, allow)
    return float(np.mean([len(set(h.rows.tolist()) & set(w)) / len(w)
                          for h, (w, _) in zip(got, want, strict=True)]))


@pytest.mark.parametrize("count", [1, 5, 10, 20])
def test_recall_at_10_against_exact_over_segments(abstracts, query_texts, tmp_path, count):
    path = tmp_path / "idx"
    with _graphs_everywhere():
        _segmented(abstracts, path, count)
        with Index(path) as index:
            assert len(index.segments) == count and all(a is not None for a in index.ann)
            assert dense_search._walks_together(index) == (count > 1)
            q = index.encode_queries(query_texts)
            assert _recall(index, q) >= RECALL_AT_10


def test_walk_visits_every_row_with_a_wide_list_and_keeps_filters_and_deletes(
        abstracts, query_texts, tmp_path):
    """With a candidate list wider than any segment the walk is exhaustive: the exact top k
    (ids in order, scores within float32), with an allow mask and after deletes too."""
    path = tmp_path / "idx"
    docs = abstracts[:1500]
    with _graphs_everywhere():
        _segmented(docs, path, 5)
        delete(path, [d.id for d in docs[::7]])
        with Index(path) as index:
            assert dense_search._walks_together(index) and index.live is not None
            index.set_ann_search(ef_search=4096)
            q = index.encode_queries(query_texts[:40])
            allow = np.arange(len(index)) % 3 != 0
            for mask in (None, allow):
                got = index.search_dense([], 10, query_vectors=q, allow=mask)
                for h, (rows, scores) in zip(got, _exact(index, q, 10, mask), strict=True):
                    assert h.rows.tolist() == rows
                    np.testing.assert_allclose(h.scores, scores, rtol=1e-5, atol=1e-6)
            index.set_ann_search()  # the defaults: a filter keeps to its rows
            for h in index.search_dense([], 10, query_vectors=q, allow=allow):
                assert len(h.rows) == 10 and allow[h.rows].all()
            assert _recall(index, q, allow=allow) >= RECALL_AT_10


def test_each_walk_alone_finds_what_faiss_finds(abstracts, query_texts, tmp_path):
    """Per segment, the compiled walk (nothing shared) against faiss's own search of the same
    graph at the same candidate list: recall@10 against exact within 0.01; one graph alone
    is still searched by faiss (a merged index answers as a build)."""
    from intentrank.index.hnsw_walk import Graphs

    path = tmp_path / "idx"
    with _graphs_everywhere():
        _segmented(abstracts, path, 5)
        with Index(path) as index:
            q = index.encode_queries(query_texts)
            ef = index.settings.dense.ann.ef_search
            for i, (start, end) in enumerate(index.shard_bounds):
                searcher = index.ann[i]
                exact = [set(r) for r, _ in _exact_part(index, q, start, end)]
                rows_f, _ = searcher.search(q, 10)
                rows_w, scores_w = Graphs([(0, searcher.index)]).search(
                    q, 10, ef, np.array([ef]), None, share=False)
                want = np.asarray(index._vectors[start:end], dtype=np.float64) @ q.T
                np.testing.assert_allclose(scores_w, np.take_along_axis(want.T, rows_w, 1),
                                           rtol=1e-5, atol=1e-6)
                r_f = np.mean([len(set(r) & e) / 10 for r, e in zip(rows_f.tolist(), exact,
                                                                   strict=True)])
                r_w = np.mean([len(set(r) & e) / 10 for r, e in zip(rows_w.tolist(), exact,
                                                                   strict=True)])
                assert r_w >= r_f - 0.01
        update.merge(path)
        with Index(path) as index:
            assert len(index.ann) == 1 and not dense_search._walks_together(index)
            rows_f, scores_f = index.ann[0].search(q, 10)
            for h, r, s in zip(index.search_dense([], 10, query_vectors=q), rows_f, scores_f,
                               strict=True):
                assert h.rows.tolist() == r.tolist()
                np.testing.assert_array_equal(h.scores, s.astype(np.float64))


def _exact_part(index: Index, q: np.ndarray, start: int, end: int) -> list:
    scores = np.asarray(index._vectors[start:end], dtype=np.float64) @ q.astype(np.float64).T
    return [(np.argsort(-scores[:, j], kind="stable")[:10].tolist(), None)
            for j in range(scores.shape[1])]
