"""Query latency per stage, in-process (each pipeline in a fresh process, ``--one``, today's
source interleaved with ``--previous``'s) and through the service, cold and warm, and peak RSS
(issue 35; what each table measures: bench/sections/latency.md). ~15 min on 2 cores:

    .venv/bin/python bench/bench_latency.py --previous 0641ffc
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lib.results import DATA, ROOT, header, log, publish_tables, table, test_texts
from lib.server import free_port, running
from lib.timing import latency_ms as percentiles

INDEX = ROOT / "indexes" / "scifact"
PIPELINES = ("bm25", "dense", "rrf", "cascade", "answer")
COMPARED = ("bm25", "dense", "rrf", "cascade")  # also run on the previous commit
WARM = {"bm25": 60, "dense": 60, "rrf": 60, "cascade": 30, "answer": 4}
CLIENTS = 8  # in the concurrent-clients table
CONVERSATION = {"turns": [{"question": "What does ALDH1 mark in breast cancer?",
                           "answer": "Stem-like tumour cells with a poor prognosis."}],
                "question": "Is its expression linked to metastasis?"}


def queries(n: int, offset: int = 0) -> list[str]:

    texts = test_texts("scifact")
    random.Random(0).shuffle(texts)
    return texts[offset:offset + n]


def timings(seconds: list[float], stages: list[dict[str, float]]) -> dict[str, Any]:
    """Cold (the first query) and warm (the rest: p50/p95 ms, of each stage too) timings."""
    names = sorted({n for row in stages[1:] for n in row})
    return {"cold_ms": 1000 * seconds[0], "cold_stages": {
        n: 1000 * s for n, s in stages[0].items()}, "warm": percentiles(seconds[1:]),
        "warm_stages": {n: percentiles([row.get(n, 0.0) for row in stages[1:]])
                        for n in names}, "n": len(seconds) - 1}


def inproc_child(pipeline: str) -> dict:
    """One pipeline in this (fresh) process: build, cold query, warm queries."""
    from intentrank.index.store import Index
    from intentrank.pipelines import pipeline_from_config

    t = time.perf_counter()
    stage = pipeline_from_config(pipeline, index=Index.open(INDEX),
                                 llm_options={"cache": False})
    build_s = time.perf_counter() - t
    seconds, stages = [], []
    for q in queries(WARM[pipeline] + 1):
        t = time.perf_counter()
        trace = stage.run([q]).trace
        seconds.append(time.perf_counter() - t)
        stages.append({n: st.seconds for n, st in trace.stages.items()})
    return {"build_s": build_s, **timings(seconds, stages)}


def in_process(previous: Path | None) -> list[dict]:
    rows = []
    for pipeline in PIPELINES:
        for version, src in [("today", ROOT / "src"), *(
                [("previous", previous / "src")] if previous and pipeline in COMPARED else [])]:
            log(f"in-process {pipeline} ({version}) ...")
            proc = subprocess.run([sys.executable, __file__, "--one", pipeline],
                                  env={**os.environ, "PYTHONPATH": str(src)},
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                sys.exit(f"{pipeline} ({version}) failed:\n{proc.stderr[-3000:]}")
            rows.append({"pipeline": pipeline, "version": version,
                         **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


async def _requests(http: Any, pipeline: str, texts: list[str], clients: int = 1) -> tuple:
    """Closed loop: each client sends its next query when its last returns -> (seconds,
    stage seconds of each request, requests/s)."""
    route = "/answer" if pipeline == "answer" else "/search"
    latencies, stages, pending = [], [], list(texts)

    async def client() -> None:
        while pending:
            body = {"query": pending.pop(), "pipeline": pipeline, "top_k": 10,
                    "include_text": False}
            t = time.perf_counter()
            r = await http.post(route, json=body)
            latencies.append(time.perf_counter() - t)
            r.raise_for_status()
            stages.append({s["stage"]: s["seconds"] for s in r.json()["stages"]})

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, stages, len(texts) / (time.perf_counter() - t)


async def _service(url: str, pid: int, load_clients: int) -> dict:
    import httpx

    out: dict = {"pipelines": [], "load": []}
    async with httpx.AsyncClient(base_url=url, timeout=600,
                                 limits=httpx.Limits(max_connections=load_clients)) as http:
        for pipeline in PIPELINES:
            texts = queries(WARM[pipeline] + 1, offset=100)
            cold, cold_stages, _ = await _requests(http, pipeline, texts[:1])
            warm, warm_stages, _ = await _requests(http, pipeline, texts[1:])
            out["pipelines"].append({"pipeline": pipeline, **timings(
                cold + warm, cold_stages + warm_stages)})
        for pipeline in ("bm25", "rrf"):
            texts = queries(300)[::-1] * (2 if pipeline == "bm25" else 1)
            seconds, _, rps = await _requests(http, pipeline, texts, load_clients)
            out["load"].append({"pipeline": pipeline, "clients": load_clients,
                                "requests": len(seconds), "rps": rps, **percentiles(seconds)})
        t = time.perf_counter()
        r = await http.post("/search", json={"pipeline": "conversation", "top_k": 10,
                                             "include_text": False,
                                             "conversation": CONVERSATION})
        r.raise_for_status()
        out["conversation_ms"] = 1000 * (time.perf_counter() - t)
        out["rewrite"] = r.json()["searched"]
    status = Path(f"/proc/{pid}/status").read_text()  # the server's peak resident memory
    out["peak_rss_mib"] = int(status.split("VmHWM:")[1].split()[0]) / 1024
    return out


def through_service(load_clients: int) -> dict:
    """The service in its own process, with a fresh LLM reply cache (model files shared)."""
    cache = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    (cache / "models").symlink_to(Path(os.environ["INTENTRANK_CACHE"]) / "models")
    port = free_port()
    cmd = [sys.executable, "-m", "intentrank.cli", "serve", "--index", f"scifact={INDEX}",
           "--no-keys", "--port", str(port), "--access-log", str(cache / "access.log")]
    for p in (*PIPELINES, "conversation"):
        cmd += ["-p", p]
    with running(cmd, port, cache / "serve.log", env={**os.environ,
                                                      "INTENTRANK_CACHE": str(cache)}) as (
            server, url):
        log("service ...")
        return asyncio.run(_service(url, server.pid, load_clients))


def index_memory() -> dict:
    """`intentrank index` on SciFact in a fresh cache: peak RSS and per-leg seconds."""
    log("index ...")
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "intentrank.cli", "index", str(DATA / "scifact"),
                        f"{tmp}/index"], env={**os.environ, "INTENTRANK_CACHE": f"{tmp}/cache"},
                       check=True, capture_output=True)
        wall = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        manifest = json.loads(next(Path(f"{tmp}/index").rglob("manifest.json")).read_text())
    return {"wall_s": wall, "peak_rss_mib": max(peak, before) / 1024,
            "build_seconds": manifest.get("build_seconds", {})}


def _timed(r: dict) -> list[Any]:
    """A row's cold, warm and stage columns."""
    return [f"{r['cold_ms']:.0f}", f"{r['warm']['p50']:.1f}", f"{r['warm']['p95']:.1f}", r["n"],
            "; ".join(f"{n} {v['p50']:.1f}/{v['p95']:.1f}" for n, v in r["warm_stages"].items())]


def section(meta: dict, inproc: list[dict], service: dict, index: dict
            ) -> tuple[str, dict[str, str]]:
    """The section's header lines and tables, and the values bench/sections/latency.md reads."""
    timed = ["cold ms", "warm p50 ms", "warm p95 ms"]
    tables = [
        table(["pipeline", "version", "load s", *timed, "queries", "stages (warm p50/p95 ms)"],
              [[r["pipeline"], r["version"], f"{r['build_s']:.1f}", *_timed(r)]
               for r in inproc], "|---|---|---:|---:|---:|---:|---:|---|"),
        table(["pipeline", *timed, "requests", "stages (warm p50/p95 ms)"],
              [[r["pipeline"], *_timed(r)] for r in service["pipelines"]],
              "|---|---:|---:|---:|---:|---|"),
        table(["pipeline", "clients", "requests", "req/s", "p50 ms", "p95 ms"],
              [[r["pipeline"], r["clients"], r["requests"], f"{r['rps']:.1f}",
                f"{r['p50']:.1f}", f"{r['p95']:.1f}"] for r in service["load"]],
              "|---|---:|---:|---:|---:|---:|")]
    values = {"load": " to ".join(f"{x:.1f}" for x in meta["load"]),
              "previous": meta["previous"] or "-",
              "index.rss": f"{index['peak_rss_mib']:.0f}", "index.wall": f"{index['wall_s']:.0f}",
              "index.legs": ", ".join(f"{k} {v:.1f} s" for k, v in index["build_seconds"].items()),
              "serve.conversation": f"{service['conversation_ms'] / 1000:.1f}",
              "serve.rewrite": service["rewrite"], "serve.rss": f"{service['peak_rss_mib']:.0f}"}
    return header() + "\n" + "\n\n".join(tables), values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child: one in-process pipeline
    ap.add_argument("--previous", metavar="REV",
                    help="also run the compared pipelines on this commit's source")
    ap.add_argument("--no-write", action="store_true", help="print, do not publish")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(inproc_child(args.one)))
        return
    git = ["git", "-C", str(ROOT), "worktree"]
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "previous" if args.previous else None
        if worktree:
            added = subprocess.run([*git, "add", "--detach", "-q", str(worktree),
                                    args.previous], capture_output=True, text=True, check=False)
            if added.returncode != 0:
                ap.error(f"--previous {args.previous}: {added.stderr.strip()}")
        try:
            loads = [os.getloadavg()[0]]
            index = index_memory()
            loads.append(os.getloadavg()[0])
            inproc = in_process(worktree)
            loads.append(os.getloadavg()[0])
            service = through_service(CLIENTS)
            loads.append(os.getloadavg()[0])
        finally:
            if worktree:
                subprocess.run([*git, "remove", "--force", str(worktree)], check=False)
    meta = {"previous": args.previous, "load": [min(loads), max(loads)]}
    publish_tables("latency", *section(meta, inproc, service, index), write=not args.no_write)


if __name__ == "__main__":
    main()
