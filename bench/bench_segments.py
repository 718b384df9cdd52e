"""Segments and merges (issue 56): adds against the index size, search over several segments,
a merge and searches during it.

    python bench/bench_segments.py adds     # add 100 passages to indexes of 5k .. SIZES
    python bench/bench_segments.py search   # p50/p95 per leg, 1/5/10/20 segments vs merged
    python bench/bench_segments.py merge    # a merge's time; search latency during it
    python bench/bench_segments.py render   # docs/benchmarks.md section "segments"

The corpus: SciFact's abstracts cycled to the size wanted, each passage's text tagged with its
own id (a unique token, so no two passages are equal); its vectors are precomputed (each
source abstract a random unit vector, each passage that vector + 0.6 x noise, normalised;
the same for a passage's text whenever it is encoded), so encoding, which would dominate every
number, costs nothing: the measured cost is the index's own. Each part stores its numbers in
bench/segments_results.json (with its load average) and re-renders the section.
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
from pathlib import Path
from typing import Any

import numpy as np
from lib.results import DATA, ROOT, load_parts, log, publish_tables, save_part, table
from lib.timing import percentiles, secs

RESULTS = ROOT / "bench" / "segments_results.json"
DIM = 384
SIZES = (5_000, 50_000, 200_000)
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


def settings(ann: str = "exact") -> Any:
    from intentrank.index import IndexSettings
    from intentrank.index.settings import AnnSettings, DenseSettings

    return IndexSettings(legs=LEGS, dense=DenseSettings(ann=AnnSettings(method=ann)))


def build(path: Path, docs: list[Any], ann: str = "exact") -> float:
    from intentrank.index import build_index

    seconds, index = secs(build_index, docs, path, settings(ann), embedding_cache=False,
                          encoder=encoder)
    index.close()
    return seconds


def _inodes(path: Path) -> dict[int, int]:
    return {f.stat().st_ino: f.stat().st_size for f in path.rglob("*") if f.is_file()}


def adds(sizes: tuple[int, ...] = SIZES, repeats: int = 3) -> None:
    """Build each size (exact dense), then add 100 new passages ``repeats`` times: seconds and
    the bytes of files the add created (files already there are hard links, not counted)."""
    from intentrank.index.update import upsert

    out: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="segments-", dir=ROOT / ".cache"))
    try:
        for n in sizes:
            path = work / f"idx{n}"
            log(f"build {n:,} passages")
            row: dict[str, Any] = {"build_s": build(path, corpus(0, n)), "adds": []}
            with precomputed():
                for r in range(repeats):
                    before = _inodes(path)
                    seconds, stats = secs(upsert, path, corpus(n + 100 * r, n + 100 * (r + 1)),
                                          embedding_cache=False)
                    after = _inodes(path)
                    written = sum(s for ino, s in after.items() if ino not in before)
                    row["adds"].append({"s": seconds, "bytes": written,
                                        "segments": stats.segments, "timings": stats.timings})
                    log(f"  add 100: {seconds:.2f}s, {written:,} bytes")
            out[str(n)] = row
            shutil.rmtree(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_part(RESULTS, "adds", out)
    _render_when_complete()


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


def _top(index: Any, q: np.ndarray) -> list[list[str]]:
    return [[index.ids[r] for r in h.rows.tolist()]
            for h in index.search_dense([], 10, query_vectors=q)]


def search(n: int = SEARCH_N, counts: tuple[int, ...] = COUNTS) -> None:
    """Per segment count: an index of n passages in that many segments with HNSW (segments of
    1,024 rows or more carry their own graph); its latency per leg, dense both with the HNSW
    graphs and exactly (the graphs set aside); then merged into one segment, the same."""
    from intentrank.index import Index
    from intentrank.index.update import merge

    texts, q = _queries()
    out: dict[str, Any] = {"n": n, "queries": len(texts)}
    work = Path(tempfile.mkdtemp(prefix="segments-", dir=ROOT / ".cache"))
    try:
        for count in counts:
            path = work / f"s{count}"
            log(f"{n:,} passages in {count} segments (HNSW)")
            segmented(path, n, count, "hnsw")
            row: dict[str, Any] = {}
            with Index(path) as index:
                row["segments"] = len(index.segments)
                row["hnsw"] = _latency(index, texts, q)
                with before_tail():
                    row["hnsw_before"] = _latency(index, texts, q, ("dense",))["dense"]
                index.__dict__["ann"] = [None] * len(index.shard_bounds)  # every part exact
                row["exact"] = _latency(index, texts, q, ("dense",))["dense"]
                with before_tail():
                    row["exact_before"] = _latency(index, texts, q, ("dense",))["dense"]
            if count == max(counts):
                row["merge_s"] = secs(merge, path)[0]
                with Index(path) as index:
                    row["merged"] = {"hnsw": _latency(index, texts, q)}
                    index.__dict__["ann"] = [None] * len(index.shard_bounds)
                    row["merged"]["exact"] = _latency(index, texts, q, ("dense",))["dense"]
            out[str(count)] = row
            shutil.rmtree(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_part(RESULTS, "search", out)
    _render_when_complete()


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


def render() -> None:
    data = load_parts(RESULTS)
    parts, values = [], {}
    if "adds" in data:
        a = data["adds"]
        rows = []
        for n, row in a.items():
            if n in ("header", "load_average"):
                continue
            s = [x["s"] for x in row["adds"]]
            b = [x["bytes"] for x in row["adds"]]
            rows.append([f"{int(n):,}", f"{row['build_s']:.1f}", f"{np.median(s):.2f}",
                         f"{min(s):.2f}-{max(s):.2f}", f"{np.median(b) / 2**10:,.0f}",
                         f"{np.median(s) / row['build_s']:.2%}"])
        parts += [a["header"], table(["passages", "build, s", "add 100: median s",
                                      "range s", "written KiB", "x build"], rows)]
        sizes = [k for k in a if k not in ("header", "load_average")]
        first, last = (float(np.median([x["s"] for x in a[k]["adds"]]))
                       for k in (sizes[0], sizes[-1]))
        values["adds.load"] = f"{a['load_average']:.1f}"
        values["adds.growth"] = f"{last / first:.2f}"
        values["adds.largest"] = f"{int(sizes[-1]):,}"
        values["adds.ratio"] = f"{last / a[sizes[-1]]['build_s']:.2%}"
    if "search" in data:
        s = data["search"]
        counts = [k for k in s if k.isdigit()]
        rows = []
        for c in counts:
            r = s[c]
            rows.append([f"{c} segment{'s' if c != '1' else ''}", _ms(r["hnsw"]["bm25"]),
                         _ms(r["hnsw"]["tfidf"]), _ms(r["exact"]), _ms(r["exact_before"]),
                         _ms(r["hnsw"]["dense"]), _ms(r["hnsw_before"])])
        m = s[counts[-1]]["merged"]
        rows.append([f"{counts[-1]} segments merged into 1", _ms(m["hnsw"]["bm25"]),
                     _ms(m["hnsw"]["tfidf"]), _ms(m["exact"]), "-", _ms(m["hnsw"]["dense"]),
                     "-"])
        parts += [s["header"], table([f"index of {s['n']:,} passages", "BM25 p50 / p95 ms",
                                      "TF-IDF", "dense exact", "exact before",
                                      "dense HNSW", "HNSW before"], rows)]
        ten, one = s.get("10", s[counts[-1]]), s["1"]
        for leg, (a10, a1) in {"bm25": (ten["hnsw"]["bm25"], one["hnsw"]["bm25"]),
                               "tfidf": (ten["hnsw"]["tfidf"], one["hnsw"]["tfidf"]),
                               "exact": (ten["exact"], one["exact"]),
                               "hnsw": (ten["hnsw"]["dense"], one["hnsw"]["dense"]),
                               "hnswbefore": (ten["hnsw_before"], one["hnsw_before"]),
                               "exactbefore": (ten["exact_before"], one["exact_before"])
                               }.items():
            values[f"search.{leg}10"] = f"{a10['p50'] / a1['p50']:.2f}"
        values["search.load"] = f"{s['load_average']:.1f}"
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
    parser.add_argument("part", choices=["adds", "search", "merge", "render"])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.part == "adds":
        adds(tuple(args.sizes))
    elif args.part == "search":
        search()
    elif args.part == "merge":
        during_merge()
    else:
        render()


if __name__ == "__main__":
    main()
