"""Deleted rows: an index whose segments hold rows that are gone.

A delete does not rewrite a segment: the commit lists each segment's deleted rows
(:mod:`intentrank.index.segments`). An :class:`~intentrank.index.store.Index` shows only the
live rows, renumbered ``0..n-1`` in physical order (segment after segment): exactly the rows,
ids and order of a build of the remaining documents. :class:`LiveRows` maps between the two
numberings. The dense leg searches the shared vectors with the dead rows masked out; the
lexical legs' corpus-wide statistics are those of the live rows' kept term data, combined
when a reader first uses the leg (:mod:`intentrank.index.bm25_scorer`,
:mod:`intentrank.index.tfidf_segments`, :mod:`intentrank.index.graph_segments`), so every
leg returns what a fresh build returns. When deletes pile up (more than
:data:`MERGE_DELETED_SHARE` of the rows the segments hold), the delete that crosses the line
rewrites the live rows as one segment instead (:func:`intentrank.index.update.merge`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from intentrank.index.hits import Hits

DELETED_FILE = "deleted.npy"
MERGE_DELETED_SHARE = 0.2
"""A delete that would leave more than this share of a generation's physical rows dead
writes a compact generation instead (docs/benchmarks.md "Updates and filters": what the dead
rows cost readers, against what a merge costs)."""


class LiveRows:
    """The live rows of a generation with tombstones: virtual row ``i`` (what an Index shows)
    is physical row ``phys[i]`` (what its files hold)."""

    def __init__(self, deleted: np.ndarray, n_phys: int) -> None:
        self.deleted = np.asarray(deleted, dtype=np.int64)
        self.n_phys = n_phys
        self.mask = np.ones(n_phys, dtype=bool)
        self.mask[self.deleted] = False
        self.phys = np.flatnonzero(self.mask)
        self.virt_of = np.full(n_phys, -1, dtype=np.int64)
        self.virt_of[self.phys] = np.arange(len(self.phys))

    def __len__(self) -> int:
        return len(self.phys)

    def physical_allow(self, allow: np.ndarray | None) -> np.ndarray:
        """A virtual ``allow`` mask (or None: every live row) as a mask over physical rows."""
        if allow is None:
            return self.mask
        out = np.zeros(self.n_phys, dtype=bool)
        out[self.phys[allow]] = True
        return out

    def virtual_hits(self, hits: list[Hits]) -> list[Hits]:
        """Hits over physical rows (never a dead one) renumbered to virtual rows."""
        return [Hits(self.virt_of[h.rows], h.scores) for h in hits]


class RowView:
    """The live rows of a physical array (e.g. the memory-mapped vectors) as if it held only
    them: indexing, ``shape``, ``@`` and ``np.asarray`` use virtual rows."""

    def __init__(self, base: np.ndarray, live: LiveRows) -> None:
        self.base, self.live = base, live
        self.dtype, self.ndim = base.dtype, base.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.live), *self.base.shape[1:])

    def __len__(self) -> int:
        return len(self.live)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            return self.base[(self.live.phys[key[0]], *key[1:])]
        return self.base[self.live.phys[key]]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self.base[self.live.phys])
        return out if dtype is None else out.astype(dtype)

    def __matmul__(self, other: Any) -> np.ndarray:
        return np.asarray(self) @ other


def lines_sha256(lines: Iterable[bytes]) -> str:
    """The corpus hash of these docs.jsonl lines (a generation with tombstones computes its
    live lines' hash when asked)."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line)
    return digest.hexdigest()
