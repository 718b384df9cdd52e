"""A cluster index behind the service (:class:`intentrank.scale.coordinator.ClusterIndex`,
known here by its shape: ``scale`` imports ``service``, not the other way):

- its state for ``/health`` (:func:`health`): shards, replicas, hosts, replication;
- the document writes routed to it (:func:`upsert`, :func:`delete`): the cluster commits on
  every owning shard and returns a view pinned to the new commit, which the service then
  serves (:meth:`Generations.replace <intentrank.service.generations.Generations.replace>`):
  later requests read it, requests already running finish on the old view;
- commits made by another process (``intentrank cluster`` commands, another service) are
  followed (:class:`Follower`, with ``watch_s``): each shard directory's ``CURRENT`` polled,
  the replicas told to open the new generation, the view re-pinned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from intentrank.errors import IntentrankError
from intentrank.index import layout
from intentrank.types import Document

_WRITING = threading.Lock()  # one cluster write at a time from this process


def is_cluster(index: Any) -> bool:
    """Whether ``index`` is a cluster index (shards on Ray actors)."""
    return (index is not None and hasattr(index, "pins") and hasattr(index, "pool")
            and callable(getattr(index, "status", None)))


HEALTH_TTL_S = 1.0  # a load balancer polling /health asks Ray at most this often
_HEALTH: dict[tuple[int, str], tuple[float, dict[str, Any]]] = {}  # (id, generation) -> ...


def health(indexes: dict[str, Any], timeout_s: float = 2.0) -> dict[str, dict[str, Any]]:
    """Index name -> the state of each cluster index among ``indexes``: its pinned
    generation, shards, replicas (shard, replica, state, host, generation, documents),
    hosts and ``replication`` ("full", "degraded", or "unknown" when Ray did not answer);
    at most ``HEALTH_TTL_S`` seconds old."""
    out: dict[str, dict[str, Any]] = {}
    for name, idx in indexes.items():
        if not is_cluster(idx):
            continue
        now = time.monotonic()
        key = (id(idx), idx.generation)
        when, state = _HEALTH.get(key, (None, {}))
        if when is None or now - when >= HEALTH_TTL_S:
            state = _state(idx, timeout_s)
            if len(_HEALTH) > 64:  # views replaced by writes: drop the old entries
                _HEALTH.clear()
            _HEALTH[key] = (now, state)
        out[name] = state
    return out


def _state(idx: Any, timeout_s: float) -> dict[str, Any]:
    """:func:`health`'s entry for one cluster index, asked of Ray now."""
    try:
        st = idx.status(timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 (whatever Ray raises: report, stay alive)
        return {"generation": idx.generation, "shards": len(idx.pins),
                "replication": "unknown", "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {
        "generation": idx.generation, "shards": st["shards"],
        "replication": st["replication"],
        "replicas": [{k: r.get(k) for k in ("shard", "replica", "state", "host",
                                            "generation", "documents", "reason")
                      if r.get(k) is not None}
                     for r in sorted(st["replicas"], key=lambda r: (r["shard"], r["replica"]))],
        "hosts": st["hosts"]}


def _switch(engine: Any, name: str, new: Any) -> str:
    """Serve ``new`` as index ``name`` from now on; its generation."""
    engine.generations.replace({name: new})
    return new.generation


def upsert(engine: Any, name: str, docs: Sequence[Document]) -> dict[str, Any]:
    """Add or replace ``docs`` in the cluster index ``name`` (scope checks done by the
    caller); acknowledged once every owning shard committed and the service serves it."""
    start = time.perf_counter()
    with _WRITING:
        idx = engine.indexes[name]
        known = sum(d.id in idx.row_of for d in {d.id: d for d in docs}.values())
        new = _wrap(idx.upsert, list(docs))
        generation = _switch(engine, name, new)
    unique = len({d.id for d in docs})
    return {"index": name, "added": unique - known, "replaced": known, "unchanged": 0,
            "deleted": 0, "seconds": time.perf_counter() - start, "generation": generation}


def delete(engine: Any, name: str, ids: Sequence[str] | None, flt: Any) -> dict[str, Any]:
    """Delete from the cluster index ``name`` the documents ``ids`` (a parent id: all its
    passages) and those ``flt`` (a parsed filter, the caller's scope ANDed in) matches."""
    start = time.perf_counter()
    with _WRITING:
        idx = engine.indexes[name]
        doomed = list(dict.fromkeys(ids or ()))
        if flt is not None:
            rows = idx.allowed_rows(flt)
            doomed += [idx.ids[r] for r in range(len(idx.ids)) if rows is None or rows[r]]
        doomed = list(dict.fromkeys(doomed))
        if not doomed:
            return {"index": name, "added": 0, "replaced": 0, "unchanged": 0, "deleted": 0,
                    "seconds": time.perf_counter() - start, "generation": idx.generation}
        passages = sum(1 if d in idx.row_of else
                       sum(p == d for p in idx.parent_of.values()) for d in doomed)
        new = _wrap(idx.delete, doomed)
        generation = _switch(engine, name, new)
    return {"index": name, "added": 0, "replaced": 0, "unchanged": 0, "deleted": passages,
            "seconds": time.perf_counter() - start, "generation": generation}


def _wrap(fn: Callable[[Any], Any], arg: Any) -> Any:
    from intentrank.service.engine import RequestError

    try:
        return fn(arg)
    except IntentrankError as exc:
        raise RequestError(422, f"not updated: {exc}") from None
    except Exception as exc:  # noqa: BLE001 (a shard with no replica left: Ray's errors)
        raise RequestError(503, f"not updated: the cluster did not commit "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from None


def committed_pins(index: Any) -> list[str | None]:
    """The generation each shard directory of ``index`` names in its ``CURRENT`` now."""
    return [layout.read_current(index.manifest.shard_dir(s)) for s in range(len(index.pins))]


def follow(engine: Any, name: str) -> str | None:
    """If a shard of cluster index ``name`` committed a generation other than the one
    served (another process wrote), open it on every replica and serve the cluster pinned
    to it; the new generation, or None when nothing changed."""
    with _WRITING:
        idx = engine.indexes[name]
        now = committed_pins(idx)
        if all(p is None or p == q for p, q in zip(now, idx.pins, strict=True)):
            return None
        pins = [q if p is None else p for p, q in zip(now, idx.pins, strict=True)]
        return _switch(engine, name, _reopen(idx, pins))


def _reopen(idx: Any, pins: list[str]) -> Any:
    """``idx``'s cluster (same replicas) pinned to ``pins`` with the rows of
    ``order.json`` now; every replica of a changed shard opens its new generation first."""
    import ray

    for s, (old, pin) in enumerate(zip(idx.pins, pins, strict=True)):
        if old != pin:
            refs = [r.actor.refresh.remote() for r in idx.pool.shards[s]]
            ray.wait(refs, num_returns=len(refs), timeout=idx.pool.timeout_s)
    return type(idx)(idx.manifest, idx.pool, pins, idx.manifest.order())


class Follower:
    """Every ``every_s`` seconds, :func:`follow` each cluster index the engine serves
    (failures are counted in ``engine.generations.reload_errors`` and logged, and retried
    at the next check)."""

    def __init__(self, engine: Any, every_s: float) -> None:
        self.engine, self.every_s = engine, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="intentrank-cluster-watch",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        gens = self.engine.generations
        while not self._stop.wait(self.every_s):
            for name, idx in list(self.engine.indexes.items()):
                if not is_cluster(idx):
                    continue
                try:
                    follow(self.engine, name)
                except Exception as exc:  # noqa: BLE001 (a torn commit, Ray: next time)
                    gens.reload_errors += 1
                    gens.on_reload({"event": "index_reload_failed", "index": name,
                                    "error": f"{type(exc).__name__}: {exc}"[:500]})

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def start_follower(engine: Any, every_s: float | None) -> Follower | None:
    """A :class:`Follower` when ``every_s`` is set and the engine serves a cluster index."""
    if not every_s or not any(is_cluster(i) for i in engine.indexes.values()):
        return None
    return Follower(engine, every_s)
