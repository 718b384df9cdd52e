"""The driver of the cluster-index fault test and measurements on namespace hosts
(tests/test_faults_shards.py runs it in the head host's namespace; docs/scale.md "Across
hosts"). Talks to the test through files in WORK:

1. opens the cluster index (replicas placed by Ray) and measures, bounded: latency per query
   of the cluster (fan-out over Ray to one replica per shard, two-phase BM25) against the
   same shards in this process and one index of the whole corpus; throughput with 1 and 8
   client threads -> ``measure.json``;
2. ``readyS.json``, then queries for ``--slow-s`` while the test stops one replica (SIGSTOP,
   ``stoppedS.json``) for 8 s: answered by the other replica within the hedge delay ->
   ``slow.json``;
3. upserts a new document and a replaced one (acknowledged: committed on the owning shard,
   every replica refreshed), and the same into a copy of the one index the answers are
   checked against from then on;
4. ``ready1.json`` (where the replicas are), then a stream of queries for ``--stream-s``
   (the test SIGKILLs a host meanwhile and writes ``killed1.json``), every answer checked
   against the one index; the replication state sampled every second until full again ->
   ``stream1.json``;
5. waits for ``restored.json`` (the lost host's Ray node started again), then the same with
   the other worker host killed (``ready2.json``, ``killed2.json`` -> ``stream2.json``):
   the replicas it held must restart on the host that came back. After each kill every
   replica (restarted ones too) must hold the updated generation and serve the update.

    python bench/cluster_driver.py --address HEAD:6379 --cluster DIR --single DIR \\
        --queries QUERIES.jsonl --work WORK
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from lib.timing import latency_ms


def _pct(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "mean": 1000 * float(np.mean(xs)), **latency_ms(xs)}


def _wait_file(path: Path, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            time.sleep(0.1)
            return json.loads(path.read_text())
        time.sleep(0.2)
    raise TimeoutError(f"{path} did not appear in {timeout:g} s")


def _write(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def in_process_shards(shards: list[Any], l2g: list[np.ndarray], q: str, k: int) -> Any:
    """The cluster's two-phase BM25 and merge, on the shard indexes in this process."""
    from intentrank.index import shard_api

    toks = shard_api.tokenize(shards[0], [q])
    stats = [shard_api.bm25_term_stats(sh, toks[0]) for sh in shards]
    n, avg, df = shard_api.combine_stats(stats)
    per = [shard_api.bm25_search_global(sh, toks, k, n, avg, df)[0] for sh in shards]
    rows = np.concatenate([l2g[s][h.rows] for s, h in enumerate(per)])
    scores = np.concatenate([h.scores for h in per])
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


def measure(ci: Any, single: Any, queries: list[str], args: argparse.Namespace
            ) -> dict[str, Any]:
    from intentrank.index import Index

    shards = [Index(ci.manifest.shard_dir(s)) for s in range(ci.manifest.shards)]
    l2g = [np.array([single.row_of[i] for i in sh.ids]) for sh in shards]
    for q in queries[:20]:  # warm every path
        ci.search_bm25([q], args.k)
        in_process_shards(shards, l2g, q, args.k)
    lat: dict[str, list[float]] = {"cluster": [], "in_process_shards": [], "one_index": []}
    for q in queries[:args.latency_queries]:  # interleaved, one query at a time
        for name, fn in (("cluster", lambda q=q: ci.search_bm25([q], args.k)),
                         ("in_process_shards", lambda q=q: in_process_shards(shards, l2g, q,
                                                                             args.k)),
                         ("one_index", lambda q=q: single.search_bm25([q], args.k))):
            t = time.perf_counter()
            fn()
            lat[name].append(time.perf_counter() - t)
    out: dict[str, Any] = {"latency_ms": {k: _pct(v) for k, v in lat.items()},
                           "load_before": os.getloadavg()[0]}
    out["throughput"] = {}
    for clients in (1, 8):
        done, stop = [0] * clients, time.monotonic() + args.throughput_s

        def client(i: int, stop: float, done: list[int], clients: int) -> None:
            j = i
            while time.monotonic() < stop:
                ci.search_bm25([queries[j % len(queries)]], args.k)
                done[i] += 1
                j += clients

        threads = [threading.Thread(target=client, args=(i, stop, done, clients))
                   for i in range(clients)]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        out["throughput"][str(clients)] = sum(done) / (time.monotonic() - t0)
    out["load_after"] = os.getloadavg()[0]
    for sh in shards:
        sh.close()
    return out


def _placement(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"shard": r["shard"], "replica": r["replica"], "state": r["state"],
             "host": r.get("host"), "pid": r.get("pid"), "generation": r.get("generation")}
            for r in status["replicas"]]


def _clients(ci: Any, expected: dict[str, tuple], queries: list[str], args: argparse.Namespace,
             seconds: float) -> list[dict[str, Any]]:
    """``args.clients`` threads sending queries back to back for ``seconds``; each answer
    checked against the one index's (ids and scores)."""
    records: list[dict[str, Any]] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        j = i
        while time.monotonic() < stop:
            q = queries[j % len(queries)]
            j += args.clients
            t, err, same = time.time(), None, False
            try:
                h = ci.search_bm25([q], args.k)[0]
                same = (h.rows.tolist(), h.scores.tolist()) == expected[q]
            except Exception as exc:  # noqa: BLE001 (recorded: the test fails on any)
                err = f"{type(exc).__name__}: {str(exc)[:300]}"
            with lock:
                records.append({"wall": t, "s": time.time() - t, "same": same, "error": err})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return records


def slow(ci: Any, expected: dict[str, tuple], queries: list[str], args: argparse.Namespace,
         work: Path) -> dict[str, Any]:
    """Queries for ``args.slow_s`` while the test stops one replica (SIGSTOP) for a while:
    the answers, and the latency of those sent while it was stopped."""
    _write(work / "readyS.json", {"wall": time.time(), "placement": _placement(ci.status())})
    records = _clients(ci, expected, queries, args, args.slow_s)
    stopped = _wait_file(work / "stoppedS.json", 60)
    during = [r["s"] for r in records if stopped["stop"] <= r["wall"] <= stopped["cont"]]
    return {"stopped": stopped, "queries": len(records), "during": len(during),
            "errors": sum(r["error"] is not None for r in records),
            "wrong": sum(not r["same"] and r["error"] is None for r in records),
            "latency_during_ms": _pct(during or [0.0]),
            "max_during_ms": 1000 * max(during or [0.0]), "load": os.getloadavg()[0]}


def stream(ci: Any, expected: dict[str, tuple], queries: list[str], args: argparse.Namespace,
           n: int, work: Path) -> dict[str, Any]:
    """Queries for ``args.stream_s`` while a host is killed; then wait (bounded) for full
    replication, sampling it every second."""
    _write(work / f"ready{n}.json", {"wall": time.time(), "placement": _placement(ci.status())})
    samples: list[dict[str, Any]] = []
    done = threading.Event()

    def monitor() -> None:
        while not done.is_set():
            t = time.time()
            try:
                st = ci.status(timeout_s=2.0)
                samples.append({"wall": t, "replication": st["replication"],
                                "placement": _placement(st)})
            except Exception as exc:  # noqa: BLE001
                samples.append({"wall": t, "replication": "unknown", "error": str(exc)[:200]})
            done.wait(1.0)

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    records = _clients(ci, expected, queries, args, args.stream_s)
    killed = _wait_file(work / f"killed{n}.json", 60)
    deadline = time.monotonic() + args.recover_s
    while time.monotonic() < deadline:  # full again after the kill: by itself, bounded
        after = [s for s in samples if s["wall"] > killed["wall"]]
        if any(s["replication"] == "degraded" for s in after) and \
                after[-1]["replication"] == "full":
            break
        time.sleep(1.0)
    done.set()
    mon.join(timeout=10)
    after = [s for s in samples if s["wall"] > killed["wall"]]
    degraded = [s["wall"] for s in after if s["replication"] == "degraded"]
    full_again = next((s["wall"] for s in after if degraded and s["wall"] > degraded[0]
                       and s["replication"] == "full"), None)
    final = after[-1].get("placement") or [] if after else []
    return {"killed": killed, "records": records, "samples": samples,
            "generations_match": bool(final) and all(
                r["generation"] == ci.pins[r["shard"]] for r in final if r["state"] == "up"),
            "update_found": _update_found(ci),
            "queries": len(records), "errors": sum(r["error"] is not None for r in records),
            "wrong": sum(not r["same"] and r["error"] is None for r in records),
            "detected_s": degraded[0] - killed["wall"] if degraded else None,
            "full_replication_s": None if full_again is None else full_again - killed["wall"],
            "final_placement": after[-1].get("placement") if after else None,
            "latency_after_kill_ms": _pct([r["s"] for r in records
                                           if r["wall"] >= killed["wall"]] or [0.0]),
            "load": os.getloadavg()[0]}


UPDATE = [("upd-1", "hypersonic boundary layer transition on a heated cone at mach 8"),
          ("5", "a replaced abstract: ablation of heat shields in hypersonic re-entry")]


def _update_found(ci: Any) -> bool:
    """Whether the added document is the top hit of its own text (the update is served)."""
    h = ci.search_bm25([UPDATE[0][1]], 1)[0]
    return bool(len(h.rows)) and ci.ids[int(h.rows[0])] == UPDATE[0][0]


def updated(ci: Any, single_dir: str, work: Path) -> tuple[Any, Any]:
    """Upsert :data:`UPDATE` into the cluster (acknowledged: committed on the owning shards,
    every replica refreshed) and into a copy of the one index; both."""
    import shutil

    from intentrank.index import Index
    from intentrank.index.update import upsert
    from intentrank.types import Document

    docs = [Document(i, t) for i, t in UPDATE]
    shutil.copytree(single_dir, work / "single-updated")
    upsert(work / "single-updated", docs)
    return ci.upsert(docs), Index(work / "single-updated")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--single", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--latency-queries", type=int, default=150)
    p.add_argument("--throughput-s", type=float, default=8.0)
    p.add_argument("--stream-s", type=float, default=45.0)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--slow-s", type=float, default=20.0)
    p.add_argument("--recover-s", type=float, default=240.0)
    p.add_argument("--hedge-ms", type=float, default=300.0)
    args = p.parse_args()
    work = Path(args.work)

    from intentrank.index import Index
    from intentrank.scale.coordinator import ClusterIndex

    queries = [json.loads(x)["text"] for x in Path(args.queries).read_text().splitlines()]
    t0 = time.monotonic()
    ci = ClusterIndex.open(args.cluster, address=args.address, hedge_s=args.hedge_ms / 1000,
                           timeout_s=30.0, repair_every_s=2.0)
    opened_s = time.monotonic() - t0
    single = Index(args.single)
    expected = {q: tuple(x.tolist() for x in single.search_bm25([q], args.k)[0])
                for q in queries}
    m = measure(ci, single, queries, args)
    _write(work / "measure.json", {"open_s": opened_s, **m, "shards": ci.manifest.shards,
                                   "replicas": len(ci.pool.shards[0]), "k": args.k,
                                   "hedge_ms": args.hedge_ms})
    _write(work / "slow.json", slow(ci, expected, queries, args, work))
    ci, single = updated(ci, args.single, work)  # then a host is lost: it must survive
    expected = {q: tuple(x.tolist() for x in single.search_bm25([q], args.k)[0])
                for q in [*queries, UPDATE[0][1]]}
    queries = [*queries, UPDATE[0][1]]
    _write(work / "stream1.json", stream(ci, expected, queries, args, 1, work))
    _wait_file(work / "restored.json", 400)
    _write(work / "stream2.json", stream(ci, expected, queries, args, 2, work))
    ci.close()


if __name__ == "__main__":
    main()
