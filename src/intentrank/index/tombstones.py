"""Deletes as tombstones: a generation that shares its files with the one before it.

A delete does not rewrite the index. It commits a generation whose files are hard links to
the live generation's (docs, vectors, ANN graph, term rows, ...) plus ``deleted.npy``, the
sorted *physical* rows that are gone. So a delete writes what it deletes: a list of rows and
a manifest, whatever the index's size. An :class:`~intentrank.index.store.Index` opened on
such a generation shows only the live rows, renumbered ``0..n-1`` in physical order (exactly
the rows, ids and order of a build of the remaining documents): :class:`LiveRows` maps
between the two numberings. The dense leg searches the shared vectors with the dead rows
masked out; the lexical legs' corpus-wide statistics (BM25's document frequencies and
average length, TF-IDF's idf and norms, the graph's edges and PageRank) are recomputed from
the live rows' kept term data when a reader first uses the leg
(:mod:`intentrank.index.terms`), so every leg returns what a fresh build returns.

When deletes pile up (more than :data:`MERGE_DELETED_SHARE` of the physical rows), the delete
that crosses the line merges instead: it writes a compact generation from the live rows, as
any update does (:func:`intentrank.index.update.merge`). Like every update it is committed
atomically, and readers keep the generation they opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.index import layout
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


def load_live(gen_dir: Path, manifest: dict[str, Any]) -> LiveRows | None:
    """The generation's live rows, or None if it has no tombstones."""
    if not manifest.get("deleted"):
        return None
    deleted = np.load(gen_dir / DELETED_FILE)
    return LiveRows(deleted, int(manifest["rows"]))


def write_tombstones(existing: Any, drop: np.ndarray, tmp: Path) -> int:
    """Fill ``tmp`` with a generation that is ``existing`` (an open Index) without its
    virtual rows ``drop`` (a bool mask): hard links to its files, the dead physical rows and
    a manifest. Returns how many rows are dead in the new generation."""
    live = existing.live or LiveRows(np.zeros(0, dtype=np.int64), len(existing))
    dead = np.union1d(live.deleted, live.phys[drop])
    records = dict(existing.manifest["files"])
    records.pop(DELETED_FILE, None)
    for rel in records:
        _link(existing.gen_dir / rel, tmp / rel)
    np.save(tmp / DELETED_FILE, dead)
    records.update(layout.record_files_named(tmp, [DELETED_FILE]))
    manifest = {**existing.manifest, "corpus_sha256": None,
                "n_docs": live.n_phys - len(dead), "rows": live.n_phys,
                "deleted": int(len(dead)), "files": records}
    layout.fsync_dir(tmp)
    with open(tmp / layout.MANIFEST, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=2))
        fh.flush()
        os.fsync(fh.fileno())
    return int(len(dead))


def _link(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (a copy where the file system has no hard links)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
        with open(dst, "rb") as fh:
            os.fsync(fh.fileno())
