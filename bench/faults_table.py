"""Markdown tables of the cluster fault tests' measurements (tests/test_faults_cluster.py
writes them to $INTENTRANK_FAULTS_OUT; scripts/faults.sh passes bench/faults_results.json).

    .venv/bin/python bench/faults_table.py bench/faults_results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def jobs(r: dict) -> list[str]:
    lines = ["| job | single process | Ray, 3 hosts | Ray, a worker host SIGKILLed | "
             "time lost to the kill | host killed (processes) | result |",
             "|---|---:|---:|---:|---:|---|---|"]
    for key, name, same in (("encode", "`index --ray` (MiniLM)", "embeddings equal "
                             "(max abs diff {diff:.1e}), {docs} documents once each"),
                            ("eval", "`eval --ray` (BM25 -> cross-encoder)",
                             "run file and metrics equal ({lines} lines)")):
        j = r.get(key)
        if not j or "ray_whole" not in j or "ray_host_lost" not in j:
            continue
        whole, lost = j["ray_whole"], j["ray_host_lost"]
        text = same.format(diff=lost.get("max_abs_diff", 0.0), docs=lost.get("docs"),
                           lines=lost.get("lines"))
        lines.append(f"| {name} | {j.get('single_process_s', float('nan')):.0f} s | "
                     f"{whole['seconds']:.0f} s | {lost['seconds']:.0f} s (kill at "
                     f"{lost['at_s']:.0f} s) | {lost['seconds'] - whole['seconds']:+.0f} s | "
                     f"{lost['host']} ({lost['pids']}) | {text} |")
    return lines


def serve(r: dict) -> list[str]:
    s = r.get("serve")
    if not s:
        return []
    return ["| requests (rate) | host killed at | failed on the first try | failed after "
            "retries | recovered after | p50 / max latency |",
            "|---:|---|---:|---:|---:|---:|",
            f"| {s['requests']} ({s['rate_per_s']:g}/s for {s['seconds']:g} s) | "
            f"{s['killed']['host']} at {s['killed']['at_s']:.0f} s "
            f"({s['killed']['pids']} processes) | {s['failed_first_try']} | "
            f"{s['failed_after_retries']} | {s['recovered_s']:.1f} s | "
            f"{s['p50_ms']:.0f} / {s['max_ms']:.0f} ms |"]


def main() -> None:
    r = json.loads(Path(sys.argv[1]).read_text())
    print("\n".join(jobs(r)))
    print()
    print("\n".join(serve(r)))


if __name__ == "__main__":
    main()
