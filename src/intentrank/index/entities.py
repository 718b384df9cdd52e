"""Regex entities (capitalised phrases and numbers) and the document entity graph.

The index builds the graph as an edge array and ranks it with :func:`pagerank_sparse` (scipy
sparse matrices: memory ~ edges, no Python object per node).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_CAPITALISED = re.compile(r"\b[A-Z][\w\-]*(?:\s+[A-Z][\w\-]*)*\b")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?%?")


@functools.cache
def _stop_words() -> frozenset[str]:
    """scikit-learn's English stop words, imported on first use: importing scikit-learn
    costs an index that has no graph leg (a BM25-only build) seconds and tens of MiB."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return ENGLISH_STOP_WORDS


def extract_entities(text: str) -> set[str]:
    """Capitalised phrases and numbers, lower-cased; leading stopwords ("The ...") are cut."""
    found = {m.group(0) for m in _NUMBER.finditer(text)}
    stop = _stop_words()
    for m in _CAPITALISED.finditer(text):
        words = m.group(0).lower().split()
        while words and words[0] in stop:
            words.pop(0)
        if words:
            found.add(" ".join(words))
    return found


def entity_edges(entities: Sequence[set[str]] | Sequence[Sequence[str]], window: int = 50,
                 min_shared: int = 2) -> np.ndarray:
    """Documents within ``window`` rows of each other sharing at least ``min_shared``
    entities, as an int64 array of (i, j, shared) rows, i < j, ordered by i then j."""
    import scipy.sparse as sp

    ids: dict[str, int] = {}
    cols = [ids.setdefault(e, len(ids)) for ents in entities for e in ents]
    indptr = np.concatenate([[0], np.cumsum([len(ents) for ents in entities])]).astype(np.int64)
    incidence = sp.csr_matrix((np.ones(len(cols), dtype=np.int32), np.asarray(cols, np.int64),
                               indptr), shape=(len(entities), len(ids)))
    return window_edges(incidence, window, min_shared)


EDGE_BLOCK_ROWS = 65_536
"""Rows whose pairs :func:`window_edges` counts at once (its counts array holds
``rows * (window + 1)`` integers)."""


def window_edges(incidence: Any, window: int, min_shared: int) -> np.ndarray:
    """:func:`entity_edges` of documents given as a sparse matrix of distinct entities per
    row (any column numbering), block of rows by block of rows."""
    e = incidence.tocsr()
    n = e.shape[0]
    blocks = [_block_edges(e[a:min(n, a + EDGE_BLOCK_ROWS + window)], a,
                           min(EDGE_BLOCK_ROWS, n - a), window, min_shared)
              for a in range(0, n, EDGE_BLOCK_ROWS)]
    return np.concatenate(blocks) if blocks else np.zeros((0, 3), dtype=np.int64)


def _block_edges(block: Any, first: int, rows_i: int, window: int, min_shared: int
                 ) -> np.ndarray:
    """The edges (i, j, shared) of ``block``'s first ``rows_i`` rows (row numbers from
    ``first``): each entity's rows in order, the pairs of them at most ``window`` rows apart
    (the k-th next mention, k = 1, 2, ... while any is that close), counted per (i, j) as
    ``i * (window + 1) + (j - i)``, whose order is (i, j)'s."""
    csc = block.tocsc()
    csc.sort_indices()
    rows = csc.indices.astype(np.int64)
    entity_end = np.repeat(csc.indptr[1:], np.diff(csc.indptr)).astype(np.int64)
    span = window + 1
    keys: list[np.ndarray] = []
    at = np.flatnonzero(rows < rows_i)
    step = 1
    while len(at):
        nxt = at + step
        ok = nxt < entity_end[at]
        at, nxt = at[ok], nxt[ok]
        gap = rows[nxt] - rows[at]
        ok = gap <= window
        at = at[ok]
        keys.append(rows[at] * span + gap[ok])
        step += 1
    counts = np.bincount(np.concatenate(keys) if keys else np.zeros(0, np.int64),
                         minlength=rows_i * span)
    found = np.flatnonzero(counts >= min_shared)
    i, gap = np.divmod(found, span)
    return np.stack([i + first, i + first + gap, counts[found]], axis=1).astype(
        np.int64).reshape(-1, 3)


def pagerank_sparse(n: int, edges: np.ndarray, damping: float = 0.85, tol: float = 1e-6,
                    max_iter: int = 100) -> np.ndarray:
    """PageRank of the undirected weighted graph with ``n`` nodes and ``edges`` (i, j, w):
    networkx's power iteration (dangling nodes spread uniformly, stop when the L1 change is
    below ``n * tol``) on a scipy CSR matrix."""
    import scipy.sparse as sp

    if n == 0:
        return np.zeros(0, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 3)
    i, j, w = edges[:, 0], edges[:, 1], edges[:, 2].astype(np.float64)
    a = sp.csr_array((np.concatenate([w, w]), (np.concatenate([i, j]), np.concatenate([j, i]))),
                     shape=(n, n))
    out_weight = np.asarray(a.sum(axis=1)).ravel()
    inv = np.zeros(n)
    inv[out_weight != 0] = 1.0 / out_weight[out_weight != 0]
    a = (sp.dia_array((inv, 0), shape=(n, n)).tocsr() @ a).tocsr()
    x = np.repeat(1.0 / n, n)
    p = np.repeat(1.0 / n, n)
    dangling = np.where(out_weight == 0)[0]
    for _ in range(max_iter):
        last = x
        x = damping * (x @ a + sum(x[dangling]) * p) + (1 - damping) * p
        if np.absolute(x - last).sum() < n * tol:
            return x
    raise RuntimeError(f"PageRank did not converge in {max_iter} iterations")
