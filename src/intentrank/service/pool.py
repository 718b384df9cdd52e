"""A bounded worker pool: ``workers`` threads run pipelines, at most ``queue_limit`` more
requests wait; beyond that :class:`Overloaded` (the app answers 503 with Retry-After)
instead of memory growing with the backlog."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class Overloaded(Exception):
    """Every worker is busy and the queue is full."""


class WorkerPool:
    """Threads for the CPU/LLM work of requests, with a hard cap on work admitted."""

    def __init__(self, workers: int, queue_limit: int) -> None:
        self.workers, self.queue_limit = workers, queue_limit
        self._executor = ThreadPoolExecutor(max_workers=workers,
                                            thread_name_prefix="intentrank-worker")
        self._lock = threading.Lock()
        self._admitted = 0  # running + waiting; released when the work ends, not on timeout

    @property
    def in_flight(self) -> int:
        return self._admitted

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on a worker, or raise :class:`Overloaded`."""
        with self._lock:
            if self._admitted >= self.workers + self.queue_limit:
                raise Overloaded(f"{self._admitted} requests running or queued "
                                 f"({self.workers} workers, queue limit {self.queue_limit})")
            self._admitted += 1
        try:
            future = self._executor.submit(fn, *args)
        except BaseException:
            self._release(None)
            raise
        future.add_done_callback(self._release)
        return future

    def _release(self, _: object) -> None:
        with self._lock:
            self._admitted -= 1

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float) -> T:
        """Await ``fn(*args)`` on a worker; :class:`TimeoutError` after ``timeout`` seconds
        (the work itself finishes in its thread and keeps its slot until then)."""
        future = self.submit(fn, *args)
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
