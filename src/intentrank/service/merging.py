"""Background merges behind ``intentrank serve --watch-index``.

After the service switches to a new generation of a watched index directory, if the tiered
merge policy (:func:`intentrank.index.segments.merge_candidates`) asks for merges there,
:class:`BackgroundMerger` runs :func:`intentrank.index.update.merge_tiers` in one background
thread (one merge at a time, per service), then asks the service to reload. Requests never
wait for it: they keep reading the snapshot they took (its generation stays on disk while a
reader holds it), and the service switches to the merged generation as to any other. The
merge thread runs at the lowest CPU priority with one faiss thread
(:func:`intentrank.index.yielding.yielding`), so searches keep the cores. A merge
that fails (another writer holds the directory, a full disk) is logged and left: the next
switch asks again."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from intentrank.errors import IntentrankError
from intentrank.index.segments import merge_candidates


class BackgroundMerger:
    """Runs the tiered policy's merges of ``watched`` directories off the request path;
    ``reload()`` switches the service to the merged generation; ``log`` gets a record per
    merge done or failed."""

    def __init__(self, watched: dict[str, Path], reload: Callable[[], Any],
                 log: Callable[[dict[str, Any]], None],
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self.watched, self.reload, self.log, self.stopped = watched, reload, log, stopped
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.merges = 0

    def due(self, indexes: dict[str, Any]) -> list[str]:
        """The watched indexes whose segments the policy would merge now."""
        return [name for name in self.watched
                if merge_candidates(getattr(indexes.get(name), "segments", None) or [])
                is not None]

    def after_switch(self, indexes: dict[str, Any]) -> bool:
        """Start a merge thread if the policy asks for merges in ``indexes`` (the snapshot
        just switched to) and none is running; whether one was started."""
        names = self.due(indexes)
        with self._lock:
            if not names or (self._thread is not None and self._thread.is_alive()):
                return False
            self._thread = threading.Thread(target=self._run, args=(names,),
                                            name="intentrank-merge", daemon=True)
            self._thread.start()
            return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the running merge (if any) to end."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self, names: list[str]) -> None:
        from intentrank.index.yielding import yielding

        with yielding():  # the lowest priority, one faiss thread: searches keep the CPU
            self._merge(names)

    def _merge(self, names: list[str]) -> None:
        from intentrank.index.update import merge_tiers

        merged = False
        for name in names:
            try:
                stats = merge_tiers(self.watched[name])
            except (OSError, IntentrankError) as exc:
                self.log({"event": "index_merge_failed", "index": name,
                          "error": str(exc)[:500]})
                continue
            if stats.merged:
                merged = True
                self.merges += 1
                self.log({"event": "index_merge", "index": name, "to": stats.generation,
                          "segments": stats.segments, "seconds": round(stats.seconds, 3)})
        if merged and not self.stopped():  # the service closing: nothing to switch to
            self.reload()
