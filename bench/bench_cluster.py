"""The cluster index across namespace hosts (issue 57): ``run`` runs
tests/test_faults_shards.py (root; it writes $INTENTRANK_CLUSTER_OUT =
bench/cluster_results.json) and prints the tables; ``table FILE`` prints the Markdown tables
of a result file. docs/scale.md "Across hosts" quotes them.

    python bench/bench_cluster.py run
    python bench/bench_cluster.py table bench/cluster_results.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from lib.results import ROOT, cells, table

RESULTS = ROOT / "bench" / "cluster_results.json"


def run() -> None:
    env = {**os.environ, "INTENTRANK_CLUSTER_OUT": str(RESULTS),
           "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-m", "cluster",
                    "tests/test_faults_shards.py", "-p", "no:cacheprovider"], cwd=ROOT,
                   env=env, check=True, timeout=1800)
    tables(RESULTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    sub.add_parser("run", help="run the test on namespace hosts, then print the tables")
    table_parser = sub.add_parser("table", help="print the tables of a result file")
    table_parser.add_argument("path", type=Path)
    args = parser.parse_args()
    if args.part == "run":
        run()
    else:
        tables(args.path)


def tables(path: Path) -> None:
    r = json.loads(path.read_text())
    m = r["measure"]
    print(f"- command: `{r['command']}`\n- machine: {r['machine']}\n- date: {r['date']}\n"
          f"- load average: {m['load_before']:.1f} before the measurements, "
          f"{m['load_after']:.1f} after, {r['load_average_end']:.1f} at the end\n")
    names = {"one_index": "one index, in process",
             "in_process_shards": f"{m['shards']} shards, in process (two-phase BM25, merge)",
             "cluster": f"{m['shards']} shards x {m['replicas']} replicas on Ray actors across "
                        f"3 hosts"}
    rows = [[names[k], *cells(v, "n", "mean:.2f", "p50:.2f", "p95:.2f", "p99:.2f")]
            for k, v in m["latency_ms"].items()]
    print(table(["BM25 top 10, one query at a time", "queries", "mean ms", "p50", "p95",
                 "p99"], rows, "|---|---:|---:|---:|---:|---:|") + "\n")
    print(table(["clients", "queries/s (cluster)"],
                [[c, f"{q:.1f}"] for c, q in m["throughput"].items()], "|---:|---:|") + "\n")
    if sl := r.get("slow"):
        st = sl["stopped"]
        print(table(["replica stopped (SIGSTOP)", "hedge delay", "queries while stopped",
                     "failed", "wrong", "p50 / p99 / max ms while stopped"],
                    [[f"shard 0 replica 0 for {st['cont'] - st['stop']:.0f} s",
                      f"{st['hedge_ms']:.0f} ms", sl["during"], sl["errors"], sl["wrong"],
                      f"{sl['latency_during_ms']['p50']:.0f} / "
                      f"{sl['latency_during_ms']['p99']:.0f} / {sl['max_during_ms']:.0f}"]],
                    "|---|---:|---:|---:|---:|---:|") + "\n")
    rows = []
    for key in ("stream1", "stream2"):
        s = r[key]
        k = s["killed"]
        rows.append([key[-1], f"{k['host']} ({k['replicas_held']} replicas, {k['pids']} "
                     f"processes) at {k['at_s']:.0f} s", s["queries"], s["errors"], s["wrong"],
                     f"{s['latency_after_kill_ms']['p50']:.0f} / "
                     f"{s['latency_after_kill_ms']['p99']:.0f}",
                     f"{s['detected_s']:.1f}" if s["detected_s"] is not None else "-",
                     f"{s['full_replication_s']:.1f}" if s["full_replication_s"] else "-"])
    print(table(["kill", "host SIGKILLed", "queries", "failed", "wrong", "p50 / p99 ms after",
                 "degraded seen after s", "full replication after s"], rows,
                "|---|---|---:|---:|---:|---:|---:|---:|"))


if __name__ == "__main__":
    main()
