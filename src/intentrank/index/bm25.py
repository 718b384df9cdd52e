"""BM25 retrieval over a bm25s index with a chosen backend, ties ordered by row.

``numpy`` (the default) is bm25s's pure numpy scorer; ``numba`` is bm25s's own JIT-compiled
scorer and top-k heap (the ``scale`` extra installs numba). Both sum the same precomputed
float32 term scores in the same order, so their scores are identical; they break ties
differently, so every result here is re-ordered by (score descending, row ascending) and,
where a tie straddles the k-th place, retrieved deeper until it does not: both backends
return the same rows. The backend is a search-time choice: an index built with one can be
searched with the other (:meth:`intentrank.index.Index.set_bm25_backend`). The numba
functions are compiled on the first query of each process (bm25s does not cache them on disk).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from intentrank.errors import IntentrankError
from intentrank.index.hits import NO_HITS, Hits
from intentrank.index.settings import check_bm25_backend

_EXTRA = 16  # results retrieved beyond k, to see whether a tie crosses the k-th place


def check_backend(backend: str) -> str:
    """``backend`` if it is known and usable here; a named error otherwise. Checked once,
    when a backend is chosen (:meth:`intentrank.index.Index.set_bm25_backend`, or the
    index's own setting when its BM25 leg loads); searches trust the chosen value."""
    if check_bm25_backend(backend) == "numba":
        try:
            import numba  # noqa: F401
        except ImportError as exc:
            raise IntentrankError("bm25.backend 'numba' needs numba: pip install "
                                  "'intentrank[scale]' (or pip install numba)") from exc
    return backend


def retrieve(retriever: Any, tokens: list[list[str]], k: int, backend: str = "numpy",
             offset: int = 0, allow: np.ndarray | None = None) -> list[Hits]:
    """Each tokenised query's positive top ``k`` from one bm25s index, best first, ties by
    row; rows are shifted by ``offset`` (a shard's first row). Queries without a term of the
    index's vocabulary get no hits. ``allow`` (a bool mask over the index's rows) keeps the
    search to those rows: the top ``k`` among them (bm25s's ``weight_mask``)."""
    out: list[Hits] = [NO_HITS for _ in tokens]
    n = int(retriever.scores["num_docs"])
    k = min(k, n)
    live = [i for i, t in enumerate(tokens) if any(tok in retriever.vocab_dict for tok in t)]
    if not live or k < 1 or (allow is not None and not allow.any()):
        return out
    mask = None if allow is None else allow.astype(np.float32)
    retriever.backend = backend  # bm25s reads it in retrieve(); the index is unchanged
    depth = min(n, k + _EXTRA)
    pending = live
    while pending:
        res = retriever.retrieve([tokens[i] for i in pending], k=depth, show_progress=False,
                                 weight_mask=mask)
        again = []
        for j, i in enumerate(pending):
            rows = np.asarray(res.documents[j], dtype=np.int64)
            scores = np.asarray(res.scores[j])
            kth, last = scores[k - 1], scores[-1]
            if depth < n and kth > 0 and last >= kth:
                again.append(i)  # the k-th score's tie may reach beyond what was retrieved
                continue
            order = np.lexsort((rows, -scores))[:k]
            rows, scores = rows[order], scores[order]
            keep = scores > 0
            out[i] = Hits(rows[keep] + offset, scores[keep]) if keep.any() else NO_HITS
        pending = again
        depth = min(n, depth * 2)
    return out
