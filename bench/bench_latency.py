"""Query latency per stage, in-process and through the service, cold and warm, and peak RSS
(issue 35). SciFact test queries (seed 0), index indexes/scifact.

    .venv/bin/python bench/bench_latency.py --previous 0641ffc    # ~15 min on 2 cores

Each in-process pipeline runs in a fresh process (``--one``), today's source interleaved with
``--previous``'s (a temporary worktree); what each table measures is in its section's text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import DATA, ROOT, free_port, header, publish_tables, table, wait_healthy

INDEX = ROOT / "indexes" / "scifact"
PIPELINES = ("bm25", "dense", "rrf", "cascade", "answer")
COMPARED = ("bm25", "dense", "rrf", "cascade")  # also run on the previous commit
WARM = {"bm25": 60, "dense": 60, "rrf": 60, "cascade": 30, "answer": 4}


def queries(n: int, offset: int = 0) -> list[str]:
    from intentrank.data.dataset import load_dataset

    texts = [q.text for q in load_dataset(DATA / "scifact").split("test")[0]]
    random.Random(0).shuffle(texts)
    return texts[offset:offset + n]


def pcts(values: list[float]) -> dict[str, float]:
    """p50 and p95 in milliseconds."""
    if len(values) < 2:
        return {"p50": 1000 * values[0], "p95": 1000 * values[0]}
    q = statistics.quantiles(values, n=20, method="inclusive")
    return {"p50": 1000 * statistics.median(values), "p95": 1000 * q[18]}


def stage_pcts(per_query: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    names = {n for row in per_query for n in row}
    return {n: pcts([row.get(n, 0.0) for row in per_query]) for n in sorted(names)}


def inproc_child(pipeline: str) -> dict:
    """One pipeline in this (fresh) process: build, cold query, warm queries."""
    from intentrank.index.store import Index
    from intentrank.pipelines import pipeline_from_config

    t = time.perf_counter()
    stage = pipeline_from_config(pipeline, index=Index.open(INDEX),
                                 llm_options={"cache": False})
    build_s = time.perf_counter() - t
    totals, stages = [], []
    for q in queries(WARM[pipeline] + 1):
        t = time.perf_counter()
        trace = stage.run([q]).trace
        totals.append(time.perf_counter() - t)
        stages.append({n: st.seconds for n, st in trace.stages.items()})
    return {"build_s": build_s, "cold_ms": 1000 * totals[0], "cold_stages": {
        n: 1000 * s for n, s in stages[0].items()}, "warm": pcts(totals[1:]),
        "warm_stages": stage_pcts(stages[1:]), "n": len(totals) - 1}


def in_process(previous: Path | None) -> list[dict]:
    rows = []
    for pipeline in PIPELINES:
        versions = [("today", ROOT / "src")]
        if previous and pipeline in COMPARED:
            versions.append(("previous", previous / "src"))
        for version, src in versions:
            print(f"[bench] in-process {pipeline} ({version}) ...", file=sys.stderr, flush=True)
            env = {**os.environ, "PYTHONPATH": str(src)}
            proc = subprocess.run([sys.executable, __file__, "--one", pipeline], env=env,
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                sys.exit(f"{pipeline} ({version}) failed:\n{proc.stderr[-3000:]}")
            rows.append({"pipeline": pipeline, "version": version,
                         **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


def _vmhwm(pid: int) -> float:
    """Peak resident memory of a live process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _requests(http, pipeline: str, texts: list[str], clients: int = 1) -> tuple:
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
            lat, st, _ = await _requests(http, pipeline, texts[:1])
            lat2, st2, _ = await _requests(http, pipeline, texts[1:])
            out["pipelines"].append({
                "pipeline": pipeline, "cold_ms": 1000 * lat[0], "cold_stages": {
                    n: 1000 * s for n, s in st[0].items()}, "warm": pcts(lat2),
                "warm_stages": stage_pcts(st2), "n": len(lat2)})
        for pipeline in ("bm25", "rrf"):
            texts = queries(300)[::-1] * (2 if pipeline == "bm25" else 1)
            lat, _, rps = await _requests(http, pipeline, texts, load_clients)
            out["load"].append({"pipeline": pipeline, "clients": load_clients,
                                "requests": len(lat), "rps": rps, **pcts(lat)})
        t = time.perf_counter()
        r = await http.post("/search", json={"pipeline": "conversation", "top_k": 10,
                                             "include_text": False, "conversation": {
            "turns": [{"question": "What does ALDH1 mark in breast cancer?",
                       "answer": "Stem-like tumour cells with a poor prognosis."}],
            "question": "Is its expression linked to metastasis?"}})
        r.raise_for_status()
        out["conversation_ms"] = 1000 * (time.perf_counter() - t)
        out["rewrite"] = r.json()["searched"]
    out["peak_rss_mib"] = _vmhwm(pid)
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
    with open(cache / "serve.log", "w") as log:
        server = subprocess.Popen(cmd, env={**os.environ, "INTENTRANK_CACHE": str(cache)},
                                  stdout=subprocess.DEVNULL, stderr=log)
        try:
            return _serve_and_measure(server, port, load_clients, cache / "serve.log")
        finally:
            server.terminate()
            server.wait(60)


def _serve_and_measure(server: subprocess.Popen, port: int, load_clients: int,
                       log: Path) -> dict:
    wait_healthy(f"http://127.0.0.1:{port}", server, 300, log)
    print("[bench] service ...", file=sys.stderr, flush=True)
    return asyncio.run(_service(f"http://127.0.0.1:{port}", server.pid, load_clients))


def index_memory() -> dict:
    """`intentrank index` on SciFact in a fresh cache: peak RSS and per-leg seconds."""
    print("[bench] index ...", file=sys.stderr, flush=True)
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


def _stages(stages: dict[str, dict[str, float]]) -> str:
    return "; ".join(f"{n} {v['p50']:.1f}/{v['p95']:.1f}" for n, v in stages.items())


def section(meta: dict, inproc: list[dict], service: dict, index: dict
            ) -> tuple[str, dict[str, str]]:
    """The latency section's header lines and tables, and the values its text
    (bench/sections/latency.md) reads."""
    tables = [
        table(["pipeline", "version", "load s", "cold ms", "warm p50 ms", "warm p95 ms",
               "queries", "stages (warm p50/p95 ms)"],
              [[r["pipeline"], r["version"], f"{r['build_s']:.1f}", f"{r['cold_ms']:.0f}",
                f"{r['warm']['p50']:.1f}", f"{r['warm']['p95']:.1f}", r["n"],
                _stages(r["warm_stages"])] for r in inproc],
              "|---|---|---:|---:|---:|---:|---:|---|"),
        table(["pipeline", "cold ms", "warm p50 ms", "warm p95 ms", "requests",
               "stages (warm p50/p95 ms)"],
              [[r["pipeline"], f"{r['cold_ms']:.0f}", f"{r['warm']['p50']:.1f}",
                f"{r['warm']['p95']:.1f}", r["n"], _stages(r["warm_stages"])]
               for r in service["pipelines"]], "|---|---:|---:|---:|---:|---|"),
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
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--no-write", action="store_true", help="print, do not publish")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(inproc_child(args.one)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        worktree = None
        if args.previous:
            worktree = Path(tmp) / "previous"
            added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach",
                                    "-q", str(worktree), args.previous], capture_output=True,
                                   text=True, check=False)
            if added.returncode != 0:
                ap.error(f"--previous {args.previous}: {added.stderr.strip()}")
        try:
            loads = [os.getloadavg()[0]]
            index = index_memory()
            loads.append(os.getloadavg()[0])
            inproc = in_process(worktree)
            loads.append(os.getloadavg()[0])
            service = through_service(args.clients)
            loads.append(os.getloadavg()[0])
        finally:
            if worktree:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(worktree)], check=False)
    meta = {"previous": args.previous, "load": [min(loads), max(loads)]}
    publish_tables("latency", *section(meta, inproc, service, index), write=not args.no_write)


if __name__ == "__main__":
    main()
