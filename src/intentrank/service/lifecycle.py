"""Stopping the service cleanly: on SIGTERM (or SIGINT) the server drains: requests already
admitted run to the end and are answered, every new request gets 503 with ``Retry-After``
and ``Connection: close`` (and its access-log line), and once nothing is in flight (or
``drain_s`` has passed) uvicorn closes its sockets, the app shuts down (pool, indexes,
access log) and the process exits 0.

:class:`Drain` is the state the ASGI gate (:mod:`intentrank.service.gate`) consults;
:class:`DrainingServer` is the uvicorn server that sets it on a signal instead of stopping
at once."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn


class Drain:
    """Requests in flight and whether the service is draining (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.since: float | None = None  # monotonic time the drain began

    @property
    def draining(self) -> bool:
        return self.since is not None

    def begin(self) -> None:
        with self._lock:
            if self.since is None:
                self.since = time.monotonic()

    def admit(self) -> bool:
        """Count a new request in, or False (answer 503) when draining."""
        with self._lock:
            if self.since is not None:
                return False
            self.active += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.active -= 1

    def done(self, limit_s: float) -> bool:
        """Draining and nothing in flight, or draining for ``limit_s`` seconds."""
        with self._lock:
            if self.since is None:
                return False
            return self.active <= 0 or time.monotonic() - self.since >= limit_s


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose SIGTERM / SIGINT start a :class:`Drain` and exit when it is
    done (a second signal exits at once), returning normally: exit status 0."""

    def __init__(self, config: uvicorn.Config, drain: Drain, drain_s: float,
                 log: Callable[[str], None]) -> None:
        super().__init__(config)
        self.drain, self.drain_s, self.log = drain, drain_s, log

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:  # noqa: ARG002
        if self.drain.draining:  # the second signal: stop now
            self.should_exit = True
            return
        self.drain.begin()
        self.log(f"{signal.Signals(sig).name}: draining ({self.drain.active} in flight; "
                 f"new requests get 503; at most {self.drain_s:g} s)")

    async def on_tick(self, counter: int) -> bool:
        if self.drain.done(self.drain_s):
            self.log(f"drained ({self.drain.active} still in flight); shutting down")
            return True
        return await super().on_tick(counter)
