"""Load benchmark of the HTTP service on loopback: requests/s and p50/p95/p99 latency at 1,
4, 16 and 64 concurrent clients, against the same pipelines called in-process by as many
threads, in the same run (server, clients and pipelines: bench/sections/service.md).

    .venv/bin/python bench/bench_service.py            # SciFact test queries, all levels
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lib.results import ROOT, header, publish_tables, save_json, table, test_texts
from lib.server import bench_keys, free_port, load, running, serve
from lib.timing import RSSSampler
from lib.timing import latency_ms as percentiles

KEY, INDEX = "bench-key", ROOT / "indexes" / "scifact"
LEVELS = (1, 4, 16, 64)
CASCADE_CE = [
    {"fuse": {"method": "weighted", "weights": [0.50, 0.35, 0.15],
              "inputs": [{"dense": {"depth": 100}}, {"sparse": {"depth": 100}},
                         {"graph": {"depth": 100}}]}},
    {"cutoff": 100},
    {"cross_encoder": {"top_k": 100, "backend": "onnx", "max_length": 128}},
    {"cutoff": 10},
]
PIPELINES = {"bm25": "bm25", "rrf": "rrf", "cascade-ce": CASCADE_CE}
# (requests, seconds) per level: whichever ends first
BOUNDS = {"bm25": (400, 8.0), "rrf": (300, 15.0), "cascade-ce": (24, 25.0)}


def serve_child(port: int, access_log: Path) -> None:
    """The server process."""
    from intentrank.service import ServiceSettings

    serve(ServiceSettings(indexes={"scifact": INDEX}, pipelines=dict(PIPELINES),
                          keys=bench_keys(KEY), workers=2, queue_limit=32,
                          timeout_s=300,  # as service.md says
                          retry_after_s=1, access_log=access_log), port)


def _load(url: str, pipeline: str, queries: list[str], clients: int, count: int,
          seconds: float) -> dict:
    """Searches of ``queries`` in turn by ``clients`` clients; a client pauses 0.1 s on a
    503: requests, successes, requests/s, 503s, errors and latency percentiles."""
    bodies = [{"query": q, "pipeline": pipeline, "top_k": 10, "include_text": False}
              for q in queries]
    got = asyncio.run(load(url, "/search", bodies, clients, count, seconds,
                           {"Authorization": f"Bearer {KEY}"}, busy_pause=0.1))
    codes, wall = got["codes"], got["wall_s"]
    ok, total = codes.get(200, 0), sum(codes.values())
    bad = total - ok - codes.get(503, 0)
    return {"requests": total, "ok": ok, "rps": ok / wall, "wall_s": wall,
            "n503": codes.get(503, 0), "errors": bad, "codes": codes,
            "error_rate": bad / max(total, 1), **percentiles(got["latencies"])}


def _in_process(stage: Any, queries: list[str], threads: int, count: int,
                seconds: float) -> dict:
    """The same pipeline called directly by ``threads`` threads (what the service wraps)."""
    from intentrank.types import Query, Ranking, Trace

    lock, latencies, sent = threading.Lock(), [], [0]
    stop_at = time.perf_counter() + seconds

    def worker() -> None:
        while True:
            with lock:
                if sent[0] >= count or time.perf_counter() >= stop_at:
                    return
                q = queries[sent[0] % len(queries)]
                sent[0] += 1
            t = time.perf_counter()
            stage([Ranking(Query("q", q))], Trace())
            with lock:
                latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(worker) for _ in range(threads)]:
            f.result()
    wall = time.perf_counter() - start
    return {"requests": len(latencies), "rps": len(latencies) / wall, **percentiles(latencies)}


def section(results: list[dict], meta: dict) -> tuple[str, dict[str, str]]:
    """The section's header lines and table, and the values bench/sections/service.md reads."""
    rows = [[r["pipeline"], r["clients"], f"{h['rps']:.1f}", f"{h['p50']:.0f}",
             f"{h['p95']:.0f}", f"{h['p99']:.0f}", h["n503"],
             f"{h['errors']} ({100 * h['error_rate']:.1f}%)", f"{p['rps']:.1f}",
             f"{p['p50']:.0f}", f"{h['rps'] / p['rps']:.2f}", f"{r['rss_mib']:.0f}"]
            for r in results for h, p in [(r["http"], r["inproc"])]]
    goal = next(r for r in results if r["pipeline"] == "rrf" and r["clients"] == 16)
    ratio = goal["http"]["rps"] / goal["inproc"]["rps"]
    values = {"queries": str(meta["queries"]), "documents": str(meta["documents"]),
              "load_before": f"{meta['load_before']:.1f}",
              "load_after": f"{meta['load_after']:.1f}",
              "goal": f"{100 * ratio:.0f}% -> {'met' if ratio >= 0.8 else 'not met'}",
              "peak_rss": f"{meta['peak_rss_mib']:.0f}"}
    return header() + "\n" + table(
        ["pipeline", "clients", "HTTP req/s", "p50 ms", "p95 ms", "p99 ms", "503s", "errors",
         "in-process req/s", "in-process p50 ms", "HTTP / in-process", "server peak RSS MiB"],
        rows, "|---|" + "---:|" * 11), values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", nargs=2, metavar=("PORT", "LOG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.serve:
        serve_child(int(args.serve[0]), Path(args.serve[1]))
        return
    from intentrank.core.config import build_pipeline, load_config, resolve_pipeline
    from intentrank.index import Index
    from intentrank.pipelines import build_context

    queries = test_texts("scifact")
    port, load_before = free_port(), os.getloadavg()[0]
    access = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-service-{port}.jsonl"
    with running([sys.executable, __file__, "--serve", str(port), str(access)], port,
                 seconds=150) as (server, url):
        rss, results = RSSSampler(server.pid, 0.1), []
        ctx = build_context(Index.open(INDEX))  # as the service serves it (no lock)
        for name, source in PIPELINES.items():
            stage = build_pipeline(load_config(resolve_pipeline(source))["pipeline"]
                                   if isinstance(source, str) else source, ctx)
            count, seconds = BOUNDS[name]
            _in_process(stage, queries, 2, 4, 60)  # warm both sides
            _load(url, name, queries, 2, 4, 60)
            for clients in LEVELS:
                print(f"[bench] {name} x{clients}", file=sys.stderr, flush=True)
                inproc = _in_process(stage, queries, clients, count, seconds)
                mark = len(rss.samples)  # the server's peak during the HTTP load
                http = _load(url, name, queries, clients, count, seconds)
                peak = max((b for _, b in rss.samples[mark:]), default=0)
                results.append({"pipeline": name, "clients": clients, "http": http,
                                "inproc": inproc, "rss_mib": peak / 2**20})
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        rss.stop.set()
    meta = {"queries": len(queries), "documents": len(ctx.index), "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "peak_rss_mib": max(r["rss_mib"] for r in results)}
    save_json(ROOT / "runs" / "bench_service.json", {"meta": meta, "results": results})
    publish_tables("service", *section(results, meta))


if __name__ == "__main__":
    main()
