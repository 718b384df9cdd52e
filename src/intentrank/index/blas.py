"""One BLAS thread for the small matrix products of a query.

A query's dense scores are one matrix-vector product (SciFact: 5,183 x 384). OpenBLAS splits
it over every core; with the cores busy (another request, another process) its threads wait
for each other: 6 ms wall against 0.5 on one thread under load (docs/benchmarks.md,
"latency"). Concurrent callers share one limit: the first to enter sets one thread, the last
to leave restores what was there.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

SMALL_BATCH = 16
"""Query batches up to this size run on one BLAS thread (larger ones use them all)."""


class _OneBlasThread:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._limit: Any = None
        self._controller: Any = None

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                if self._controller is None:
                    from threadpoolctl import ThreadpoolController

                    self._controller = ThreadpoolController()
                self._limit = self._controller.limit(limits=1, user_api="blas")
            self._depth += 1

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._limit.restore_original_limits()
                self._limit = None


one_blas_thread = _OneBlasThread()
"""``with one_blas_thread:`` runs the block's BLAS calls on one thread (process-wide)."""
