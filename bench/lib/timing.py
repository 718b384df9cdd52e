"""Timing: seconds of a call, percentiles, ways timed in turn (so a busy machine slows them
alike), resident memory sampled in a thread."""

from __future__ import annotations

import gc
import os
import resource
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np


def secs(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """Seconds of ``fn(*args, **kwargs)`` and what it returned."""
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def timed_ms(fn: Callable[[Any], Any], items: Iterable) -> list[float]:
    """Milliseconds of ``fn(x)`` for each item, one at a time (latency, not throughput)."""
    return [secs(fn, x)[0] * 1000 for x in items]


def each_ms(fn: Callable[[Any], Any], items: Iterable) -> tuple[list, list[float]]:
    """``fn(x)`` of each item, one at a time: what each call returned and its milliseconds."""
    timed = [secs(fn, x) for x in items]
    return [out for _, out in timed], [s * 1000 for s, _ in timed]


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 95), scale: float = 1.0,
                method: str = "linear") -> dict[str, float]:
    """``{"p50": ..., "p95": ...}`` of ``values`` times ``scale`` (1000: seconds to ms), NaN
    when there are none; ``method`` as numpy's (linear is statistics' "inclusive")."""
    if not len(values):
        return {f"p{q}": float("nan") for q in qs}
    got = np.percentile(np.asarray(values, dtype=float), list(qs), method=method)
    return {f"p{q}": float(scale * v) for q, v in zip(qs, got, strict=True)}


def latency_ms(seconds: Sequence[float], qs: Sequence[int] = (50, 95, 99),
               method: str = "linear") -> dict[str, float]:
    """:func:`percentiles` (p50, p95, p99) of latencies in seconds, in milliseconds."""
    return percentiles(seconds, qs, 1000, method)


def cpu_seconds() -> float:
    """User and system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def interleaved(ways: dict[str, Callable[[list], Any]], items: Sequence, chunk: int,
                quiet_gc: bool = True, loads: list[float] | None = None
                ) -> dict[str, dict[str, Any]]:
    """Each way run on each chunk of ``items`` in turn: per way its summed seconds ``s``, the
    seconds of each chunk ``each``, its items per second ``rates``, its CPU seconds ``cpu``
    and its outputs in order ``out`` (each call returns a list). With ``quiet_gc`` the
    garbage collector runs between calls, not during them (as timeit does): outputs kept for
    scoring would otherwise make a collection's cost depend on what ran before. ``loads``
    gets the load average after each round."""
    out: dict[str, dict[str, Any]] = {w: {"s": 0.0, "each": [], "rates": [], "cpu": 0.0,
                                          "out": []} for w in ways}
    for start in range(0, len(items), chunk):
        part = list(items[start:start + chunk])
        for way, fn in ways.items():
            if quiet_gc:
                gc.collect()
                gc.disable()
            cpu = cpu_seconds()
            try:
                seconds, found = secs(fn, part)
            finally:
                gc.enable()
            got = out[way]
            got["cpu"] += cpu_seconds() - cpu
            got["s"] += seconds
            got["each"].append(seconds)
            got["rates"].append(len(part) / seconds)
            got["out"].extend(found)
        if loads is not None:
            loads.append(os.getloadavg()[0])
    return out


class RSSSampler:
    """The resident memory of process ``pid`` every ``every`` seconds, in a thread: ``samples``
    of (seconds since ``t0``, bytes) until ``stop`` is set or the process ends."""

    def __init__(self, pid: int, every: float, t0: float = 0.0,
                 stop: threading.Event | None = None) -> None:
        self.samples: list[tuple[float, int]] = []
        self.stop = stop or threading.Event()
        threading.Thread(target=self._run, args=(pid, every, t0), daemon=True).start()

    def _run(self, pid: int, every: float, t0: float) -> None:
        import psutil

        proc = psutil.Process(pid)
        while not self.stop.wait(every):
            try:
                self.samples.append((time.monotonic() - t0, proc.memory_info().rss))
            except psutil.Error:
                return
