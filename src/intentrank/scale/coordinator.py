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
as failed (:mod:`intentrank.scale.pool`). Per replica latency, errors, retries and hedges:
:mod:`intentrank.scale.metrics`; where the replicas are: :mod:`intentrank.scale.status`.

Consistency: a :class:`ClusterIndex` is pinned to one generation per shard (read from the
replicas when it opens); every call names it, and replicas keep recent generations open.
An update (:meth:`upsert`, :meth:`delete`) commits on one replica of each owning shard,
makes every live replica open the new generation, then returns a new ClusterIndex pinned
to it (sharing the actors); requests already running on the old one finish on it.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.core.closing import Closing
from intentrank.errors import IntentrankError
from intentrank.index.hits import NO_HITS, Hits, check_allow, check_k
from intentrank.index.shard_api import combine_stats
from intentrank.scale.pool import NAMESPACE, Replica, ReplicaPool, ShardUnavailable
from intentrank.scale.shardset import ClusterManifest, shard_of, unit_of, write_order
from intentrank.types import Document


class ClusterIndex(Closing):
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
        n, avg_len, df = combine_stats(stats)
        if n == 0:
            return [NO_HITS for _ in texts]
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
    # -- operating -----------------------------------------------------------------------
    def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """Shards, their replicas (host, state, generation) and the hosts, as Ray sees
        them now; ``replication`` is "full" when every replica answers."""
        from intentrank.scale.status import cluster_status

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
        # a replaced document moves to the end of the row order, as in one index of
        # segments (its new text is in the newest segment); an unchanged one stays
        held = [d for d in docs if d.id in self.row_of]
        now = self.docs([d.id for d in held]) if held else []  # one call per shard
        moved = {d.id for d, old in zip(held, now, strict=True) if _content(old) != _content(d)}
        return self._write("upsert", by_shard, [d.id for d in docs], moved=moved)

    def delete(self, ids: Sequence[str]) -> ClusterIndex:
        """Delete documents by id from their owning shards; the cluster pinned after it."""
        by_shard: dict[int, list[str]] = {}
        for i in ids:
            by_shard.setdefault(self._owner(i), []).append(i)
        named = set(ids)  # a parent id deletes its passages
        gone = named | {p for p, parent in self.parent_of.items() if parent in named}
        return self._write("delete", by_shard, [], gone)

    def _write(self, method: str, by_shard: dict[int, Any], new_ids: list[str],
               gone: set[str] | None = None, moved: set[str] | None = None) -> ClusterIndex:
        import ray

        shards = list(by_shard)
        # one replica writes (retried on another if it fails); the shard's files commit once
        gens = self._all(method, [(by_shard[s],) for s in shards], shards)
        pins = list(self.pins)
        for s, g in zip(shards, gens, strict=True):
            pins[s] = g
            refs = [r.actor.refresh.remote() for r in self.pool.shards[s]]
            ray.wait(refs, num_returns=len(refs), timeout=self.pool.timeout_s)
        left = (gone or set()) | (moved or set())
        order = [i for i in self.ids if i not in left] + \
            [i for i in dict.fromkeys(new_ids) if i not in self.row_of or i in (moved or ())]
        if order != self.ids:  # deleted rows leave the order (as the shards' ids)
            write_order(self.manifest.root, order)
        return ClusterIndex(self.manifest, self.pool, pins, order)

    def _all(self, method: str, args: list[tuple], shards: list[int] | None = None
             ) -> list[Any]:
        """``method(*args[i])`` on a replica of each of ``shards`` (default: all)."""
        shards = list(range(self.manifest.shards)) if shards is None else shards
        return self.pool.call_all(method, args, shards, self.path)


def _content(doc: Document) -> tuple[Any, ...]:
    """What an upsert compares to tell a replaced document from an unchanged one."""
    return doc.text, doc.title, doc.parent_id, sorted(doc.metadata.items(), key=str)


def open_clusters(indexes: dict[str, Any], address: str | None, **options: Any
                  ) -> dict[str, Any]:
    """``indexes`` (name -> directory or index) with every cluster directory opened as a
    :class:`ClusterIndex` on the Ray cluster at ``address`` (``options``: those of
    :meth:`ClusterIndex.open`); other entries as given."""
    from intentrank.scale.shardset import is_cluster

    return {name: ClusterIndex.open(where, address=address, **options)
            if isinstance(where, (str, Path)) and is_cluster(where) else where
            for name, where in indexes.items()}


__all__ = ["NAMESPACE", "ClusterIndex", "Replica", "ShardUnavailable", "open_clusters"]
