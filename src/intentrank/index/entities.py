"""Regex entities (capitalised phrases and numbers) and the document entity graph.

The index builds the graph as an edge array and ranks it with :func:`pagerank_sparse` (scipy
sparse matrices: memory ~ edges, no Python object per node).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

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


def entity_edges(entities: Sequence[set[str]], window: int = 50, min_shared: int = 2
                 ) -> np.ndarray:
    """Documents within ``window`` rows of each other sharing at least ``min_shared``
    entities, as an int64 array of (i, j, shared) rows, i < j, in the order they are found."""
    out: list[tuple[int, int, int]] = []
    for i, ents in enumerate(entities):
        if len(ents) < min_shared:
            continue
        for j in range(i + 1, min(i + 1 + window, len(entities))):
            shared = len(ents & entities[j])
            if shared >= min_shared:
                out.append((i, j, shared))
    return np.array(out, dtype=np.int64).reshape(-1, 3)


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
