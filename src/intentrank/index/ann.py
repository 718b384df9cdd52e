"""Dense search: exact over memory-mapped vectors, or approximate through faiss (HNSW,
IVF-PQ).

Exact search stays the default and needs nothing beyond numpy; faiss is imported only when an
index was built with ``dense.ann.method`` ``hnsw`` or ``ivfpq`` (the ``scale`` extra). An
ANN structure is one file per shard (``dense/ann.faiss``, or ``dense/ann-<i>.faiss`` for
shard ``i``) next to ``dense/embeddings.npy``, which stays the source of truth: IVF-PQ
candidates are rescored with those exact vectors, so ANN scores are true cosines.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.errors import IntentrankError
from intentrank.index.hits import dense_scores, top_rows
from intentrank.index.settings import AnnSettings, IndexSettingsError

EXACT_BLOCK = 1 << 18  # rows per block of exact search over large (memory-mapped) matrices


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - the scale extra is missing
        raise IntentrankError("approximate dense search (dense.ann.method hnsw/ivfpq) needs "
                              "faiss: pip install 'intentrank[scale]'") from exc
    return faiss


def ann_file(shard: int | None) -> str:
    """The ANN file of a shard, relative to the generation directory."""
    return "dense/ann.faiss" if shard is None else f"dense/ann-{shard:03d}.faiss"


def nlist_for(n: int, s: AnnSettings) -> int:
    """Inverted lists for ``n`` vectors: ``s.nlist`` or sqrt(n), at most n / 39 (faiss wants
    39 training points per centroid), at least 1."""
    want = s.nlist or int(math.sqrt(n))
    return max(1, min(want, n // 39))


def exact_search(vectors: np.ndarray, q: np.ndarray, k: int,
                 block: int = EXACT_BLOCK, allow: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top ``k`` of each query over ``vectors`` (a memory-mapped matrix
    is read block by block, so memory stays ``block x queries``). Returns (rows, scores),
    each of shape (queries, min(k, n)), best first, ties by row. ``allow`` (a bool mask over
    the rows) keeps the others out (-inf; rows of -1 pad a short result)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    best_rows = np.zeros((q.shape[0], 0), dtype=np.int64)
    best_scores = np.zeros((q.shape[0], 0), dtype=np.float32)
    for start in range(0, vectors.shape[0], block):
        part = dense_scores(vectors[start:start + block], q).T  # few queries: no BLAS
        if allow is not None:
            part[:, ~allow[start:start + block]] = -np.inf
        rows, scores = top_rows(part, k)
        both_rows = np.concatenate([best_rows, rows + start], axis=1)
        top, best_scores = top_rows(np.concatenate([best_scores, scores], axis=1), k)
        # ties between blocks: the earlier block's rows come first in both_rows (smaller)
        best_rows = np.take_along_axis(both_rows, top, axis=1)
    if allow is not None:
        best_rows = np.where(np.isfinite(best_scores), best_rows, -1)
    return best_rows, best_scores


ANN_EXACT_BELOW = 0.2
"""A filter allowing less than this share of a shard's rows is searched exactly over those
rows (a graph walk restricted to few rows loses recall; docs/benchmarks.md "updates and
filters")."""
GATHER_BELOW = 0.02
"""Exact search over the allowed rows reads only them (gathered) below this share; above
it, it scans every row and masks the others (a gather of many scattered rows costs more
than the scan)."""


EF_FILTERED_MAX = 4096
"""A filtered HNSW search widens its candidate list by 1 / (the share of rows allowed), up to
this."""


def exact_search_rows(vectors: np.ndarray, rows: np.ndarray, q: np.ndarray, k: int,
                      block: int = EXACT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """:func:`exact_search` over ``vectors[rows]`` (sorted rows, gathered block by block);
    rows returned are ``vectors``' own."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    best_rows = np.zeros((q.shape[0], 0), dtype=np.int64)
    best_scores = np.zeros((q.shape[0], 0), dtype=np.float32)
    for start in range(0, len(rows), block):
        chunk = rows[start:start + block]
        part = np.asarray(np.asarray(vectors[chunk]) @ q.T, dtype=np.float32).T
        top, scores = top_rows(part, k)
        both_rows = np.concatenate([best_rows, chunk[top]], axis=1)
        top, best_scores = top_rows(np.concatenate([best_scores, scores], axis=1), k)
        best_rows = np.take_along_axis(both_rows, top, axis=1)
    return best_rows, best_scores


def build_ann(vectors: np.ndarray, s: AnnSettings, path: Path) -> dict[str, Any]:
    """Build the faiss structure ``s`` asks for over ``vectors`` and write it to ``path``;
    return what the manifest records about it (nlist for IVF-PQ)."""
    faiss = _faiss()
    n, dim = vectors.shape
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if s.method == "hnsw":
        index = faiss.IndexHNSWFlat(dim, s.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = s.ef_construction
        index.add(x)
        info: dict[str, Any] = {"method": "hnsw"}
    elif s.method == "ivfpq":
        if dim % s.pq_m:
            raise IndexSettingsError(f"invalid index settings: dense.ann.pq_m={s.pq_m} does "
                                     f"not divide the vector dimension {dim}")
        nlist = nlist_for(n, s)
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(quantizer, dim, nlist, s.pq_m, s.pq_bits,
                                 faiss.METRIC_INNER_PRODUCT)
        train_n = min(n, max(40 * nlist, 10_000))
        sample = np.random.default_rng(0).choice(n, train_n, replace=False)
        index.train(x[np.sort(sample)])
        index.add(x)
        info = {"method": "ivfpq", "nlist": nlist, "trained_on": int(train_n)}
    else:
        raise ValueError(f"no ANN structure for dense.ann.method {s.method!r}")
    faiss.write_index(index, str(path))
    return info


class AnnSearcher:
    """One shard's faiss structure; rows are the shard's own (0-based)."""

    def __init__(self, path: Path, vectors: np.ndarray, s: AnnSettings) -> None:
        faiss = _faiss()
        self.index = faiss.read_index(str(path))
        self.vectors, self.settings = vectors, s
        self.ivf = faiss.extract_index_ivf(self.index) if s.method == "ivfpq" else None

    def search(self, q: np.ndarray, k: int, ef_search: int | None = None,
               nprobe: int | None = None, refine: int | None = None,
               allow: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (rows, scores) per query; rows of -1 (score -inf) pad short results.
        ``allow`` (a bool mask over the shard's rows) restricts the search to those rows
        (faiss's ID selector: the graph or lists are walked, other rows never returned)."""
        faiss = _faiss()
        s = self.settings
        q = np.ascontiguousarray(q, dtype=np.float32)
        k = min(k, self.index.ntotal)
        sel = None
        if allow is not None:
            sel = faiss.IDSelectorBitmap(len(allow), faiss.swig_ptr(
                np.packbits(allow, bitorder="little")))
        if s.method == "hnsw":
            ef = max(ef_search or s.ef_search, k)
            if allow is not None:  # the walk keeps only allowed rows: widen it to match
                ef = int(min(ef / max(float(allow.mean()), 1e-3), EF_FILTERED_MAX))
            params = faiss.SearchParametersHNSW(efSearch=ef, sel=sel) if sel else None
            self.index.hnsw.efSearch = ef
            scores, rows = self.index.search(q, k, params=params)
            return _clean(rows, scores)
        self.ivf.nprobe = min(nprobe or s.nprobe, self.ivf.nlist)
        depth = min(k * (refine or s.refine), self.index.ntotal)
        params = None
        if sel is not None:
            params = faiss.SearchParametersIVF(nprobe=self.ivf.nprobe, sel=sel)
        _, cand = self.index.search(q, depth, params=params)
        exact = _rescore(self.vectors, q, cand)
        if (refine or s.refine) <= 1:
            return _clean(cand, exact)
        top, vals = top_rows(exact, k)
        return _clean(np.take_along_axis(cand, top, axis=1), vals)


def _rescore(vectors: np.ndarray, q: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Exact inner products of each query with its candidate rows (-inf for -1 padding)."""
    out = np.full(cand.shape, -np.inf, dtype=np.float32)
    for j in range(cand.shape[0]):
        rows = cand[j]
        ok = rows >= 0
        live = rows[ok]
        order = np.argsort(live)  # sorted rows: sequential reads from the memory map
        vecs = np.asarray(vectors[live[order]], dtype=np.float32)
        vals = np.empty(len(live), dtype=np.float32)
        vals[order] = vecs @ q[j]
        out[j, ok] = vals
    return out


def _clean(rows: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = rows.astype(np.int64)
    scores = np.where(rows >= 0, scores, -np.inf).astype(np.float32)
    return rows, scores
