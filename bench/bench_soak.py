"""Soak of the HTTP service on loopback: a fixed rate of mixed requests for many minutes, an
index rebuild in the middle of it, and SIGTERM under load at the end.

    .venv/bin/python bench/bench_soak.py                         # 22 min (2 warm-up + 20)
    .venv/bin/python bench/bench_soak.py --minutes 3 --rebuild-at 90   # a smoke run

What runs and what is checked: docs/reliability.md, "The service under a 22-minute load".
Results: bench/soak_results.json and the per-minute table on stdout, then the goals it
missed (:func:`problems`; "none"); ``pytest -m soak tests/test_soak.py`` is the pass/fail form.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import psutil

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / p) for p in ("bench", "tests")]
import fake_openai  # the scripted OpenAI-compatible LLM of the tests
from lib.results import DATA, ROOT, table
from lib.server import free_port, start
from lib.timing import RSSSampler, percentiles

fake_openai.MAX_REQUESTS = sys.maxsize  # its cap guards tests; a soak is long
REPLY = "The passages describe how the flow behaves [1]."
MIX = (("search", 0.60), ("rerank", 0.25), ("answer", 0.15))
MAX_OUTSTANDING = 64  # open-loop, but bounded: beyond this a send is counted as skipped
RATE, WARMUP_S = 0.5, 120.0  # requests per second; RSS growth is counted after the warm-up
SIGTERM_RATE, SIGTERM_LOAD_S = 4.0, 8.0  # the load around SIGTERM (so some are in flight)
CRANFIELD = DATA / "cranfield"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
           TOKENIZERS_PARALLELISM="false",
           PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
CLI = [sys.executable, "-m", "intentrank.cli"]


def index(src: Path, out: Path, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "index", str(src), str(out), "--legs", "bm25,dense",
                           "--overwrite"], env=ENV, timeout=1800, **kw)


def corpus() -> list[dict]:
    return [json.loads(line) for line in (CRANFIELD / "corpus.jsonl").open()]


def _ms(values: list[float]) -> dict[str, float]:
    """p50, p95 and p99 of latencies in ms (the nearest rank), keyed ``p50_ms`` ..."""
    return {f"{k}_ms": v for k, v in percentiles(values, (50, 95, 99), method="nearest").items()}


def counts(values: object) -> dict[str, int]:
    c = Counter(values)
    return {str(k): c[k] for k in sorted(c)}


class Load:
    """The open-loop client: one task per request at its scheduled time."""

    def __init__(self, url: str) -> None:
        self.url, self.records, self.outstanding, self.skipped = url, [], 0, 0
        self.qs = [json.loads(x)["text"] for x in (CRANFIELD / "queries.jsonl").open()][:60]
        docs = corpus()[:400]
        self.candidates = [[{"id": d["_id"], "text": d["text"][:1500]} for d in docs[i:i + 10]]
                           for i in range(0, 400, 10)]

    def request(self, n: int) -> tuple[str, str, dict, str]:
        """The n-th request: (kind, path, body, key) -- deterministic in n."""
        r = (n * 0.6180339887) % 1.0  # a low-discrepancy walk through the mix
        i = n % len(self.qs)
        q = self.qs[i]
        if r < MIX[0][1]:
            pipe = "bm25" if n % 2 else "rrf"
            return "search", "/search", {"query": q, "pipeline": pipe, "top_k": 10}, \
                f"{pipe}|{i}"
        if r < MIX[0][1] + MIX[1][1]:
            c = n % len(self.candidates)
            return "rerank", "/rerank", {"query": q, "pipeline": "cross_encoder",
                                         "candidates": self.candidates[c]}, f"rr|{c}"
        return "answer", "/answer", {"query": q, "pipeline": "answer", "top_k": 5}, f"ans|{i}"

    async def one(self, client: httpx.AsyncClient, n: int, t0: float) -> None:
        kind, path, body, key = self.request(n)
        rec = {"n": n, "kind": kind, "key": key, "rid": f"soak-{n}", "sent": time.monotonic() - t0}
        self.outstanding += 1
        try:
            resp = await client.post(self.url + path, json=body,
                                     headers={"X-Request-Id": rec["rid"]}, timeout=120)
            rec["status"] = resp.status_code
            if resp.status_code == 200:
                out = resp.json()
                rec["generation"] = out.get("generation")
                rec["docs"] = [r["doc_id"] for r in out.get("results", [])]
        except httpx.HTTPError as exc:
            rec |= {"status": 0, "error": type(exc).__name__}
        finally:
            self.outstanding -= 1
            rec["latency"] = time.monotonic() - t0 - rec["sent"]
            self.records.append(rec)

    async def run(self, seconds: float, t0: float, rate: float, start_n: int = 0) -> int:
        tasks, n = set(), start_n
        limits = httpx.Limits(max_connections=MAX_OUTSTANDING, max_keepalive_connections=16)
        async with httpx.AsyncClient(limits=limits) as client:
            begin = time.monotonic()
            while time.monotonic() - begin < seconds:
                await asyncio.sleep(max(0.0, begin + (n - start_n) / rate - time.monotonic()))
                if self.outstanding >= MAX_OUTSTANDING:
                    self.skipped += 1
                else:
                    task = asyncio.create_task(self.one(client, n, t0))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                n += 1
            if tasks:
                await asyncio.wait(tasks, timeout=180)
        return n


def poll_health(url: str, seen: list[tuple[float, dict]], t0: float,
                stop: threading.Event) -> None:
    """Each change of /health's (generations, reloads), with its time."""
    while not stop.wait(1.0):
        try:
            h = httpx.get(url + "/health", timeout=10).json()
        except (httpx.HTTPError, ValueError):
            continue
        if not seen or (h.get("generations"), h.get("reloads")) != (
                seen[-1][1].get("generations"), seen[-1][1].get("reloads")):
            seen.append((time.monotonic() - t0, h))


def per_minute(records: list[dict], rss: list[tuple[float, int]]) -> list[dict]:
    rows = []
    for m in range(int(max((r["sent"] for r in records), default=0) // 60) + 1):
        rs = [r for r in records if m * 60 <= r["sent"] < (m + 1) * 60]
        ok = [r["latency"] * 1000 for r in rs if r["status"] == 200]
        mem = [b for t, b in rss if m * 60 <= t < (m + 1) * 60]
        rows.append({"minute": m + 1, "requests": len(rs), "ok": len(ok),
                     "5xx": sum(r["status"] >= 500 for r in rs),
                     "failed": sum(r["status"] != 200 for r in rs),
                     **_ms(ok),
                     "rss_mb": (max(mem) / 2**20) if mem else float("nan")})
    return rows


def consistency(records: list[dict]) -> dict:
    """Per (request key, generation): how many distinct result lists (1 = consistent)."""
    groups: dict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)
    for r in records:
        if r["status"] == 200 and r["kind"] == "search":
            groups[(r["key"], r.get("generation"))].add(tuple(r["docs"]))
    by_key: dict[str, dict[str, tuple[str, ...]]] = defaultdict(dict)
    for (k, g), v in groups.items():
        by_key[k][g] = next(iter(v))
    return {"generations": sorted({g for _, g in groups}),
            "inconsistent_groups": {f"{k}@{g}": len(v) for (k, g), v in groups.items()
                                    if len(v) > 1},
            "keys_seen_in_both": sum(len(gs) > 1 for gs in by_key.values()),
            "keys_differing_between_generations": sum(len(set(gs.values())) > 1
                                                      for gs in by_key.values())}


def sigterm(server: subprocess.Popen, load: Load, url: str, t0: float, n: int) -> dict:
    """SIGTERM once requests are in flight, at :data:`SIGTERM_RATE`; how each request ended."""
    term: dict = {}

    def terminate() -> None:  # once requests are in flight (bounded wait)
        time.sleep(1.0)
        for _ in range(200):
            try:
                if httpx.get(url + "/health", timeout=2).json()["in_flight"] >= 2:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        term["at_s"] = time.monotonic() - t0
        server.send_signal(signal.SIGTERM)

    before = len(load.records)
    threading.Thread(target=terminate, daemon=True).start()
    asyncio.run(load.run(SIGTERM_LOAD_S, t0, SIGTERM_RATE, start_n=n))
    try:
        term["exit"] = server.wait(timeout=120)
    except subprocess.TimeoutExpired:
        term["exit"] = None
    term["exited_s"] = time.monotonic() - t0
    tail = load.records[before:]
    # sent over 0.2 s before the signal: admitted, so must finish 200; in the last
    # 0.2 s either may happen (the request can reach the server after the signal)
    sent_before = [r for r in tail if r["sent"] < term["at_s"] - 0.2]
    sent_after = [r for r in tail if r["sent"] >= term["at_s"]]
    return term | {
        "in_flight_at_signal": sum(r["sent"] + r["latency"] > term["at_s"]
                                   for r in sent_before),
        "in_flight_or_before": counts(r["status"] for r in sent_before),
        "after": counts(r["status"] for r in sent_after)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=22.0)
    ap.add_argument("--rebuild-at", type=float, default=660.0, help="seconds into the soak")
    ap.add_argument("--work", type=Path, default=ROOT / ".cache" / "soak")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "soak_results.json")
    args = ap.parse_args()
    work = args.work
    index_dir, access, variant = work / "index", work / "access.log", work / "variant"
    (variant / "qrels").mkdir(parents=True, exist_ok=True)
    access.unlink(missing_ok=True)
    (variant / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus()[200:]))
    if not (variant / "queries.jsonl").exists():
        (variant / "queries.jsonl").symlink_to(CRANFIELD / "queries.jsonl")
    index(CRANFIELD, index_dir, check=True)

    llm = fake_openai.FakeOpenAI()
    llm_url, _ = llm(reply=REPLY)
    port = free_port()
    server, url = start(
        [*CLI, "--llm", f"openai:scripted@{llm_url}", "serve", "--index",
         f"cranfield={index_dir}", "-p", "bm25", "-p", "rrf", "-p", "answer", "--no-keys",
         "--watch-index", "1", "--access-log", str(access), "--port", str(port), "--workers",
         "2", "--queue-limit", "64", "--timeout", "120", "--drain", "60"],
        port, work / "server.err", 600, env=ENV)
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "machine": f"{os.cpu_count()} cores, {psutil.virtual_memory().total >> 30} "
                               f"GiB (shared with other work)",
                    "rate_per_s": RATE, "mix": dict(MIX)}
    try:
        load, stop, t0 = Load(url), threading.Event(), time.monotonic()
        rss = RSSSampler(server.pid, 5.0, t0, stop).samples
        seen: list[tuple[float, dict]] = []
        threading.Thread(target=poll_health, args=(url, seen, t0, stop), daemon=True).start()
        rebuild: dict = {}

        def do_rebuild() -> None:
            start = time.monotonic() - t0
            out = index(variant, index_dir, capture_output=True, text=True)
            rebuild.update(started_s=start, finished_s=time.monotonic() - t0,
                           exit=out.returncode, tail=out.stderr[-500:])

        rebuilder = threading.Timer(args.rebuild_at, do_rebuild)
        rebuilder.daemon = True
        rebuilder.start()
        n = asyncio.run(load.run(args.minutes * 60, t0, RATE))
        rebuilder.join(timeout=1800)
        soak = load.records[:]
        term = sigterm(server, load, url, t0, n)
        stop.set()
        logged = [json.loads(x) for x in access.read_text().splitlines()]
        status_of = {r["request_id"]: r.get("status") for r in logged if "request_id" in r}
        answered = [r for r in load.records if r["status"] != 0]
        term |= {"responses_missing_from_log": sum(r["rid"] not in status_of for r in answered),
                 "log_status_mismatch": sum(r["rid"] in status_of and status_of[r["rid"]]
                                            != r["status"] for r in answered)}
        steady_rss = [b for t, b in rss if t >= WARMUP_S]
        after_warm = [b for t, b in rss if WARMUP_S <= t < WARMUP_S + 60] or steady_rss[:1]
        switch = next(((t, h) for t, h in seen if h.get("reloads")), None)
        ok = [r["latency"] * 1000 for r in soak if r["status"] == 200]
        result.update(
            seconds=args.minutes * 60, requests=len(soak), skipped=load.skipped,
            by_kind={k: sum(r["kind"] == k for r in soak) for k, _ in MIX},
            status=counts(r["status"] for r in soak), minutes=per_minute(soak, rss),
            overall=_ms(ok),
            rss_after_warmup_mb=statistics.median(after_warm) / 2**20 if after_warm else None,
            rss_end_mb=statistics.median([b for t, b in rss][-12:]) / 2**20 if rss else None,
            rss_max_after_warmup_mb=max(steady_rss) / 2**20 if steady_rss else None,
            rebuild=rebuild,
            reload_log=[r for r in logged if r.get("event", "").startswith("index_reload")],
            health_switch={"at_s": switch[0], "generations": switch[1]["generations"],
                           "reloads": switch[1]["reloads"]} if switch else None,
            consistency=consistency(soak), sigterm=term)
        if result["rss_after_warmup_mb"]:
            result["rss_growth_pct"] = 100 * (result["rss_end_mb"]
                                              / result["rss_after_warmup_mb"] - 1)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        llm.close()
    result["problems"] = problems(result)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(table(["minute", "requests", "200", "5xx", "other failures", "p50 ms", "p95 ms",
                 "p99 ms", "server RSS MB"],
                [[m["minute"], m["requests"], m["ok"], m["5xx"], m["failed"] - m["5xx"],
                  *(f"{m[k]:.0f}" for k in ("p50_ms", "p95_ms", "p99_ms", "rss_mb"))]
                 for m in result["minutes"]], "|---:" * 9 + "|"))
    print("problems: " + ("; ".join(result["problems"]) or "none"))


def problems(r: dict, max_rss_growth_pct: float = 5.0) -> list[str]:
    """What the soak's result breaks of its goals (none: it passed): zero 5xx and no other
    failure, RSS growth after warm-up within ``max_rss_growth_pct``, the rebuild committed
    and switched to (log and /health), one generation per response with identical results,
    and the SIGTERM drain (in-flight 200, new 503 or refused, exit 0, the log complete)."""
    c, t, rebuild = r["consistency"], r["sigterm"], r.get("rebuild") or {}
    checks = [
        ({k: v for k, v in r["status"].items() if k != "200"},
         f"failed requests by status: {({k: v for k, v in r['status'].items() if k != '200'})}"),
        (r.get("skipped"), f"{r.get('skipped')} requests not sent ({MAX_OUTSTANDING} outstanding)"),
        (r.get("rss_growth_pct") is None or r["rss_growth_pct"] > max_rss_growth_pct,
         f"RSS growth after warm-up {r.get('rss_growth_pct')} % (limit {max_rss_growth_pct} %)"),
        (rebuild.get("exit") != 0, f"the rebuild did not finish: {rebuild}"),
        (len(r.get("reload_log", [])) != 1 or r["reload_log"][0].get("event") != "index_reload",
         f"the access log should have one index_reload line: {r.get('reload_log')}"),
        (not r.get("health_switch"), "/health never showed the new generation"),
        (c["inconsistent_groups"],
         f"responses of one generation differ: {c['inconsistent_groups']}"),
        (len(c["generations"]) != 2 or not c["keys_differing_between_generations"],
         f"both generations should answer, differently: {c}"),
        (t.get("exit") != 0, f"exit status after SIGTERM: {t.get('exit')}"),
        (not t.get("in_flight_at_signal"),
         "no request was in flight at SIGTERM: the drain was not exercised"),
        (set(t["in_flight_or_before"]) - {"200"},
         f"requests sent before SIGTERM: {t['in_flight_or_before']}"),
        (set(t["after"]) - {"503", "0"} or "503" not in t["after"],
         f"requests sent after SIGTERM: {t['after']} (want 503, or refused once the process "
         f"is gone)"),
        (t["responses_missing_from_log"] or t["log_status_mismatch"],
         f"access log: {t['responses_missing_from_log']} responses missing, "
         f"{t['log_status_mismatch']} with another status")]
    return [message for failed, message in checks if failed]


if __name__ == "__main__":
    main()
