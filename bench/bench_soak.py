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
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("INTENTRANK_DATA", ROOT.parent / "shared" / "data"))
REPLY = "The passages describe how the flow behaves [1]."
MIX = (("search", 0.60), ("rerank", 0.25), ("answer", 0.15))
MAX_OUTSTANDING = 64  # open-loop, but bounded: beyond this a send is counted as skipped


class _Scripted(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that always gives :data:`REPLY`."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"id": "s", "object": "chat.completion", "created": 0,
                           "model": "scripted",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": REPLY}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                     "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    out = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    out["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + out.get("PYTHONPATH", "")
    return out


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "intentrank.cli", *args]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def load_corpus(limit: int | None = None) -> list[dict]:
    rows = [json.loads(line) for line in (DATA / "cranfield" / "corpus.jsonl").open()]
    return rows[:limit] if limit else rows


def queries() -> list[str]:
    return [json.loads(line)["text"] for line in
            (DATA / "cranfield" / "queries.jsonl").open()][:60]


class Load:
    """The open-loop client: one task per request at its scheduled time."""

    def __init__(self, url: str, rate: float) -> None:
        self.url, self.rate = url, rate
        self.records: list[dict] = []
        self.outstanding = 0
        self.skipped = 0
        self.qs = queries()
        docs = load_corpus(400)
        self.candidates = [[{"id": d["_id"], "text": d["text"][:1500]}
                            for d in docs[i * 10:(i + 1) * 10]] for i in range(40)]

    def request(self, n: int) -> tuple[str, str, dict, str]:
        """The n-th request: (kind, path, body, key) -- deterministic in n."""
        r = (n * 0.6180339887) % 1.0  # a low-discrepancy walk through the mix
        q = self.qs[n % len(self.qs)]
        if r < MIX[0][1]:
            pipe = "bm25" if n % 2 else "rrf"
            return "search", "/search", {"query": q, "pipeline": pipe, "top_k": 10}, \
                f"{pipe}|{n % len(self.qs)}"
        if r < MIX[0][1] + MIX[1][1]:
            c = n % len(self.candidates)
            return "rerank", "/rerank", {"query": q, "pipeline": "cross_encoder",
                                         "candidates": self.candidates[c]}, f"rr|{c}"
        return "answer", "/answer", {"query": q, "pipeline": "answer", "top_k": 5}, \
            f"ans|{n % len(self.qs)}"

    async def one(self, client: httpx.AsyncClient, n: int, t0: float) -> None:
        kind, path, body, key = self.request(n)
        rid = f"soak-{n}"
        rec = {"n": n, "kind": kind, "key": key, "rid": rid, "sent": time.monotonic() - t0}
        self.outstanding += 1
        try:
            resp = await client.post(self.url + path, json=body,
                                     headers={"X-Request-Id": rid}, timeout=120)
            rec["status"] = resp.status_code
            if resp.status_code == 200:
                out = resp.json()
                rec["generation"] = out.get("generation")
                rec["docs"] = [r["doc_id"] for r in out.get("results", [])]
        except httpx.HTTPError as exc:
            rec["status"] = 0
            rec["error"] = type(exc).__name__
        finally:
            self.outstanding -= 1
            rec["latency"] = time.monotonic() - t0 - rec["sent"]
            self.records.append(rec)

    async def run(self, seconds: float, t0: float, start_n: int = 0,
                  stop: threading.Event | None = None, rate: float | None = None) -> int:
        rate = rate or self.rate
        tasks, n = set(), start_n
        limits = httpx.Limits(max_connections=MAX_OUTSTANDING, max_keepalive_connections=16)
        async with httpx.AsyncClient(limits=limits) as client:
            begin = time.monotonic()
            while time.monotonic() - begin < seconds and not (stop and stop.is_set()):
                due = begin + (n - start_n) / rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
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


def rss_sampler(pid: int, samples: list[tuple[float, int]], t0: float,
                stop: threading.Event) -> None:
    proc = psutil.Process(pid)
    while not stop.wait(5.0):
        try:
            samples.append((time.monotonic() - t0, proc.memory_info().rss))
        except psutil.Error:
            return


def health_poller(url: str, seen: list[tuple[float, dict]], t0: float,
                  stop: threading.Event) -> None:
    last = None
    while not stop.wait(1.0):
        try:
            h = httpx.get(url + "/health", timeout=10).json()
        except (httpx.HTTPError, ValueError):
            continue
        state = (h.get("generations"), h.get("reloads"))
        if state != last:
            seen.append((time.monotonic() - t0, h))
            last = state


def per_minute(records: list[dict], rss: list[tuple[float, int]]) -> list[dict]:
    rows = []
    minutes = int(max((r["sent"] for r in records), default=0) // 60) + 1
    for m in range(minutes):
        rs = [r for r in records if m * 60 <= r["sent"] < (m + 1) * 60]
        ok = [r["latency"] * 1000 for r in rs if r["status"] == 200]
        mem = [b for t, b in rss if m * 60 <= t < (m + 1) * 60]
        rows.append({"minute": m + 1, "requests": len(rs), "ok": len(ok),
                     "5xx": sum(1 for r in rs if r["status"] >= 500),
                     "failed": sum(1 for r in rs if r["status"] != 200),
                     "p50_ms": pct(ok, 0.5), "p95_ms": pct(ok, 0.95), "p99_ms": pct(ok, 0.99),
                     "rss_mb": (max(mem) / 2**20) if mem else float("nan")})
    return rows


def consistency(records: list[dict]) -> dict:
    """Per (request key, generation): how many distinct result lists (1 = consistent)."""
    groups: dict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)
    for r in records:
        if r["status"] == 200 and r["kind"] == "search":
            groups[(r["key"], r.get("generation"))].add(tuple(r["docs"]))
    mixed = {f"{k}@{g}": len(v) for (k, g), v in groups.items() if len(v) > 1}
    gens = sorted({g for _, g in groups})
    by_key: dict[str, dict[str, tuple[str, ...]]] = defaultdict(dict)
    for (k, g), v in groups.items():
        by_key[k][g] = next(iter(v))
    differ = sum(1 for k, gs in by_key.items() if len(set(gs.values())) > 1)
    both = sum(1 for gs in by_key.values() if len(gs) > 1)
    return {"generations": gens, "inconsistent_groups": mixed,
            "keys_seen_in_both": both, "keys_differing_between_generations": differ}


def main() -> None:  # noqa: PLR0915
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=22.0)
    ap.add_argument("--warmup-minutes", type=float, default=2.0)
    ap.add_argument("--rate", type=float, default=0.5, help="requests per second")
    ap.add_argument("--rebuild-at", type=float, default=660.0, help="seconds into the soak")
    ap.add_argument("--sigterm-load-s", type=float, default=8.0)
    ap.add_argument("--sigterm-rate", type=float, default=4.0,
                    help="requests per second around SIGTERM (so some are in flight)")
    ap.add_argument("--work", type=Path, default=ROOT / ".cache" / "soak")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "soak_results.json")
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    index_dir, access = work / "index", work / "access.log"
    access.unlink(missing_ok=True)
    variant = work / "variant"
    (variant / "qrels").mkdir(parents=True, exist_ok=True)
    (variant / "corpus.jsonl").write_text(
        "".join(json.dumps(d) + "\n" for d in load_corpus()[200:]))
    for f in ("queries.jsonl",):
        if not (variant / f).exists():
            (variant / f).symlink_to(DATA / "cranfield" / f)
    t_build = time.monotonic()
    subprocess.run(cli("index", str(DATA / "cranfield"), str(index_dir), "--legs", "bm25,dense",
                       "--overwrite"), env=env(), check=True, timeout=1800)
    build_s = time.monotonic() - t_build

    llm = ThreadingHTTPServer(("127.0.0.1", free_port()), _Scripted)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (work / "server.err").open("w")
    server = subprocess.Popen(
        cli("--llm", f"openai:scripted@http://127.0.0.1:{llm.server_address[1]}/v1", "serve",
            "--index", f"cranfield={index_dir}", "-p", "bm25", "-p", "rrf", "-p", "answer",
            "--no-keys", "--watch-index", "1", "--access-log", str(access),
            "--port", str(port), "--workers", "2", "--queue-limit", "64", "--timeout", "120",
            "--drain", "60"), env=env(), stdout=log, stderr=subprocess.STDOUT)
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "machine": f"{os.cpu_count()} cores, {psutil.virtual_memory().total >> 30} "
                               f"GiB (shared with other work)",
                    "rate_per_s": args.rate, "mix": dict(MIX), "index_build_s": build_s}
    try:
        for _ in range(600):  # bounded: 10 minutes to load
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None:
                raise RuntimeError(f"the server exited {server.returncode}: "
                                   f"{(work / 'server.err').read_text()[-2000:]}")
            time.sleep(1)
        else:
            raise RuntimeError("the server did not come up in 10 minutes")
        load = Load(url, args.rate)
        stop = threading.Event()
        rss: list[tuple[float, int]] = []
        seen: list[tuple[float, dict]] = []
        t0 = time.monotonic()
        threading.Thread(target=rss_sampler, args=(server.pid, rss, t0, stop),
                         daemon=True).start()
        threading.Thread(target=health_poller, args=(url, seen, t0, stop), daemon=True).start()
        rebuild: dict = {}

        def do_rebuild() -> None:
            if stop.wait(args.rebuild_at):
                return
            start = time.monotonic()
            out = subprocess.run(cli("index", str(variant), str(index_dir), "--legs",
                                     "bm25,dense", "--overwrite"), env=env(),
                                 capture_output=True, text=True, timeout=1800)
            rebuild.update(started_s=start - t0, finished_s=time.monotonic() - t0,
                           exit=out.returncode, tail=out.stderr[-500:])

        rebuilder = threading.Thread(target=do_rebuild, daemon=True)
        rebuilder.start()
        n = asyncio.run(load.run(args.minutes * 60, t0))
        rebuilder.join(timeout=1800)

        # SIGTERM under load
        stop_load = threading.Event()
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
        asyncio.run(load.run(args.sigterm_load_s, t0, start_n=n, stop=stop_load,
                             rate=args.sigterm_rate))
        try:
            code = server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            code = None
        term["exit"] = code
        term["exited_s"] = time.monotonic() - t0
        stop.set()
        tail = load.records[before:]
        # sent over 0.2 s before the signal: admitted, so must finish 200; in the last
        # 0.2 s either may happen (the request can reach the server after the signal)
        sent_before = [r for r in tail if r["sent"] < term["at_s"] - 0.2]
        sent_after = [r for r in tail if r["sent"] >= term["at_s"]]
        term["in_flight_at_signal"] = sum(1 for r in sent_before
                                          if r["sent"] + r["latency"] > term["at_s"])
        term["in_flight_or_before"] = {str(s): sum(1 for r in sent_before if r["status"] == s)
                                       for s in sorted({r["status"] for r in sent_before})}
        term["after"] = {str(s): sum(1 for r in sent_after if r["status"] == s)
                         for s in sorted({r["status"] for r in sent_after})}
        term["after_errors"] = {e: sum(1 for r in sent_after if r.get("error") == e)
                                for e in sorted({r["error"] for r in sent_after
                                                 if "error" in r})}
        drained = [r["ts"] for r in map(json.loads, access.read_text().splitlines())
                   if r.get("status") == 503]
        term["last_503_logged"] = drained[-1] if drained else None
        logged = {}
        for line in access.read_text().splitlines():
            rec = json.loads(line)
            if "request_id" in rec:
                logged[rec["request_id"]] = rec.get("status")
        answered = [r for r in load.records if r["status"] != 0]
        term["responses_missing_from_log"] = sum(1 for r in answered if r["rid"] not in logged)
        term["log_status_mismatch"] = sum(1 for r in answered
                                          if r["rid"] in logged and logged[r["rid"]]
                                          != r["status"])
        soak = [r for r in load.records[:before]]
        warm = args.warmup_minutes * 60
        steady_rss = [b for t, b in rss if t >= warm]
        after_warm = [b for t, b in rss if warm <= t < warm + 60] or steady_rss[:1]
        reloads = [r for r in (json.loads(x) for x in access.read_text().splitlines())
                   if r.get("event", "").startswith("index_reload")]
        switch = next(((t, h) for t, h in seen if h.get("reloads")), None)
        result.update(
            seconds=args.minutes * 60, requests=len(soak), skipped=load.skipped,
            by_kind={k: sum(1 for r in soak if r["kind"] == k) for k, _ in MIX},
            status={str(s): sum(1 for r in soak if r["status"] == s)
                    for s in sorted({r["status"] for r in soak})},
            minutes=per_minute(soak, rss),
            overall={"p50_ms": pct([r["latency"] * 1000 for r in soak
                                    if r["status"] == 200], 0.5),
                     "p95_ms": pct([r["latency"] * 1000 for r in soak
                                    if r["status"] == 200], 0.95),
                     "p99_ms": pct([r["latency"] * 1000 for r in soak
                                    if r["status"] == 200], 0.99)},
            rss_after_warmup_mb=statistics.median(after_warm) / 2**20 if after_warm else None,
            rss_end_mb=statistics.median([b for t, b in rss][-12:]) / 2**20 if rss else None,
            rss_max_after_warmup_mb=max(steady_rss) / 2**20 if steady_rss else None,
            rebuild=rebuild, reload_log=reloads,
            health_switch={"at_s": switch[0], "generations": switch[1]["generations"],
                           "reloads": switch[1]["reloads"]} if switch else None,
            health_states=[{"at_s": t, "generations": h.get("generations"),
                            "reloads": h.get("reloads")} for t, h in seen],
            consistency=consistency(soak), sigterm=term)
        if result["rss_after_warmup_mb"]:
            result["rss_growth_pct"] = 100 * (result["rss_end_mb"]
                                              / result["rss_after_warmup_mb"] - 1)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        llm.shutdown()
        log.close()
    result["problems"] = problems(result)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(to_markdown(result))
    print("problems: " + ("; ".join(result["problems"]) or "none"))


def problems(r: dict, max_rss_growth_pct: float = 5.0) -> list[str]:
    """What the soak's result breaks of its goals (none: it passed): zero 5xx and no other
    failure, RSS growth after warm-up within ``max_rss_growth_pct``, the rebuild committed
    and switched to (log and /health), one generation per response with identical results,
    and the SIGTERM drain (in-flight 200, new 503 or refused, exit 0, the log complete)."""
    out = []
    bad = {k: v for k, v in r["status"].items() if k != "200"}
    if bad:
        out.append(f"failed requests by status: {bad}")
    if r.get("skipped"):
        out.append(f"{r['skipped']} requests not sent ({MAX_OUTSTANDING} outstanding)")
    if r.get("rss_growth_pct") is None or r["rss_growth_pct"] > max_rss_growth_pct:
        out.append(f"RSS growth after warm-up {r.get('rss_growth_pct')} % "
                   f"(limit {max_rss_growth_pct} %)")
    rebuild = r.get("rebuild") or {}
    if rebuild.get("exit") != 0:
        out.append(f"the rebuild did not finish: {rebuild}")
    if len(r.get("reload_log", [])) != 1 or r["reload_log"][0].get("event") != "index_reload":
        out.append(f"the access log should have one index_reload line: {r.get('reload_log')}")
    if not r.get("health_switch"):
        out.append("/health never showed the new generation")
    c = r["consistency"]
    if c["inconsistent_groups"]:
        out.append(f"responses of one generation differ: {c['inconsistent_groups']}")
    if len(c["generations"]) != 2 or not c["keys_differing_between_generations"]:
        out.append(f"both generations should answer, differently: {c}")
    t = r["sigterm"]
    if t.get("exit") != 0:
        out.append(f"exit status after SIGTERM: {t.get('exit')}")
    if not t.get("in_flight_at_signal"):
        out.append("no request was in flight at SIGTERM: the drain was not exercised")
    if set(t["in_flight_or_before"]) - {"200"}:
        out.append(f"requests sent before SIGTERM: {t['in_flight_or_before']}")
    if set(t["after"]) - {"503", "0"} or "503" not in t["after"]:
        out.append(f"requests sent after SIGTERM: {t['after']} (want 503, or refused "
                   f"once the process is gone)")
    if t["responses_missing_from_log"] or t["log_status_mismatch"]:
        out.append(f"access log: {t['responses_missing_from_log']} responses missing, "
                   f"{t['log_status_mismatch']} with another status")
    return out


def to_markdown(r: dict) -> str:
    lines = ["| minute | requests | 200 | 5xx | other failures | p50 ms | p95 ms | p99 ms | "
             "server RSS MB |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in r["minutes"]:
        lines.append(f"| {m['minute']} | {m['requests']} | {m['ok']} | {m['5xx']} | "
                     f"{m['failed'] - m['5xx']} | {m['p50_ms']:.0f} | {m['p95_ms']:.0f} | "
                     f"{m['p99_ms']:.0f} | {m['rss_mb']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
