"""A cluster index: the shards of a cluster directory served by Ray actors across hosts,
replicated, searched through one object the pipeline's retrievers read as an index.

Placement: one Ray placement group per shard with one bundle per replica and the
``STRICT_SPREAD`` strategy, so a shard's replicas are on different hosts (Ray's own
scheduling); each replica is an actor in its bundle with ``max_restarts=-1``. When a host
dies, Ray reschedules the lost bundles on surviving hosts and restarts their actors there:
the cluster returns to full replication by itself while another host can take the bundle; a
host that comes back joins the Ray cluster and takes bundles when any need a place.

A query (:meth:`ClusterIndex.search_bm25`, :meth:`search_dense`) fans out to one replica per
shard, in parallel:

- BM25 in two phases with global statistics (:mod:`intentrank.index.shard_api`): each
  shard's document frequencies, count and total length for the query's terms among its
  allowed rows; then each shard scores with the sums. Scores equal those of one index of the
  whole corpus (bit for bit on Cranfield: tests/test_cluster_index.py).
- dense: the coordinator encodes the queries once; each shard searches its own vectors
  (exact or ANN, as its settings say).
- the lists are merged exactly: by score, ties by the cluster's row order (``order.json``:
  the corpus order), which is the row order of the one index they equal.

A call to a replica that fails (actor died, host lost) is retried on the shard's next
replica; a replica that has not answered within ``hedge_s`` is hedged (the next replica is
asked too, the first answer wins), and one that answers nothing within ``timeout_s`` counts
as failed. Per replica latency, errors, retries and hedges: :mod:`intentrank.scale.metrics`.

Consistency: a :class:`ClusterIndex` is pinned to one generation per shard (read from the
replicas when it opens); every call names it, and replicas keep recent generations open.
An update (:meth:`upsert`, :meth:`delete`) commits on one replica of each owning shard,
makes every live replica open the new generation, then returns a new ClusterIndex pinned
to it (sharing the actors); requests already running on the old one finish on it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.errors import IntentrankError
from intentrank.index.hits import NO_HITS, Hits, check_allow, check_k
from intentrank.scale.shardset import ClusterManifest, shard_of, unit_of, write_order
from intentrank.types import Document

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
        recent failure, the recently failed last."""
        reps = self.shards[shard]
        with self.lock:
            start = self.rotation[shard] % len(reps)
            self.rotation[shard] += 1
        turned = reps[start:] + reps[:start]
        now = time.monotonic()
        return sorted(turned, key=lambda r: r.failures > 0 and now - r.last_failure < 5.0)


class ClusterIndex:
    """An index whose shards are Ray actors (see the module). Open with :meth:`open`."""

    sharded = True
    bm25_backend = "numpy"  # the shards score BM25 from postings (index/shard_api.py)
    rows_deleted = 0
    DOC_CACHE = 4096  # documents kept by id (a pinned cluster's documents never change)

    def __init__(self, manifest: ClusterManifest, pool: ReplicaPool, pins: list[str],
                 order: list[str]) -> None:
        from intentrank.index import IndexSettings

        self.manifest, self.pool, self.pins = manifest, pool, list(pins)
        self.path = manifest.root
        self.settings = IndexSettings.from_dict(manifest.settings)
        self.ids = list(order)
        self.row_of = {doc_id: i for i, doc_id in enumerate(self.ids)}
        self.id_array = np.array(self.ids, dtype=object)
        self.metrics = _metrics()
        self._doc_cache: dict[str, Document] = {}
        self._doc_lock = threading.Lock()
        # each shard's local rows -> the cluster's rows (at the pinned generation)
        local_ids = self._all("ids", [(p,) for p in self.pins])
        self.local_to_global = [np.array([self.row_of[d] for d in ids], dtype=np.int64)
                                for ids in local_ids]
        missing = len(self.ids) - sum(len(a) for a in self.local_to_global)
        if missing:
            raise IntentrankError(f"{self.path}: order.json lists {len(self.ids)} documents, "
                                  f"the shards hold {len(self.ids) - missing}")

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | Path, *, address: str | None = None,
             replicas: int | None = None, cpus_per_replica: float = 0.25,
             hedge_s: float = 0.5, timeout_s: float = 10.0, start_timeout_s: float = 300.0,
             name: str | None = None, repair_every_s: float = 5.0) -> ClusterIndex:
        """Place ``replicas`` (default: the manifest's) replicas of every shard of the
        cluster directory ``root`` on Ray (joined at ``address``, or a local Ray), each
        shard's on different hosts, wait until each answers, and pin the generations.
        Every ``repair_every_s`` seconds (0: never) a replica dead for good is replaced in
        its bundle (Ray itself restarts those lost with their host)."""
        from intentrank.scale.cluster import connect

        manifest = ClusterManifest.load(root)
        ray = connect(address)
        from ray.util.placement_group import placement_group

        n_rep = replicas or manifest.replicas
        alive = [n for n in ray.nodes() if n.get("Alive")]
        if n_rep > len(alive):
            raise IntentrankError(f"{n_rep} replicas per shard need {n_rep} hosts; the Ray "
                                  f"cluster has {len(alive)} alive")
        name = name or f"{manifest.root.name}-{uuid.uuid4().hex[:6]}"
        groups = [placement_group([{"CPU": cpus_per_replica}] * n_rep, strategy="STRICT_SPREAD",
                                  name=f"irshard-{name}-{s}") for s in range(manifest.shards)]
        pool = ReplicaPool(name, [], groups, hedge_s, timeout_s,
                           ThreadPoolExecutor(max(4, 2 * manifest.shards),
                                              thread_name_prefix="irshard"),
                           [0] * manifest.shards, root=str(manifest.root),
                           cpus=cpus_per_replica)
        pool.shards = [[Replica(s, r, pool.spawn(s, r)) for r in range(n_rep)]
                       for s in range(manifest.shards)]
        shards = pool.shards
        infos = ray.get([r.actor.info.remote() for rs in shards for r in rs],
                        timeout=start_timeout_s)
        pins = []
        for s in range(manifest.shards):
            gens = {i["generation"] for i in infos if i["shard"] == s}
            if len(gens) != 1:
                raise IntentrankError(f"shard {s}'s replicas opened different generations "
                                      f"{sorted(gens)}; retry")
            pins.append(gens.pop())
        if repair_every_s:
            pool.maintain(repair_every_s)
        return cls(manifest, pool, pins, manifest.order())

    def close(self) -> None:
        """Kill the replicas and remove the placement groups (the shard files stay)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        self.pool.stop.set()
        for rs in self.pool.shards:
            for r in rs:
                ray.kill(r.actor, no_restart=True)
        for pg in self.pool.groups:
            remove_placement_group(pg)
        self.pool.executor.shutdown(wait=False)

    def __enter__(self) -> ClusterIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the pipeline reads -----------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    @property
    def generation(self) -> str:
        """The commit a request reads: every shard's generation."""
        return ",".join(f"{s}:{g}" for s, g in enumerate(self.pins))

    def has(self, leg: str) -> bool:
        return leg in self.settings.legs

    @cached_property
    def embedder(self) -> Any:
        return self.settings.dense.load_embedder()

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode_queries(texts)

    def doc(self, doc_id: str) -> Document:
        with self._doc_lock:
            found = self._doc_cache.get(doc_id)
        if found is None:
            found = self.docs([doc_id])[0]
            with self._doc_lock:
                self._doc_cache[doc_id] = found
                while len(self._doc_cache) > self.DOC_CACHE:
                    self._doc_cache.pop(next(iter(self._doc_cache)))
        return found

    def doc_text(self, doc_id: str) -> str:
        return self.doc(doc_id).full_text(self.settings.dense.title_sep)

    def docs(self, ids: Sequence[str]) -> list[Document]:
        """Documents by id, each read from a replica of its shard (one call per shard)."""
        by_shard: dict[int, list[str]] = {}
        for doc_id in ids:
            if doc_id not in self.row_of:
                raise KeyError(f"unknown document id {doc_id!r} in {self.path}")
            by_shard.setdefault(self._owner(doc_id), []).append(doc_id)
        found: dict[str, Document] = {}
        shards = list(by_shard)
        lines = self._all("docs", [(self.pins[s], by_shard[s]) for s in shards], shards)
        for s, got in zip(shards, lines, strict=True):
            for doc_id, line in zip(by_shard[s], got, strict=True):
                if line is None:
                    raise KeyError(f"{doc_id!r} is not in shard {s} of {self.path}")
                rec = json.loads(line)
                found[doc_id] = Document(id=rec["id"], text=rec["text"],
                                         title=rec.get("title", ""),
                                         parent_id=rec.get("parent_id"),
                                         metadata=rec.get("metadata") or {})
        return [found[i] for i in ids]

    def _owner(self, doc_id: str) -> int:
        """The shard holding ``doc_id`` (its parent's hash for a passage)."""
        parent = self.parent_of.get(doc_id) if self.settings.chunk_size else None
        return shard_of(parent or doc_id, self.manifest.shards)

    @cached_property
    def parent_of(self) -> dict[str, str]:
        """Passage id -> parent document id, for chunked indexes (empty otherwise)."""
        if not self.settings.chunk_size:
            return {}
        out: dict[str, str] = {}
        for rows, parents in zip(self.local_to_global, self._all(
                "parents", [(p,) for p in self.pins]), strict=True):
            out.update({self.ids[g]: p for g, p in zip(rows.tolist(), parents, strict=True)
                        if p})
        return out

    @property
    def doc_and_parent_ids(self) -> set[str]:
        return set(self.ids) | set(self.parent_of.values())

    def allowed_rows(self, filter: Any) -> np.ndarray | None:  # noqa: A002
        """A filter's rows over the cluster (each shard matches its own rows)."""
        if filter is None:
            return None
        text = str(filter)
        masks = self._all("allowed", [(p, text) for p in self.pins])
        out = np.zeros(len(self), dtype=bool)
        for rows, mask in zip(self.local_to_global, masks, strict=True):
            out[rows] = mask
        return out

    def _local_allow(self, allow: np.ndarray | None) -> list[np.ndarray | None]:
        if allow is None:
            return [None] * self.manifest.shards
        return [allow[rows] for rows in self.local_to_global]

    def search_bm25(self, texts: list[str], k: int, allow: np.ndarray | None = None
                    ) -> list[Hits]:
        from intentrank.index.hits import bm25_tokenize

        check_k(k)
        allow = check_allow(allow, len(self))
        s = self.settings.bm25
        tokens = bm25_tokenize(texts, s.stopwords, s.stemmer, tokens=s.tokens)
        terms = sorted({t for q in tokens for t in q})
        local = self._local_allow(allow)
        stats = self._all("bm25_stats", [(p, terms, a) for p, a in zip(self.pins, local,
                                                                        strict=True)])
        n = sum(st["n"] for st in stats)
        if n == 0:
            return [NO_HITS for _ in texts]
        avg_len = sum(st["total_len"] for st in stats) / n
        df: dict[str, int] = {}
        for st in stats:
            for term, d in st["df"].items():
                df[term] = df.get(term, 0) + d
        per = self._all("bm25_search", [(p, tokens, k, n, avg_len, df, a)
                                        for p, a in zip(self.pins, local, strict=True)])
        return self._merge(per, k)

    def search_dense(self, texts: list[str], k: int, query_vectors: np.ndarray | None = None,
                     allow: np.ndarray | None = None) -> list[Hits]:
        check_k(k)
        allow = check_allow(allow, len(self))
        q = self.encode_queries(texts) if query_vectors is None else query_vectors
        q = np.asarray(q, dtype=np.float32)
        if allow is not None and not allow.any():
            return [NO_HITS for _ in range(q.shape[0])]
        local = self._local_allow(allow)
        per = self._all("dense_search", [(p, q, k, a) for p, a in zip(self.pins, local,
                                                                      strict=True)])
        return self._merge(per, k, positive_only=False)

    def _merge(self, per_shard: list[list[tuple[np.ndarray, np.ndarray]]], k: int,
               positive_only: bool = True) -> list[Hits]:
        """Each query's top ``k`` over every shard's list: score descending, ties by the
        cluster's rows."""
        out = []
        for j in range(len(per_shard[0])):
            rows = np.concatenate([self.local_to_global[s][np.asarray(sh[j][0], dtype=np.int64)]
                                   for s, sh in enumerate(per_shard)])
            scores = np.concatenate([np.asarray(sh[j][1], dtype=np.float64)
                                     for sh in per_shard])
            if positive_only:
                rows, scores = rows[scores > 0], scores[scores > 0]
            order = np.lexsort((rows, -scores))[:k]
            out.append(Hits(rows[order], scores[order]) if len(order) else NO_HITS)
        return out

    def search_tfidf(self, texts: list[str], k: int, allow: Any = None) -> list[Hits]:
        raise IntentrankError(f"{self.path} is a cluster index: it serves the legs "
                              f"{list(self.settings.legs)}; TF-IDF is a whole-corpus leg")

    search_graph = search_tfidf

    # -- calls to replicas ----------------------------------------------------------------
    def _all(self, method: str, args: list[tuple], shards: list[int] | None = None
             ) -> list[Any]:
        """``method(*args[i])`` on a replica of each of ``shards`` (default: all, in
        order), in parallel; each with retries and hedging (:meth:`_call`)."""
        shards = list(range(self.manifest.shards)) if shards is None else shards
        if len(shards) == 1:
            return [self._call(shards[0], method, args[0])]
        futures = [self.pool.executor.submit(self._call, s, method, a)
                   for s, a in zip(shards, args, strict=True)]
        return [f.result() for f in futures]

    def _call(self, shard: int, method: str, args: tuple) -> Any:
        """One shard's answer: the first replica in :meth:`ReplicaPool.preference` order;
        on its failure the next (a retry); if it has not answered in ``hedge_s``, the next
        too (a hedge); the first good answer wins. ``timeout_s`` bounds the whole call."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError

        pool = self.pool
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
                self._count(kind, rep)
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
        raise ShardUnavailable(f"shard {shard} of {self.path}: no replica answered "
                               f"{method} ({'; '.join(errors)[:800]})")

    def _labels(self, rep: Replica) -> dict[str, str]:
        return {"index": self.pool.name, "shard": str(rep.shard), "replica": str(rep.replica)}

    def _count(self, kind: str, rep: Replica) -> None:
        self.metrics[kind].labels(**self._labels(rep)).inc()

    def _ok(self, rep: Replica, seconds: float) -> None:
        rep.failures = 0
        self.metrics["latency"].labels(**self._labels(rep)).observe(seconds)
        self.metrics["up"].labels(**self._labels(rep)).set(1)

    def _failed(self, rep: Replica, errors: list[str], exc: BaseException) -> None:
        rep.failures += 1
        rep.last_failure = time.monotonic()
        self._count("errors", rep)
        self.metrics["up"].labels(**self._labels(rep)).set(0)
        errors.append(f"replica {rep.replica}: {type(exc).__name__}: {str(exc)[:200]}")

    # -- operating -----------------------------------------------------------------------
    def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """Shards, their replicas (host, state, generation) and the hosts, as Ray sees
        them now; ``replication`` is "full" when every replica answers."""
        return cluster_status(self.pool.shards, self.pool.groups, timeout_s) | {
            "index": self.pool.name, "generation": self.generation}

    def wait_full_replication(self, timeout_s: float, every_s: float = 0.5) -> float:
        """Seconds until every replica answers on a distinct host per shard (bounded)."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.status(timeout_s=min(5.0, every_s * 4))["replication"] == "full":
                return time.monotonic() - start
            time.sleep(every_s)
        raise TimeoutError(f"not fully replicated after {timeout_s:g} s: {self.status()}")

    # -- updates -------------------------------------------------------------------------
    def upsert(self, docs: Sequence[Document]) -> ClusterIndex:
        """Add or replace ``docs`` in their owning shards (every replica then opens the new
        generation); the cluster pinned to it. Acknowledged = committed on the shard
        directory (the index's atomic commit) and in ``order.json``."""
        by_shard: dict[int, list[dict[str, Any]]] = {}
        for d in docs:
            by_shard.setdefault(shard_of(unit_of(d), self.manifest.shards), []).append(
                {"id": d.id, "text": d.text, "title": d.title, "parent_id": d.parent_id,
                 "metadata": dict(d.metadata)})
        return self._write("upsert", by_shard, [d.id for d in docs])

    def delete(self, ids: Sequence[str]) -> ClusterIndex:
        """Delete documents by id from their owning shards; the cluster pinned after it."""
        by_shard: dict[int, list[str]] = {}
        for i in ids:
            by_shard.setdefault(self._owner(i), []).append(i)
        return self._write("delete", by_shard, [])

    def _write(self, method: str, by_shard: dict[int, Any], new_ids: list[str]
               ) -> ClusterIndex:
        import ray

        shards = list(by_shard)
        # one replica writes (retried on another if it fails); the shard's files commit once
        gens = self._all(method, [(by_shard[s],) for s in shards], shards)
        pins = list(self.pins)
        for s, g in zip(shards, gens, strict=True):
            pins[s] = g
            refs = [r.actor.refresh.remote() for r in self.pool.shards[s]]
            ray.wait(refs, num_returns=len(refs), timeout=self.pool.timeout_s)
        order = list(self.ids) + [i for i in dict.fromkeys(new_ids) if i not in self.row_of]
        if len(order) != len(self.ids):
            write_order(self.manifest.root, order)
        return ClusterIndex(self.manifest, self.pool, pins, order)


def _metrics() -> dict[str, Any]:
    from intentrank.scale.metrics import replica_metrics

    return replica_metrics()


def cluster_status(shards: list[list[Replica]], groups: list[Any], timeout_s: float
                   ) -> dict[str, Any]:
    """Each replica's answer to ``info`` (or why not), the hosts Ray knows, and whether
    every shard has all its replicas answering on distinct hosts."""
    import ray
    from ray.util.placement_group import placement_group_table

    refs = {(r.shard, r.replica): r.actor.info.remote() for rs in shards for r in rs}
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    rows, full = [], True
    for (s, r), ref in refs.items():
        try:
            info = ray.get(ref, timeout=0.01)
            rows.append({**info, "state": "up"})
        except Exception as exc:  # noqa: BLE001 (a replica's state, whatever Ray says)
            rows.append({"shard": s, "replica": r, "state": "down",
                         "reason": type(exc).__name__})
    for s in range(len(shards)):
        mine = [x for x in rows if x["shard"] == s]
        hosts = {x.get("node_id") for x in mine if x["state"] == "up"}
        full = full and len(hosts) == len(mine)
    groups_state = [placement_group_table(pg).get("state") for pg in groups]
    nodes = [{"node_id": n["NodeID"], "host": n["NodeManagerAddress"], "alive": n["Alive"]}
             for n in ray.nodes()]
    return {"shards": len(shards), "replicas": rows, "placement_groups": groups_state,
            "hosts": nodes, "replication": "full" if full else "degraded"}


def describe(status: dict[str, Any]) -> Callable[[], str]:
    """A plain-text table of :func:`cluster_status` (for ``intentrank cluster status``)."""
    def text() -> str:
        lines = [f"index {status.get('index', '?')}: {status['shards']} shards, replication "
                 f"{status['replication']}", "shard replica state host generation"]
        for x in sorted(status["replicas"], key=lambda x: (x["shard"], x["replica"])):
            lines.append(f"{x['shard']:>5} {x['replica']:>7} {x['state']:<5} "
                         f"{x.get('host', '-'):<15} {x.get('generation', '-')}")
        lines.append("hosts: " + ", ".join(f"{n['host']} ({'alive' if n['alive'] else 'dead'})"
                                           for n in status["hosts"]))
        return "\n".join(lines)
    return text
