"""The soak (opt-in: ``pytest -m soak``; ``bash scripts/faults.sh --soak``): the service on
loopback under a fixed rate of mixed requests (search, rerank, answer with a scripted LLM)
for 22 minutes, its index rebuilt in the middle, SIGTERM under load at the end
(``bench/bench_soak.py``). Passes when :func:`bench_soak.problems` finds nothing: zero 5xx
and no failed request, RSS growth <= 5% after warm-up, one generation per response and the
switch in the log and /health, and a clean drain. $INTENTRANK_SOAK_OUT keeps the results
(JSON); $INTENTRANK_SOAK_ARGS adds arguments (e.g. ``--minutes 3 --rebuild-at 90``)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.soak, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def test_soak_with_a_rebuild_and_sigterm(tmp_path):
    from bench_soak import problems

    out = Path(os.environ.get("INTENTRANK_SOAK_OUT") or tmp_path / "soak.json")
    args = shlex.split(os.environ.get("INTENTRANK_SOAK_ARGS", ""))
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_soak.py"), "--out",
                          str(out), "--work", str(tmp_path / "work"), *args],
                         capture_output=True, text=True, timeout=3 * 3600)
    assert run.returncode == 0, run.stderr[-3000:]
    print(run.stdout)
    assert problems(json.loads(out.read_text())) == []
