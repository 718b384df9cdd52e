"""Index generations behind the service: the open indexes and the pipeline stages built on
them form one :class:`Snapshot`, and :class:`Generations` holds the current one.

A request takes the current snapshot once (:meth:`Generations.use`) and runs wholly on it.
With ``watch_s`` a thread checks each index directory's ``CURRENT`` that often; when a
rebuild has committed a new generation it opens it, builds every pipeline on it and swaps
the snapshot in one assignment, so each request sees one generation, old or new, never a mix
(responses name it: ``generation``). The old snapshot's indexes close when its last request
ends (then a later build may delete their generation). Each switch is logged and counted in
``/health``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intentrank.core.stage import Stage
from intentrank.errors import IntentrankError
from intentrank.index import layout
from intentrank.index.postgres import is_postgres_uri
from intentrank.index.store import Index
from intentrank.retrieve.postgres import open_table
from intentrank.service.merging import BackgroundMerger
from intentrank.service.scope import Views

Stages = dict[str, dict[str, Stage]]  # pipeline name -> index name -> the stage built on it


@dataclass
class Snapshot:
    """The indexes served at one moment and every search pipeline built on them: what one
    request runs on from start to end. ``stages[pipeline][index]``."""

    indexes: dict[str, Any]
    stages: Stages
    opened: list[Index] = field(default_factory=list)  # closed when retired and unused
    views: Views = field(default_factory=Views)  # scoped views and their pipelines
    users: int = 0
    retired: bool = False

    @property
    def generations(self) -> dict[str, str | None]:
        """Index name -> the generation it reads (None for an index object served as given)."""
        return {n: getattr(i, "generation", None) for n, i in self.indexes.items()}

    def close(self) -> None:
        for idx in self.opened:
            idx.close()
        self.opened = []


def open_indexes(sources: dict[str, Any]) -> tuple[dict[str, Any], list[Index]]:
    """Each index of ``sources`` (a directory is opened, an index object served as is),
    warmed up; the indexes by name and those opened here."""
    indexes, opened = {}, []
    for name, where in sources.items():
        if is_postgres_uri(where):  # a Postgres table: no generations (docs/postgres.md)
            opened.append(open_table(str(where)))
            indexes[name] = opened[-1]
        elif isinstance(where, (str, Path)):
            opened.append(Index.open(where))
            indexes[name] = opened[-1]
        else:  # served as is: Index.doc reads positionally (os.pread), no lock needed
            indexes[name] = where
    for idx in indexes.values():
        _warm(idx)
    return indexes, opened


class Generations:
    """The current :class:`Snapshot` and the switches to new generations of the ``watched``
    index directories, on whose indexes ``build`` builds every search pipeline (every
    ``watch_s`` seconds if given; ``on_reload`` gets a record per index switched or reload
    failed). Every method is safe to call from many threads."""

    def __init__(self, snapshot: Snapshot, watched: dict[str, Path],
                 build: Callable[[dict[str, Any]], Stages], watch_s: float | None,
                 on_reload: Callable[[dict[str, Any]], None]) -> None:
        self.current, self.build = snapshot, build
        self.watched = {n: p for n, p in watched.items() if not is_postgres_uri(p)}
        self.on_reload = on_reload
        self._swap = threading.Lock()  # guards the snapshot reference and its user counts
        self._reloading = threading.Lock()
        self.reloads = 0
        self.reload_errors = 0
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.merger = BackgroundMerger(watched, self.reload, on_reload, self._stop.is_set) \
            if watch_s else None
        if watch_s:
            self._watcher = threading.Thread(target=self._watch, args=(watch_s,),
                                             name="intentrank-watch", daemon=True)
            self._watcher.start()

    @contextmanager
    def use(self) -> Iterator[Snapshot]:
        """The current snapshot, kept open until the block ends."""
        with self._swap:
            snap = self.current
            snap.users += 1
        try:
            yield snap
        finally:
            with self._swap:
                snap.users -= 1
                done = snap.retired and snap.users == 0
            if done:
                snap.close()
                _trim_heap()

    def _watch(self, every: float) -> None:
        """Until :meth:`close`: every ``every`` seconds, reload when a watched index's
        CURRENT names another generation than the one served."""
        failed: dict[str, str | None] = {}
        while not self._stop.wait(every):
            try:
                now = {n: layout.read_current(p) for n, p in self.watched.items()}
            except (OSError, IntentrankError):  # mid-replace or damaged: keep serving, next time
                continue
            served = self.current.generations
            if now != failed and any(gen is not None and gen != served.get(n)
                                     for n, gen in now.items()):
                failed = now if not self.reload() else {}  # a failed one: not again

    def reload(self) -> dict[str, tuple[str | None, str | None]]:
        """Open the live generation of every watched index directory, build every search
        pipeline on them and switch to the new snapshot at once; index name -> (old, new
        generation) for those that changed. On any error the served snapshot stays and the
        error is recorded and counted (``reload_errors``)."""
        with self._reloading:  # one reload at a time (the watcher, or a caller)
            old = self.current
            indexes, opened = dict(old.indexes), []
            try:
                for name, path in self.watched.items():
                    idx = Index.open(path)
                    if idx.generation == old.generations.get(name):
                        idx.close()
                        continue
                    opened.append(idx)
                    _share_models(old.indexes.get(name), idx)
                    _warm(idx)
                    indexes[name] = idx
                if not opened:
                    return {}
                stages = self.build(indexes)
            except (OSError, IntentrankError) as exc:
                for idx in opened:
                    idx.close()
                self.reload_errors += 1
                self.on_reload({"event": "index_reload_failed", "serving": old.generations,
                                "error": str(exc)[:500]})
                return {}
            return self._switch(old, indexes, stages, opened)

    def replace(self, indexes: dict[str, Any]) -> dict[str, tuple[str | None, str | None]]:
        """Serve ``indexes`` (name -> an index object, e.g. a cluster index's view pinned
        to a newer commit) in place of those of the same names: every search pipeline built
        on them, then one switch as :meth:`reload` makes (requests running finish on the
        old snapshot); index name -> (old, new generation). The objects are not closed
        when retired (their owner closes them)."""
        with self._reloading:
            old = self.current
            merged = {**old.indexes, **indexes}
            try:
                stages = self.build(merged)
            except IntentrankError as exc:
                self.reload_errors += 1
                self.on_reload({"event": "index_reload_failed", "serving": old.generations,
                                "error": str(exc)[:500]})
                raise
            return self._switch(old, merged, stages, [])

    def _switch(self, old: Snapshot, indexes: dict[str, Any], stages: Stages,
                opened: list[Index]) -> dict[str, tuple[str | None, str | None]]:
        """Make ``indexes`` and ``stages`` the current snapshot, retiring ``old`` (called
        holding ``_reloading``)."""
        keep = [i for i in old.opened if any(i is v for v in indexes.values())]
        new = Snapshot(indexes, stages, opened + keep)
        before, after = old.generations, new.generations
        changed = {n: (before.get(n), after[n]) for n in indexes if after[n] != before.get(n)}
        with self._swap:
            self.current = new
            self.reloads += 1
            old.opened = [i for i in old.opened if not any(i is k for k in keep)]
            old.retired = True
            done = old.users == 0
        if done:
            old.close()
            _trim_heap()
        for n, (a, b) in changed.items():
            self.on_reload({"event": "index_reload", "index": n, "from": a, "to": b,
                            "reload": self.reloads})
        if self.merger is not None:  # the tiered policy's merges, in the background
            self.merger.after_switch(new.indexes)
        return changed

    def close(self) -> None:
        """Stop watching and close the current snapshot's indexes."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=30)
        with self._swap:
            snap = self.current
            snap.retired = True
        snap.close()


def _share_models(old: Any, new: Any) -> None:
    """Give ``new`` (another generation of the same index) ``old``'s loaded query embedder
    when both were built with the same dense settings: the model does not depend on the
    generation, so a reload neither loads it again nor holds two copies."""
    loaded = getattr(old, "__dict__", {}).get("embedder")
    same = getattr(getattr(old, "settings", None), "dense", None) == \
        getattr(getattr(new, "settings", None), "dense", object())
    if loaded is not None and same and new.has("dense"):
        new.__dict__["embedder"] = loaded  # Index.embedder is a cached_property


def _trim_heap() -> None:
    """Hand memory freed by a retired generation back to the OS (glibc keeps freed heap
    otherwise, and the process's RSS would step up at every reload)."""
    import ctypes
    import gc

    gc.collect()
    with suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _warm(idx: Any) -> None:
    """Load the query embedder and compile numba now, not on the first request; for an
    index of several segments or with deleted rows, compute the lexical legs' statistics of
    the live rows now too, and search the dense leg once (its graphs' shared walk)."""
    has = getattr(idx, "has", lambda leg: False)
    combined = not getattr(idx, "flat", True)
    if has("dense"):
        idx.encode_queries(["warm-up"])
        if combined:
            idx.search_dense(["warm-up"], 1)
    if has("bm25") and (idx.bm25_backend == "numba" or combined):
        idx.search_bm25(["warm-up"], 1)
    if combined:
        for leg in ("tfidf", "graph"):
            if has(leg):
                getattr(idx, f"search_{leg}")(["warm-up"], 1)
