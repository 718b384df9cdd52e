"""The entity graph over segments: exact, from each segment's kept entities.

Each segment keeps its rows' entities (``graph/entities.json``). The graph's edges link
documents at most ``graph.window`` live rows apart, across segment boundaries and deleted
rows, and PageRank is a property of the whole graph: neither combines from per-segment
parts, so a reader of an index of several segments (or with deleted rows) computes them
over the live rows once per commit, from the segments' entities held as numbered sparse
rows: the edges by :func:`intentrank.index.entities.window_edges` (numpy, the same array a
fresh build computes), then PageRank, so scores equal a fresh build's bit for bit. What a
segment's file alone gives (its rows' entity numbers) is kept for the process while any
reader holds it (:func:`segment_entities`), so the reader of the next commit reads and
numbers only the new segment's entities.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from intentrank.index.entities import pagerank_sparse, window_edges
from intentrank.index.settings import GraphSettings

_NUMBER: dict[str, int] = {}  # entity -> its number, for this process (only ever grows)
_LOCK = threading.Lock()


class SegmentEntities:
    """One segment's rows of entities, as entity numbers (CSR pieces)."""

    def __init__(self, lists: list[list[str]]) -> None:
        with _LOCK:
            cols = [_NUMBER.setdefault(e, len(_NUMBER)) for row in lists for e in row]
        self.indices = np.asarray(cols, dtype=np.int64)
        self.indptr = np.concatenate([[0], np.cumsum([len(r) for r in lists])]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.indptr) - 1


_KEPT: weakref.WeakValueDictionary[tuple[Any, ...], SegmentEntities] = \
    weakref.WeakValueDictionary()


def segment_entities(seg_dir: Path) -> SegmentEntities:
    """The entities kept in segment directory ``seg_dir``, shared with every reader of this
    process that holds the same file (a hard link in a later generation is the same file)."""
    path = seg_dir / "graph" / "entities.json"
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _LOCK:
        found = _KEPT.get(key)
    if found is not None:
        return found
    made = SegmentEntities(json.loads(path.read_text(encoding="utf-8")))
    with _LOCK:
        return _KEPT.setdefault(key, made)


class EntityRows:
    """Entity -> the rows that mention it (ascending), from the rows' entity matrix: what
    :func:`intentrank.index.subset.graph_hits` looks query entities up in."""

    def __init__(self, incidence: sp.csr_matrix) -> None:
        self.csc = incidence.tocsc()
        self.csc.sort_indices()

    def get(self, entity: str, default: Any = ()) -> Any:
        col = _NUMBER.get(entity)
        if col is None or col >= self.csc.shape[1]:
            return default
        lo, hi = self.csc.indptr[col], self.csc.indptr[col + 1]
        return self.csc.indices[lo:hi] if hi > lo else default


def combine(parts: list[tuple[SegmentEntities, np.ndarray]], s: GraphSettings
            ) -> tuple[EntityRows, np.ndarray]:
    """The graph of ``parts``' rows (each a segment and its included local rows, ascending)
    in order: entity -> rows, and each row's PageRank, as a fresh build of those documents
    computes them."""
    indptr, indices = [np.zeros(1, dtype=np.int64)], []
    for seg, rows in parts:
        lo, hi = seg.indptr[rows], seg.indptr[rows + 1]
        lens = hi - lo
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
        indices.append(seg.indices[starts + np.arange(int(lens.sum()))])
        indptr.append(indptr[-1][-1] + np.cumsum(lens))
    n = sum(len(rows) for _, rows in parts)
    cols = np.concatenate(indices) if indices else np.zeros(0, np.int64)
    width = len(_NUMBER)
    incidence = sp.csr_matrix((np.ones(len(cols), dtype=np.int32), cols,
                               np.concatenate(indptr)), shape=(n, width))
    edges = window_edges(incidence, s.window, s.min_shared)
    return EntityRows(incidence), pagerank_sparse(n, edges, s.damping)


def live_graph(index: Any) -> tuple[EntityRows, np.ndarray]:
    """The graph of an open Index's live rows, from its segments' entities."""
    from intentrank.index.segments import local_rows

    segs = []
    for entry in index.segments:
        with index._reading(f"{entry.dir}/graph/entities.json"):
            segs.append(segment_entities(index.gen_dir / entry.dir))
    index.__dict__["_graph_segments"] = segs  # held while the Index is: the next reader's
    return combine(list(zip(segs, local_rows(index, None), strict=True)), index.settings.graph)
