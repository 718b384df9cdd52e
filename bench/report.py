"""Helpers shared by the benchmark scripts: machine facts and docs/benchmarks.md sections
(stored as results and rendered by :mod:`intentrank.report.sections`)."""

from __future__ import annotations

import os
import platform
import shlex
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("INTENTRANK_DATA", ROOT.parent / "shared" / "data"))
# benchmarks share the project cache (trained reranker, LLM replies, embeddings) with tests
os.environ.setdefault("INTENTRANK_CACHE", str(ROOT / ".cache" / "intentrank"))


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    py = platform.python_version()
    note = os.environ.get("INTENTRANK_BENCH_MACHINE_NOTE", "")  # e.g. "shared with other jobs"
    return f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB RAM, Python {py}" + (
        f", {note}" if note else "")


def header() -> str:
    python = "python" if Path(sys.executable).name.startswith("python") else sys.executable
    cmd = " ".join(shlex.quote(a) for a in [python, *sys.argv])
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"- command: `{cmd}`\n- machine: {machine()}\n- date: {date}\n"


def write_section(name: str, markdown: str) -> None:
    """Store ``markdown`` as docs/benchmarks.md's section ``name`` (intentrank.report.sections:
    its numbers in bench/results/<name>.json, its text in bench/sections/<name>.md) and render
    it there."""
    from intentrank.report.sections import store

    if warning := store(ROOT, name, markdown):
        log(warning)


def publish_tables(name: str, markdown: str, values: dict[str, str] | None = None,
                   write: bool = True) -> None:
    """A section whose prose lives in bench/sections/<name>.md: store the header lines and
    tables of ``markdown`` with the ``values`` its prose reads (``{{value NAME}}``), render
    the section into docs/benchmarks.md and print it; without ``write``, print ``markdown``
    and ``values`` only."""
    from intentrank.report.sections import store_tables

    print(store_tables(ROOT, name, markdown, values) if write else "\n".join(
        [markdown, *(f"- {k}: {v}" for k, v in (values or {}).items())]))


def table(header: list[str], rows: Any, rule: str = "") -> str:
    """A Markdown table: ``header``, ``rule`` (default ``|---|`` a column) and ``rows`` (cells
    of any type, as ``str`` gives them)."""
    from intentrank.report.sections import table_markdown

    return table_markdown({"header": header, "rule": rule or "|" + "---|" * len(header),
                           "rows": [[str(c) for c in r] for r in rows]})


def p_value(a: dict[str, float], b: dict[str, float], metric: str = "nDCG@10") -> str:
    """The paired randomization p of ``b`` against ``a`` (per-query scores), as the tables
    print it (three decimals)."""
    from intentrank.measures.significance import paired_test

    return f"{paired_test(a, b, metric).p_randomization:.3f}"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: Any = None, seconds: float = 600, log: Path | None = None
                 ) -> None:
    """Poll ``url``/health until it answers 200; exit when ``proc`` (a Popen) ends first or
    ``seconds`` pass (with the tail of ``log``)."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.25)
    sys.exit(f"the service at {url} did not start" + (
        f": {log.read_text()[-2000:]}" if log and log.exists() else ""))


class RSSSampler:
    """The resident memory of process ``pid`` every ``every`` seconds, in a thread: ``samples``
    of (seconds since ``t0``, bytes) until ``stop`` is set or the process ends."""

    def __init__(self, pid: int, every: float, t0: float = 0.0,
                 stop: threading.Event | None = None) -> None:
        self.samples: list[tuple[float, int]] = []
        self.stop = stop or threading.Event()
        threading.Thread(target=self._run, args=(pid, every, t0), daemon=True).start()

    def _run(self, pid: int, every: float, t0: float) -> None:
        import psutil

        proc = psutil.Process(pid)
        while not self.stop.wait(every):
            try:
                self.samples.append((time.monotonic() - t0, proc.memory_info().rss))
            except psutil.Error:
                return


def open_index(name: str) -> Any:
    """The hybrid index of the collection ``name`` of the data folder (indexes/NAME, built
    when missing)."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import open_or_build

    ds = load_dataset(DATA / name)
    return open_or_build(ds.corpus, ROOT / "indexes" / name, progress=True, source=str(ds.root))


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def save_json(path: Path, data: Any, indent: int = 1, **options: Any) -> None:
    """Write ``data`` as JSON to ``path`` (``json.dumps`` ``options``), creating its folder."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, **options))


def publish(name: str, markdown: str, write: bool = True) -> None:
    """Print ``markdown``; with ``write``, make it docs/benchmarks.md's section ``name``."""
    print(markdown)
    if write:
        write_section(name, markdown)
