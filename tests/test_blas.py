"""One BLAS thread around a query's products: set while any caller is inside, restored
when the last one leaves, and the products unchanged."""

from __future__ import annotations

import threading

import numpy as np
from threadpoolctl import threadpool_info

from intentrank.index.blas import one_blas_thread


def _blas_threads() -> set[int]:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_limit_is_shared_and_restored() -> None:
    before = _blas_threads()
    rng = np.random.default_rng(0)
    m, v = rng.random((500, 64), dtype=np.float32), rng.random(64, dtype=np.float32)
    expected = m @ v
    inside, release = threading.Barrier(3), threading.Event()
    seen: list[set[int]] = []

    def caller() -> None:
        with one_blas_thread:
            inside.wait()
            release.wait(10)
            seen.append(_blas_threads())

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    release.set()
    for t in threads:
        t.join(10)
    assert seen == [{1}, {1}]
    assert _blas_threads() == before
    with one_blas_thread:
        with one_blas_thread:  # nested
            assert _blas_threads() == {1}
            assert np.allclose(m @ v, expected, rtol=1e-6)
        assert _blas_threads() == {1}
    assert _blas_threads() == before
