"""A cluster index's replicas: one Ray actor per (shard, replica) in the shard's placement
group bundle, and how a call reaches a shard (:meth:`ReplicaPool.call`): the first replica
in round-robin order (recently failed ones last); on its failure the next one (a retry);
if it has not answered within ``hedge_s``, the next one too (a hedge; the first good answer
wins); ``timeout_s`` bounds the whole call. Per replica latency, errors, retries and hedges
go to :mod:`intentrank.scale.metrics`. A replica dead for good (killed without restart, out
of restarts) is replaced in its bundle by :meth:`ReplicaPool.repair` (every few seconds, by
:meth:`ReplicaPool.maintain`); one lost with its host Ray restarts itself wherever Ray
reschedules its bundle."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from intentrank.errors import IntentrankError

AVOID_S = 5.0  # a replica that failed or was hedged is tried last for this long

NAMESPACE = "intentrank"


class ShardUnavailable(IntentrankError):  # noqa: N818
    """No replica of a shard answered (every one failed or timed out)."""


@dataclass
class Replica:
    shard: int
    replica: int
    actor: Any
    failures: int = 0  # consecutive
    last_failure: float = 0.0
    last_slow: float = -1e9  # when a call to it was last hedged (it had not answered)


@dataclass
class ReplicaPool:
    """Every shard's replicas (actor handles), the placement groups, and the call policy."""

    name: str
    shards: list[list[Replica]]
    groups: list[Any]
    hedge_s: float
    timeout_s: float
    executor: ThreadPoolExecutor
    rotation: list[int] = field(default_factory=list)
    root: str = ""
    cpus: float = 0.25
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    metrics: dict[str, Any] = field(default_factory=lambda: _metrics())

    def maintain(self, every_s: float) -> None:
        """Every ``every_s`` seconds until closed, :meth:`repair` (a daemon thread)."""
        def loop() -> None:
            while not self.stop.wait(every_s):
                with contextlib.suppress(Exception):
                    self.repair()

        threading.Thread(target=loop, name="irshard-repair", daemon=True).start()

    def spawn(self, shard: int, replica: int) -> Any:
        """A replica actor of ``shard`` in bundle ``replica`` of the shard's placement
        group (restarted by Ray wherever the bundle is rescheduled)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from intentrank.scale.replica import ShardReplica

        return ray.remote(ShardReplica).options(
            name=f"irshard-{self.name}-{shard}-{replica}", namespace=NAMESPACE,
            num_cpus=self.cpus, max_restarts=-1, max_task_retries=0, max_concurrency=4,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                self.groups[shard], placement_group_bundle_index=replica),
        ).remote(self.root, shard, replica)

    def repair(self, timeout_s: float = 5.0) -> list[tuple[int, int]]:
        """Replace the replicas that are dead for good (killed without restart, or out of
        restarts) in their bundles; the (shard, replica) replaced. Replicas Ray is
        restarting are left to it."""
        import ray
        from ray.exceptions import ActorDiedError

        replaced = []
        for reps in self.shards:
            for rep in reps:
                try:
                    ray.get(rep.actor.ping.remote(), timeout=timeout_s)
                except ActorDiedError:
                    with contextlib.suppress(Exception):
                        ray.kill(rep.actor, no_restart=True)
                    rep.actor = self.spawn(rep.shard, rep.replica)
                    replaced.append((rep.shard, rep.replica))
                except Exception:  # noqa: BLE001, S110 (restarting, or slow: not dead)
                    pass
        return replaced

    def preference(self, shard: int) -> list[Replica]:
        """The shard's replicas in the order to try: round robin among those without a
        recent failure or hedge (:data:`AVOID_S`), the recently failed or slow last."""
        reps = self.shards[shard]
        with self.lock:
            start = self.rotation[shard] % len(reps)
            self.rotation[shard] += 1
        turned = reps[start:] + reps[:start]
        now = time.monotonic()
        return sorted(turned, key=lambda r: (r.failures > 0 and now - r.last_failure < AVOID_S)
                      or now - r.last_slow < AVOID_S)

    def call_all(self, method: str, args: list[tuple], shards: list[int], where: Any
                 ) -> list[Any]:
        """``method(*args[i])`` on a replica of each of ``shards``, in parallel; each with
        retries and hedging (:meth:`call`); ``where`` names the index in errors."""
        if len(shards) == 1:
            return [self.call(shards[0], method, args[0], where)]
        futures = [self.executor.submit(self.call, s, method, a, where)
                   for s, a in zip(shards, args, strict=True)]
        return [f.result() for f in futures]

    def call(self, shard: int, method: str, args: tuple, where: Any) -> Any:
        """One shard's answer: the first replica in :meth:`ReplicaPool.preference` order;
        on its failure the next (a retry); if it has not answered in ``hedge_s``, the next
        too (a hedge); the first good answer wins. ``timeout_s`` bounds the whole call."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError

        pool = self
        order = pool.preference(shard)
        deadline = time.monotonic() + pool.timeout_s
        pending: dict[Any, tuple[Replica, float]] = {}
        errors: list[str] = []
        nxt = 0

        def launch(kind: str | None) -> None:
            nonlocal nxt
            rep = order[nxt]
            nxt += 1
            if kind is not None:
                self.count(kind, rep)
            pending[getattr(rep.actor, method).remote(*args)] = (rep, time.monotonic())

        launch(None)
        while pending:
            now = time.monotonic()
            if now >= deadline:
                break
            wait = deadline - now if nxt >= len(order) else min(pool.hedge_s, deadline - now)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait)
            if not ready:
                if nxt < len(order):
                    for slow, _ in pending.values():  # tried last for a while
                        slow.last_slow = time.monotonic()
                    launch("hedges")
                continue
            ref = ready[0]
            rep, started = pending.pop(ref)
            try:
                value = ray.get(ref)
            except (RayActorError, GetTimeoutError) as exc:
                self._failed(rep, errors, exc)
            except RayError as exc:  # raised inside the replica
                cause = getattr(exc, "cause", None)
                if type(cause).__name__ != "StaleGeneration":
                    raise (cause if isinstance(cause, Exception) else exc) from None
                self._failed(rep, errors, exc)
            else:
                self._ok(rep, time.monotonic() - started)
                return value
            if not pending and nxt < len(order):
                launch("retries")
        for rep, _ in pending.values():
            self._failed(rep, errors, TimeoutError(f"no answer in {pool.timeout_s:g} s"))
        raise ShardUnavailable(f"shard {shard} of {where}: no replica answered "
                               f"{method} ({'; '.join(errors)[:800]})")

    def _labels(self, rep: Replica) -> dict[str, str]:
        return {"index": self.name, "shard": str(rep.shard), "replica": str(rep.replica)}

    def count(self, kind: str, rep: Replica) -> None:
        self.metrics[kind].labels(**self._labels(rep)).inc()

    def _ok(self, rep: Replica, seconds: float) -> None:
        rep.failures = 0
        self.metrics["latency"].labels(**self._labels(rep)).observe(seconds)
        self.metrics["up"].labels(**self._labels(rep)).set(1)

    def _failed(self, rep: Replica, errors: list[str], exc: BaseException) -> None:
        rep.failures += 1
        rep.last_failure = time.monotonic()
        self.count("errors", rep)
        self.metrics["up"].labels(**self._labels(rep)).set(0)
        errors.append(f"replica {rep.replica}: {type(exc).__name__}: {str(exc)[:200]}")


def _metrics() -> dict[str, Any]:
    from intentrank.scale.metrics import replica_metrics

    return replica_metrics()
