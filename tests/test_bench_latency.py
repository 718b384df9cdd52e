"""bench/bench_latency.py refuses a --previous commit git does not know, before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_unknown_previous_commit_is_a_clear_error() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_latency.py"),
                           "--previous", "no-such-rev", "--no-write"], capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 2
    assert "--previous no-such-rev:" in proc.stderr and "Traceback" not in proc.stderr
    assert "[bench] index" not in proc.stderr  # refused before the first measurement
