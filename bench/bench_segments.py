"""Segments and merges (issue 56): adds against the index size, search over several segments,
a merge and searches during it.

    python bench/bench_segments.py all      # the section: adds, search, merge in one run
    python bench/bench_segments.py adds     # add 100 passages to indexes of 5k .. 1M
    python bench/bench_segments.py adds --legs bm25 dense --sizes 5000 1000000  # other legs
    python bench/bench_segments.py bases    # only build the adds' indexes (bench cache)
    python bench/bench_segments.py profile --sizes 200000  # cProfile of one add (printed)
    python bench/bench_segments.py search   # p50/p95 per leg, 1/5/10/20 segments vs merged
    python bench/bench_segments.py merge    # a merge's time; search latency during it
    python bench/bench_segments.py render   # docs/benchmarks.md section "segments"

The corpus: SciFact's abstracts cycled to the size wanted, each passage's text tagged with its
own id (a unique token, so no two passages are equal); its vectors are precomputed (each
source abstract a random unit vector, each passage that vector + 0.6 x noise, normalised;
the same for a passage's text whenever it is encoded), so encoding, which would dominate every
number, costs nothing: the measured cost is the index's own. The adds' indexes are built
once and kept in .cache/bench/segments/ (keyed by size, index format and BASE_RECIPE): a
cold cache builds 5k .. 1M first (most of the run), a warm one only copies them. Each part
stores its numbers in bench/segments_results.json (with its load average) and re-renders the
section.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from lib.results import DATA, ROOT, load_parts, log, publish_tables, save_part, table
from lib.timing import percentiles, secs

RESULTS = ROOT / "bench" / "segments_results.json"
DIM = 384
SIZES = (5_000, 50_000, 200_000, 500_000, 1_000_000)  # 1M: built as two segments (BUILD_MAX)
SEARCH_N = 50_000
COUNTS = (1, 5, 10, 20)
LEGS = ("bm25", "dense", "tfidf")
QUERIES = 100
WATCH_S = 300.0
"""The merge part queries during a merge for at most this long (a merge at the lowest
priority on a saturated machine may take much longer; it is then recorded as unfinished)."""


@functools.cache
def _sources() -> tuple[list[Any], np.ndarray]:
    from intentrank.data.corpus import iter_corpus

    docs = list(iter_corpus(DATA / "scifact" / "corpus.jsonl.gz"))
    base = np.random.default_rng(0).standard_normal((len(docs), DIM)).astype(np.float32)
    return docs, base / np.linalg.norm(base, axis=1, keepdims=True)


def corpus(start: int, stop: int) -> list[Any]:
    """Passages ``start`` .. ``stop`` of the cycled corpus."""
    from intentrank.types import Document

    docs, _ = _sources()
    return [Document(f"p{i}", f"{docs[i % len(docs)].text} p{i}", docs[i % len(docs)].title)
            for i in range(start, stop)]


def encoder(texts: list[str]) -> np.ndarray:
    """The precomputed vector of each passage text (its source's vector plus its own noise,
    seeded by the text)."""
    docs, base = _sources()
    out = np.empty((len(texts), DIM), dtype=np.float32)
    for j, text in enumerate(texts):
        i = int(text.rsplit(" p", 1)[1])
        noise = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIM)
        v = base[i % len(docs)] + 0.6 * noise.astype(np.float32) / np.sqrt(DIM)
        out[j] = v / np.linalg.norm(v)
    return out


@contextlib.contextmanager
def precomputed(no_policy: bool = False) -> Iterator[None]:
    """Updates encode with :func:`encoder`; ``no_policy``: adds trigger no tiered merge."""
    from intentrank.index import legs, update, writer

    saved = writer.encode_passages, update.merge_candidates
    writer.encode_passages = functools.partial(legs.encode_passages, encoder=encoder)
    if no_policy:
        update.merge_candidates = lambda entries: None
    try:
        yield
    finally:
        writer.encode_passages, update.merge_candidates = saved


def settings(ann: str = "exact", legs: tuple[str, ...] = LEGS) -> Any:
    from intentrank.index import IndexSettings
    from intentrank.index.settings import AnnSettings, DenseSettings

    return IndexSettings(legs=legs, dense=DenseSettings(ann=AnnSettings(method=ann)))


def build(path: Path, docs: list[Any], ann: str = "exact", legs: tuple[str, ...] = LEGS
          ) -> float:
    from intentrank.index import build_index

    seconds, index = secs(build_index, docs, path, settings(ann, legs), embedding_cache=False,
                          encoder=encoder)
    index.close()
    return seconds


def _inodes(path: Path) -> dict[int, int]:
    return {f.stat().st_ino: f.stat().st_size for f in path.rglob("*") if f.is_file()}


BASES = ROOT / ".cache" / "bench" / "segments"
BASE_RECIPE = 3  # bump when the corpus, vectors or settings of the base indexes change
# A base of more passages is built as segments of this many (a build of 1M at once holds
# every passage's tokens in memory: killed at 11.6 GB here); its build time is their sum.
BUILD_MAX = 500_000


def base_index(n: int, legs: tuple[str, ...] = LEGS) -> tuple[Path, dict[str, Any]]:
    """The built index of passages 0 .. n (dense exact) under the bench cache, keyed by its
    size, the index format and :data:`BASE_RECIPE`, and its build's seconds, date and load
    average (built once, into a temporary folder renamed into place, so a killed build
    leaves nothing)."""
    import json

    from intentrank.index.store import FORMAT_VERSION

    path = BASES / f"base-{n}-format{FORMAT_VERSION}-r{BASE_RECIPE}{_legs_key(legs)}"
    if not (path / "build.json").exists():
        tmp = BASES / f".tmp-{path.name}-{os.getpid()}"
        BASES.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"build {n:,} passages into the bench cache {path}")
        seconds = build(tmp / "index", corpus(0, min(n, BUILD_MAX)), legs=legs)
        for start in range(BUILD_MAX, n, BUILD_MAX):  # the rest as segments of BUILD_MAX
            log(f"  add passages {start:,} .. {min(n, start + BUILD_MAX):,} as a segment")
            seconds += _add_segment(tmp / "index", start, min(n, start + BUILD_MAX))
        (tmp / "build.json").write_text(json.dumps({
            "n": n, "build_s": seconds, "load_average": os.getloadavg()[0],
            "segments": -(-n // BUILD_MAX),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}))
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
    built = json.loads((path / "build.json").read_text())
    built.setdefault("date", datetime.fromtimestamp(  # a build recorded before dates: its end
        (path / "build.json").stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC"))
    return path / "index", built


def _add_segment(path: Path, start: int, stop: int) -> float:
    """Seconds to add passages ``start`` .. ``stop`` to the index ``path`` as one segment
    (no merge)."""
    from intentrank.index.update import upsert

    with precomputed(no_policy=True):
        return secs(upsert, path, corpus(start, stop), embedding_cache=False)[0]


def copy_index(src: Path, dst: Path) -> None:
    """A writable copy of the index ``src``: its generations' files hard-linked (a commit
    never changes a file, it writes new ones), its small top-level files and locks copied."""
    def copy(a: str, b: str) -> None:
        if Path(a).name in (".readers.lock", ".lock", "CURRENT") or Path(a).stat().st_size < 1:
            shutil.copy2(a, b)
        else:
            os.link(a, b)

    shutil.copytree(src, dst, copy_function=copy)


def _workdir() -> Path:
    (ROOT / ".cache").mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="segments-", dir=ROOT / ".cache"))


def _legs_key(legs: tuple[str, ...]) -> str:
    return "" if legs == LEGS else "-" + "-".join(legs)


def adds(sizes: tuple[int, ...] = SIZES, repeats: int = 3, legs: tuple[str, ...] = LEGS
         ) -> None:
    """For each size, its base index (built once into the bench cache, exact dense), copied;
    then add 100 new passages ``repeats`` times: seconds and the bytes of files the add
    created (files already there are hard links, not counted)."""
    from intentrank.index.update import upsert

    out: dict[str, Any] = {}
    work = _workdir()
    try:
        copy_index(base_index(sizes[0], legs)[0], work / "warm")
        with precomputed():  # untimed: the first add of a process imports its legs' libraries
            upsert(work / "warm", corpus(10**9, 10**9 + 100), embedding_cache=False)
        shutil.rmtree(work / "warm")
        for n in sizes:
            base, built = base_index(n, legs)
            path = work / f"idx{n}"
            copy_index(base, path)
            row: dict[str, Any] = {"build_s": built["build_s"], "adds": [],
                                   "build": built}
            with precomputed():
                for r in range(repeats):
                    before = _inodes(path)
                    cpu = time.process_time()
                    seconds, stats = secs(upsert, path, corpus(n + 100 * r, n + 100 * (r + 1)),
                                          embedding_cache=False)
                    cpu = time.process_time() - cpu
                    after = _inodes(path)
                    written = sum(s for ino, s in after.items() if ino not in before)
                    row["adds"].append({"s": seconds, "cpu_s": cpu, "bytes": written,
                                        "segments": stats.segments, "timings": stats.timings})
                    log(f"  {n:,}: add 100: {seconds:.2f}s ({cpu:.2f}s CPU), {written:,} bytes")
            out[str(n)] = row
            shutil.rmtree(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_part(RESULTS, "adds" + _legs_key(legs), out)
    _render_when_complete()


def profile(sizes: tuple[int, ...] = SIZES, top: int = 25) -> None:
    """cProfile of one add of 100 passages to each size's base index (a copy): the calls
    that cost most, cumulative, printed (not stored)."""
    import cProfile
    import pstats

    from intentrank.index.update import upsert

    work = _workdir()
    try:
        for n in sizes:
            base, _ = base_index(n)
            path = work / f"idx{n}"
            copy_index(base, path)
            with precomputed():
                upsert(path, corpus(n, n + 100), embedding_cache=False)  # warm: imports
                prof = cProfile.Profile()
                seconds, _ = secs(prof.runcall, upsert, path, corpus(n + 100, n + 200),
                                  embedding_cache=False)
            print(f"== {n:,} passages: add 100 in {seconds:.3f}s", flush=True)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(top)
            pstats.Stats(prof).sort_stats("tottime").print_stats(top)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _queries() -> tuple[list[str], np.ndarray]:
    import json

    lines = (DATA / "scifact" / "queries.jsonl").read_text().splitlines()[:QUERIES]
    texts = [json.loads(line)["text"] for line in lines]
    rng = np.random.default_rng(1)
    _, base = _sources()
    q = base[rng.integers(0, len(base), len(texts))] + 0.6 * rng.standard_normal(
        (len(texts), DIM)).astype(np.float32) / np.sqrt(DIM)
    return texts, (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def segmented(path: Path, n: int, count: int, ann: str) -> None:
    """An index of passages 0 .. n in ``count`` segments of equal size (a build, then adds with
    the merge policy off)."""
    from intentrank.index.update import upsert

    step = n // count
    build(path, corpus(0, step), ann)
    with precomputed(no_policy=True):
        for c in range(1, count):
            upsert(path, corpus(c * step, n if c == count - 1 else (c + 1) * step),
                   embedding_cache=False)


@contextlib.contextmanager
def before_tail() -> Iterator[None]:
    """The dense leg as before the tail scan: every segment searched on its own (its graph,
    or an exact scan whose few-query product went through BLAS)."""
    from intentrank.index import ann, dense_search

    saved = dense_search.TAIL_EXACT_ROWS, ann.dense_scores
    dense_search.TAIL_EXACT_ROWS = 0
    ann.dense_scores = lambda e, q: np.asarray(e @ q.T, dtype=np.float32)
    try:
        yield
    finally:
        dense_search.TAIL_EXACT_ROWS, ann.dense_scores = saved


def _searches(index: Any, texts: list[str], q: np.ndarray) -> dict[str, Any]:
    return {"bm25": lambda j: index.search_bm25([texts[j]], 10),
            "tfidf": lambda j: index.search_tfidf([texts[j]], 10),
            "dense": lambda j: index.search_dense([], 10, query_vectors=q[j:j + 1])}


def _latency(index: Any, texts: list[str], q: np.ndarray, legs: tuple[str, ...] = LEGS
             ) -> dict[str, dict[str, float]]:
    """p50/p95 ms of each leg, one query at a time, legs interleaved per query."""
    fns = _searches(index, texts, q)
    for leg in legs:  # first search: loads the leg
        fns[leg](0)
    ms: dict[str, list[float]] = {leg: [] for leg in legs}
    for j in range(len(texts)):
        for leg in legs:
            ms[leg].append(secs(fns[leg], j)[0] * 1000)
    return {leg: percentiles(v) for leg, v in ms.items()}


@contextlib.contextmanager
def per_segment() -> Iterator[None]:
    """The HNSW graphs searched as before the shared walk: one faiss search per segment."""
    from intentrank.index import dense_search

    dense_search.WALK_TOGETHER = False
    try:
        yield
    finally:
        dense_search.WALK_TOGETHER = True


def _rows(index: Any, q: np.ndarray) -> list[set[int]]:
    return [set(h.rows.tolist()) for h in index.search_dense([], 10, query_vectors=q)]


def _recall(got: list[set[int]], exact: list[set[int]]) -> float:
    return float(np.mean([len(a & b) / len(b) for a, b in zip(got, exact, strict=True)]))


def _top(index: Any, q: np.ndarray) -> list[list[str]]:
    return [[index.ids[r] for r in h.rows.tolist()]
            for h in index.search_dense([], 10, query_vectors=q)]


def search(n: int = SEARCH_N, counts: tuple[int, ...] = COUNTS) -> None:
    """Per segment count: an index of n passages in that many segments with HNSW (segments of
    1,024 rows or more carry their own graph), and the largest merged into one segment; each
    one's latency per leg, dense with the HNSW graphs (walked together, and one faiss search
    per segment as before) and exactly (the graphs set aside; and as before the tail scan),
    and the HNSW top 10's recall against the exact one. Every index is built first, then
    all are measured query by query in turn (a busy machine slows them alike)."""
    from intentrank.index import Index
    from intentrank.index.update import merge

    texts, q = _queries()
    out: dict[str, Any] = {"n": n, "queries": len(texts)}
    work = Path(tempfile.mkdtemp(prefix="segments-", dir=ROOT / ".cache"))
    try:
        with contextlib.ExitStack() as stack:
            opened: dict[str, Any] = {}
            for count in counts:
                path = work / f"s{count}"
                log(f"{n:,} passages in {count} segments (HNSW)")
                segmented(path, n, count, "hnsw")
                opened[str(count)] = stack.enter_context(Index(path))  # keeps its commit
            out["merge_s"] = secs(merge, path)[0]
            opened["merged"] = stack.enter_context(Index(path))
            log("measuring, the indexes in turn per query")
            ms = _interleaved(opened, texts, q)
            for name, index in opened.items():
                walked = _rows(index, q)
                with per_segment():
                    each = _rows(index, q)
                graphs = index.ann
                index.__dict__["ann"] = [None] * len(index.shard_bounds)  # every part exact
                exact = _rows(index, q)
                index.__dict__["ann"] = graphs
                row = {way: percentiles(v) for way, v in ms[name].items()}
                row["segments"] = len(index.segments)
                row["recall"] = {"walk": _recall(walked, exact), "faiss": _recall(each, exact)}
                out[name] = row
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_part(RESULTS, "search", out)
    _render_when_complete()


def _interleaved(opened: dict[str, Any], texts: list[str], q: np.ndarray
                 ) -> dict[str, dict[str, list[float]]]:
    """Milliseconds per query of each index's legs and dense ways: for each query, every
    index in turn, every way in turn."""
    ways = ("bm25", "tfidf", "dense", "hnsw_faiss", "exact", "exact_before")
    fns = {name: _searches(index, texts, q) for name, index in opened.items()}
    graphs = {name: index.ann for name, index in opened.items()}

    def exact(name: str, j: int) -> None:
        index = opened[name]
        index.__dict__["ann"] = [None] * len(index.shard_bounds)
        try:
            fns[name]["dense"](j)
        finally:
            index.__dict__["ann"] = graphs[name]

    def timed(name: str, way: str, j: int) -> float:
        if way == "hnsw_faiss":
            with per_segment():
                return secs(fns[name]["dense"], j)[0] * 1000
        if way == "exact_before":
            with before_tail():
                return secs(exact, name, j)[0] * 1000
        if way == "exact":
            return secs(exact, name, j)[0] * 1000
        return secs(fns[name][way], j)[0] * 1000

    ms: dict[str, dict[str, list[float]]] = {name: {w: [] for w in ways} for name in opened}
    for name in opened:  # first searches: load the legs, compile
        for way in ways:
            timed(name, way, 0)
    for j in range(len(texts)):
        for name in opened:
            for way in ways:
                ms[name][way].append(timed(name, way, j))
    return ms


def during_merge(n: int = SEARCH_N, count: int = 10) -> None:
    """An index of n passages in ``count`` segments (HNSW), copied; for each way of merging
    (a plain thread, then a thread that yields the CPU as the service's background merger
    does, :func:`intentrank.index.yielding.yielding`), each leg's latency with a reader of
    that commit, then again while the thread merges it into one segment (the reader keeps
    its commit point), and the merge's seconds."""
    from intentrank.index.yielding import yielding

    texts, q = _queries()
    out: dict[str, Any] = {"n": n, "segments": count, "load_start": os.getloadavg()[0]}
    work = Path(tempfile.mkdtemp(prefix="segments-", dir=ROOT / ".cache"))
    try:
        segmented(work / "plain", n, count, "hnsw")
        shutil.copytree(work / "plain", work / "yielding")
        for way, wrap in (("plain", contextlib.nullcontext), ("yielding", yielding)):
            log(f"merge of {count} segments, {way}")
            out[way] = _searches_during_merge(work / way, texts, q, wrap)
            log(f"  {out[way]}")
            save_part(RESULTS, "merge", out)  # what is measured so far
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _render_when_complete()


def _searches_during_merge(path: Path, texts: list[str], q: np.ndarray, wrap: Any
                           ) -> dict[str, Any]:
    """Idle latency per leg, then latency while a thread merges ``path`` inside ``wrap()``."""
    from intentrank.index import Index
    from intentrank.index.update import merge

    out: dict[str, Any] = {}
    with Index(path) as index:
        out["idle"] = _latency(index, texts, q)
        before = _top(index, q)
        done: dict[str, float] = {}

        def run() -> None:
            with wrap():
                done["s"] = secs(merge, path)[0]

        thread = threading.Thread(target=run, daemon=True)
        start = time.perf_counter()
        thread.start()
        ms: dict[str, list[float]] = {leg: [] for leg in LEGS}
        fns = _searches(index, texts, q)
        while thread.is_alive() and time.perf_counter() - start < WATCH_S:
            for j in range(len(texts)):
                for leg in LEGS:
                    ms[leg].append(secs(fns[leg], j)[0] * 1000)
                if not thread.is_alive():
                    break
        out["merge_s"] = done.get("s")  # None: still merging after WATCH_S (left running)
        out["watched_s"] = time.perf_counter() - start
        out["during"] = {leg: percentiles(v) | {"n": len(v)} for leg, v in ms.items()}
        out["same_results"] = _top(index, q) == before
    if out["merge_s"] is not None:
        with Index(path) as merged:
            out["after_segments"] = len(merged.segments)
    return out


def _render_when_complete() -> None:
    """Re-render the section once every part has its numbers (its template reads them all)."""
    if {"adds", "search", "merge"} <= load_parts(RESULTS).keys():
        render()


def _ms(p: dict[str, float]) -> str:
    return f"{p['p50']:.1f} / {p['p95']:.1f}"


def _adds_table(a: dict[str, Any]) -> str:
    rows = []
    for n, row in a.items():
        if n in ("header", "load_average"):
            continue
        s = [x["s"] for x in row["adds"]]
        b = [x["bytes"] for x in row["adds"]]
        cpu = [x.get("cpu_s", float("nan")) for x in row["adds"]]
        rows.append([f"{int(n):,}", f"{row['build_s']:.1f}", f"{np.median(s):.2f}",
                     f"{min(s):.2f}-{max(s):.2f}", f"{np.median(cpu):.2f}",
                     f"{np.median(b) / 2**10:,.0f}", f"{np.median(s) / row['build_s']:.2%}"])
    return table(["passages", "build, s", "add 100: median s", "range s", "median CPU s",
                  "written KiB", "x build"], rows)


def _adds_values(a: dict[str, Any], key: str) -> dict[str, str]:
    """The growth of the median add (wall and CPU) from the first size to the last, and the
    last one against its build."""
    sizes = [k for k in a if k not in ("header", "load_average")]
    wall = [float(np.median([x["s"] for x in a[k]["adds"]])) for k in (sizes[0], sizes[-1])]
    cpu = [float(np.median([x["cpu_s"] for x in a[k]["adds"]])) for k in (sizes[0], sizes[-1])]
    build = a[sizes[-1]]["build_s"]
    return {f"{key}.load": f"{a['load_average']:.1f}",
            f"{key}.smallest": f"{int(sizes[0]):,}", f"{key}.largest": f"{int(sizes[-1]):,}",
            f"{key}.growth": f"{wall[1] / wall[0]:.2f}",
            f"{key}.cpugrowth": f"{cpu[1] / cpu[0]:.2f}",
            f"{key}.growthgoal": "met" if wall[1] / wall[0] <= 2 else "missed",
            f"{key}.ratio": f"{wall[1] / build:.3%}",
            f"{key}.ratiogoal": "met" if wall[1] / build <= 0.01 else "missed",
            f"{key}.largestbuild": f"{build / 60:.0f}",
            f"{key}.builddates": ", ".join(sorted({a[k]["build"]["date"][:10] for k in sizes}))}


def render() -> None:
    data = load_parts(RESULTS)
    parts, values = [], {}
    if "adds" in data:
        a = data["adds"]
        parts += [a["header"], _adds_table(a)]
        values.update(_adds_values(a, "adds"))
    if "search" in data:
        s = data["search"]
        names = [k for k in s if k.isdigit()] + ["merged"]
        rows = []
        for c in names:
            r = s[c]
            label = (f"{names[-2]} segments merged into 1" if c == "merged" else
                     f"{c} segment{'s' if c != '1' else ''}")
            rows.append([label, _ms(r["bm25"]), _ms(r["tfidf"]), _ms(r["exact"]),
                         _ms(r["exact_before"]), _ms(r["dense"]), _ms(r["hnsw_faiss"]),
                         f"{r['recall']['walk']:.3f} / {r['recall']['faiss']:.3f}"])
        parts += [s["header"], table([f"index of {s['n']:,} passages", "BM25 p50 / p95 ms",
                                      "TF-IDF", "dense exact", "exact before tail scan",
                                      "dense HNSW", "HNSW per segment",
                                      "HNSW recall@10: now / per segment"], rows)]
        ten, one = s.get("10", s[names[-2]]), s["merged"]
        for leg, way in {"bm25": "bm25", "tfidf": "tfidf", "exact": "exact",
                         "hnsw": "dense", "hnswfaiss": "hnsw_faiss"}.items():
            values[f"search.{leg}10"] = f"{ten[way]['p50'] / one[way]['p50']:.2f}"
        values["search.load"] = f"{s['load_average']:.1f}"
        values["search.merge"] = f"{s['merge_s']:.1f}"
        recalls = [s[c]["recall"]["walk"] for c in names]
        values["search.recallmin"] = f"{min(recalls):.3f}"
        values["search.recallmax"] = f"{max(recalls):.3f}"
    if "merge" in data:
        g = data["merge"]
        ways = [w for w in ("plain", "yielding") if w in g]
        rows = [[leg, way, _ms(g[way]["idle"][leg]), _ms(g[way]["during"][leg]),
                 f"{g[way]['during'][leg]['p50'] / g[way]['idle'][leg]['p50']:.2f}",
                 str(g[way]["during"][leg]["n"])] for leg in LEGS for way in ways]
        parts += [g["header"], table(["leg", "merge thread", "before the merge p50 / p95 ms",
                                      "during the merge", "p50 during / before",
                                      "queries during"], rows)]
        for way in ways:
            values[f"merge.{way}.s"] = (f"{g[way]['merge_s']:.1f} s" if g[way]["merge_s"] else
                                        f"more than {g[way]['watched_s']:.0f} s (unfinished)")
            for leg in LEGS:
                values[f"merge.{way}.{leg}"] = \
                    f"{g[way]['during'][leg]['p50'] / g[way]['idle'][leg]['p50']:.2f}"
        values["merge.load"] = f"{g['load_average']:.1f}"
        values["merge.same"] = ("the same" if all(g[w]["same_results"] for w in ways)
                                else "NOT the same")
    publish_tables("segments", "\n\n".join(parts), values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["all", "adds", "bases", "profile", "search",
                                         "merge", "render"])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--legs", nargs="+", default=list(LEGS),
                        help="adds, bases: the legs of the indexes (other legs than the "
                        "section's: stored as a part of their own, not rendered)")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.part == "all":  # the section's three parts in one run
        adds(tuple(args.sizes), legs=tuple(args.legs))
        search()
        during_merge()
        render()
    elif args.part == "adds":
        adds(tuple(args.sizes), legs=tuple(args.legs))
    elif args.part == "bases":  # build the adds' base indexes into the bench cache only
        for n in args.sizes:
            log(f"{n:,} passages: built in {base_index(n, tuple(args.legs))[1]['build_s']:.1f}s")
    elif args.part == "profile":
        profile(tuple(args.sizes))
    elif args.part == "search":
        search()
    elif args.part == "merge":
        during_merge()
    else:
        render()


if __name__ == "__main__":
    main()
