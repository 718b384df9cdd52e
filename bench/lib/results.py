"""Results: machine facts and the command header, docs/benchmarks.md sections (stored as
results and rendered by :mod:`intentrank.report.sections`), JSON results (one file, or one
file of parts each with its own header), tables and the measures several scripts share."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
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


def cells(x: dict[str, Any], *fields: str) -> list[str]:
    """``x[key]`` formatted by ``spec`` for each ``key:spec`` of ``fields`` (``key``: as
    ``str`` gives it), the cells of a table row."""
    return [format(x[k], spec) for k, _, spec in (f.partition(":") for f in fields)]


def p_value(a: dict[str, float], b: dict[str, float], metric: str = "nDCG@10") -> str:
    """The paired randomization p of ``b`` against ``a`` (per-query scores), as the tables
    print it (three decimals)."""
    from intentrank.measures.significance import paired_test

    return f"{paired_test(a, b, metric).p_randomization:.3f}"


def test_split(name: str) -> tuple[list, Any]:
    """The test queries and qrels of the collection ``name`` of the data folder."""
    from intentrank.data.dataset import load_dataset

    return load_dataset(DATA / name).split("test")


def test_texts(name: str) -> list[str]:
    """The texts of the test queries of the collection ``name``."""
    return [q.text for q in test_split(name)[0]]


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


def load_parts(path: Path) -> dict[str, Any]:
    """A results file of parts (:func:`save_part`); empty when there is none yet."""
    import json

    return json.loads(path.read_text()) if path.exists() else {}


def save_part(path: Path, key: str, value: dict) -> None:
    """Store one part's results under ``key`` in ``path`` with its own command header and
    load average (each part of such a benchmark is a run of its own, and says so)."""
    import json

    data = load_parts(path)
    data[key] = value | {"header": header(), "load_average": os.getloadavg()[0]}
    path.write_text(json.dumps(data, indent=1))


def recall(truth: Any, got: Any, k: int = 100) -> float:
    """The mean share of each row of ``truth``'s top ``k`` that ``got``'s top ``k`` holds."""
    import numpy as np

    return float(np.mean([len(set(t[:k].tolist()) & set(g[:k].tolist())) / k
                          for t, g in zip(truth, got, strict=True)]))
