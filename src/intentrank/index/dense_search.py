"""The dense leg's search over a generation's vectors: exact (whole, or the allowed rows
gathered) or approximate, per part (a shard or a segment), merged."""

from __future__ import annotations

from typing import Any

import numpy as np

from intentrank.index.ann import (
    ANN_EXACT_BELOW,
    EXACT_BLOCK,
    GATHER_BELOW,
    exact_search,
    exact_search_rows,
)
from intentrank.index.hits import Hits, dense_scores, top_k


def search_vectors(index: Any, q: np.ndarray, k: int, allow: np.ndarray | None) -> list[Hits]:
    """Each query's top ``k`` over the vectors file's rows (``allow``: a mask over them)."""
    vectors = index._vectors
    if index.settings.dense.ann.method == "exact" and len(index.shard_bounds) == 1 \
            and len(vectors) <= EXACT_BLOCK:
        if allow is not None:  # the allowed rows' vectors only
            rows = np.flatnonzero(allow)
            scores = dense_scores(np.asarray(vectors[rows]), q)
            return [Hits(rows[h.rows], h.scores) for h in
                    (top_k(scores[:, j], k, positive_only=False) for j in range(q.shape[0]))]
        scores = dense_scores(vectors, q)  # (n_docs, n_queries)
        return [top_k(scores[:, j], k, positive_only=False) for j in range(q.shape[0])]
    return _search_scaled(index, q, k, allow)


def _search_scaled(index: Any, q: np.ndarray, k: int, allow: np.ndarray | None) -> list[Hits]:
    """Exact search block by block over the memory map, or ANN, per part (a shard or a
    segment), merged; with ``allow``, exact over the allowed rows where they are few
    (ANN_EXACT_BELOW), else ANN restricted to them. A segment too small for an ANN structure
    is searched exactly. Two or more HNSW graphs are walked in one compiled call sharing one
    top list (:mod:`intentrank.index.hnsw_walk`)."""
    from intentrank.index.shards import merge_hits

    per_shard: list[list[Hits]] = []
    tail = exact_tail(index)
    walk: dict[int, float] = {}  # HNSW parts for the shared walk: part -> share allowed
    for i, (start, end) in enumerate(index.shard_bounds[:tail]):
        part = None if allow is None else allow[start:end]
        if part is not None and not part.any():
            continue
        exact = index.settings.dense.ann.method == "exact" or index.ann[i] is None or (
            part is not None and part.mean() < ANN_EXACT_BELOW)
        if exact and part is not None and part.mean() < GATHER_BELOW:
            rows, scores = exact_search_rows(index._vectors[start:end], np.flatnonzero(part),
                                             q, k)
        elif exact:
            rows, scores = exact_search(index._vectors[start:end], q, k, allow=part)
        elif _walks_together(index):
            walk[i] = 1.0 if part is None else float(part.mean())
            continue
        else:
            rows, scores = index.ann[i].search(q, k, allow=part,
                                               **getattr(index, "_ann_params", {}))
        per_shard.append(_part_hits(rows, scores, start))
    if walk:
        per_shard.append(_walk(index, q, k, allow, walk))
    if tail < len(index.shard_bounds):  # the small last parts: one exact scan
        start, vectors = _tail_vectors(index, tail)
        part = None if allow is None else allow[start:]
        if part is None or part.any():
            per_shard.append(_part_hits(*exact_search(vectors, q, k, allow=part), start))
    return merge_hits(per_shard, k)


def _part_hits(rows: np.ndarray, scores: np.ndarray, start: int) -> list[Hits]:
    """A part's top rows per query (-1: none) as Hits of the index's rows (part + start)."""
    rows = np.where(rows >= 0, rows + start, -1)
    return [Hits(r, s.astype(np.float64)) for r, s in zip(rows, scores, strict=True)]


WALK_TOGETHER = True
"""Walk two or more HNSW graphs in one compiled call (False: one faiss search per graph, as
before; the segments benchmark compares the two)."""


def _walks_together(index: Any) -> bool:
    """Whether the index's HNSW parts are walked in one compiled call: two or more graphs
    (one graph: faiss's own search, as a build answers) and numba installed."""
    held = index.__dict__.get("_hnsw_together")
    if held is None:
        graphs = sum(a is not None for a in index.ann[:exact_tail(index)])
        held = index.settings.dense.ann.method == "hnsw" and graphs > 1 and _has_numba()
        index.__dict__["_hnsw_together"] = held
    return held and WALK_TOGETHER


def _has_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - the scale extra installs it
        return False
    return True


def _walk(index: Any, q: np.ndarray, k: int, allow: np.ndarray | None,
          shares: dict[int, float]) -> list[Hits]:
    """The HNSW parts in ``shares`` (part -> share of its rows allowed) walked in one call;
    a filtered part's candidate list widened by 1 / share, as faiss's search is."""
    from intentrank.index.ann import EF_FILTERED_MAX
    from intentrank.index.hnsw_walk import Graphs

    graphs = index.__dict__.get("_hnsw_graphs")
    if graphs is None:
        tail = exact_tail(index)
        held = [i for i, a in enumerate(index.ann[:tail]) if a is not None]
        graphs = (held, Graphs([(index.shard_bounds[i][0], index.ann[i].index)
                                for i in held]))
        index.__dict__["_hnsw_graphs"] = graphs
    held, walker = graphs
    ef = max(getattr(index, "_ann_params", {}).get("ef_search")
             or index.settings.dense.ann.ef_search, k)
    part_ef = np.zeros(len(held), dtype=np.int64)
    for j, i in enumerate(held):
        if i in shares:
            share = shares[i]
            part_ef[j] = ef if share >= 1.0 else int(min(ef / max(share, 1e-3),
                                                         EF_FILTERED_MAX))
    rows, scores = walker.search(q, k, ef, part_ef, allow)
    return [Hits(r[r >= 0], s[r >= 0].astype(np.float64)) for r, s in zip(rows, scores,
                                                                           strict=True)]


TAIL_EXACT_ROWS = 1 << 14
"""The last dense parts of an index (its newest, small segments), when together at most this
many rows, are searched as one exact scan of their vectors held in memory (at most 24 MiB of
384-dimensional float32). A separate HNSW walk costs about 0.5 ms per segment, an exact scan
about 0.1 ms per 1,000 rows (docs/benchmarks.md, "segments"): the scan replaces the walks
where segments average under ~5,000 rows. Recall there is 1."""


def exact_tail(index: Any) -> int:
    """The first of the parts searched together exactly (``len(shard_bounds)``: none): the
    smallest ``i`` whose parts ``i..`` (two or more) hold at most TAIL_EXACT_ROWS rows."""
    bounds = index.shard_bounds
    for i in range(len(bounds) - 1):
        if index._n_phys - bounds[i][0] <= TAIL_EXACT_ROWS:
            return i
    return len(bounds)


def _tail_vectors(index: Any, tail: int) -> tuple[int, np.ndarray]:
    """(first row, vectors) of parts ``tail..`` gathered into memory once per open index."""
    start = index.shard_bounds[tail][0]
    held = index.__dict__.get("_dense_tail")
    if held is None or held[0] != start:
        held = (start, np.ascontiguousarray(index._vectors[start:], dtype=np.float32))
        index.__dict__["_dense_tail"] = held
    return held


def part_bounds(index: Any) -> list[tuple[int, int]]:
    """(start, end) physical rows of each dense part of ``index``: each shard of its
    top-level segment (one range if unsharded), then each other segment."""
    from intentrank.index.segments import BASE
    from intentrank.index.shards import shard_bounds

    out = []
    for entry, start in zip(index.segments, index._seg_start.tolist(), strict=False):
        shards = index.settings.shards if entry.dir == BASE else 1
        out += [(start + a, start + b) for a, b in shard_bounds(entry.rows, shards)]
    return out


def ann_searchers(index: Any) -> list[Any]:
    """One faiss searcher per dense part (None for a segment without an ANN file)."""
    from intentrank.index.ann import AnnSearcher, ann_file
    from intentrank.index.segments import BASE

    files: list[str | None] = []
    for entry in index.segments:
        if entry.dir == BASE:
            files += [ann_file(i if index.sharded else None)
                      for i in range(index.settings.shards)]
        else:
            rel = f"{entry.dir}/{ann_file(None)}"
            files.append(rel if rel in index._files else None)
    out: list[Any] = []
    for (start, end), rel in zip(index.shard_bounds, files, strict=True):
        if rel is None:
            out.append(None)
            continue
        with index._reading(rel) as file:
            out.append(AnnSearcher(file, index._vectors[start:end], index.settings.dense.ann))
    return out
