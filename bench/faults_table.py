"""Markdown tables of the cluster fault tests' measurements (tests/test_faults_cluster.py
writes them to $INTENTRANK_FAULTS_OUT; scripts/faults.sh passes bench/faults_results.json).

    .venv/bin/python bench/faults_table.py bench/faults_results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lib.results import table

JOBS = {"encode": ("`index --ray` (MiniLM)", "embeddings equal (max abs diff {max_abs_diff:.1e}), "
                   "{docs} documents once each"),
        "eval": ("`eval --ray` (BM25 -> cross-encoder)", "run file and metrics equal ({lines} "
                 "lines)")}


def main() -> None:
    r = json.loads(Path(sys.argv[1]).read_text())
    rows = []
    for key, (name, text) in JOBS.items():
        if {"ray_whole", "ray_host_lost"} <= set(j := r.get(key, {})):
            whole, lost = j["ray_whole"]["seconds"], j["ray_host_lost"]
            rows.append([name, f"{j.get('single_process_s', float('nan')):.0f} s",
                         f"{whole:.0f} s",
                         f"{lost['seconds']:.0f} s (kill at {lost['at_s']:.0f} s)",
                         f"{lost['seconds'] - whole:+.0f} s", f"{lost['host']} ({lost['pids']})",
                         text.format(**lost)])
    print(table(["job", "single process", "Ray, 3 hosts", "Ray, a worker host SIGKILLed",
                 "time lost to the kill", "host killed (processes)", "result"], rows,
                "|---|---:|---:|---:|---:|---|---|") + "\n")
    if s := r.get("serve"):
        k = s["killed"]
        print(table(["requests (rate)", "host killed at", "failed on the first try",
                     "failed after retries", "recovered after", "p50 / max latency"],
                    [[f"{s['requests']} ({s['rate_per_s']:g}/s for {s['seconds']:g} s)",
                      f"{k['host']} at {k['at_s']:.0f} s ({k['pids']} processes)",
                      s["failed_first_try"], s["failed_after_retries"],
                      f"{s['recovered_s']:.1f} s", f"{s['p50_ms']:.0f} / {s['max_ms']:.0f} ms"]],
                    "|---:|---|---:|---:|---:|---:|"))


if __name__ == "__main__":
    main()
