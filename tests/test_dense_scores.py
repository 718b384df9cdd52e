"""Dense inner products: a few queries without BLAS, many with it; the same scores within
float32 noise either way, and a small batch's scores do not depend on its other queries."""

from __future__ import annotations

import numpy as np

from intentrank.index.hits import SMALL_BATCH, dense_scores


def test_small_and_large_batches_agree() -> None:
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((700, 48)).astype(np.float32)
    queries = rng.standard_normal((SMALL_BATCH + 3, 48)).astype(np.float32)
    many = dense_scores(docs, queries)
    assert many.shape == (700, SMALL_BATCH + 3) and many.dtype == np.float32
    for j in range(queries.shape[0]):
        one = dense_scores(docs, queries[j:j + 1])
        assert one.shape == (700, 1) and one.dtype == np.float32
        assert np.allclose(one[:, 0], many[:, j], rtol=1e-5, atol=1e-5)
    small = dense_scores(docs, queries[:SMALL_BATCH])
    alone = np.hstack([dense_scores(docs, queries[j:j + 1]) for j in range(SMALL_BATCH)])
    assert np.array_equal(small, alone)
    assert np.allclose(small, docs.astype(np.float64) @ queries[:SMALL_BATCH].T.astype(np.float64),
                       atol=1e-4)
