"""Segments: an index generation (a commit point) is a list of immutable segments.

A segment holds one batch of passages with everything the legs need of them: docs.jsonl,
doc_offsets.npy, ids.json, parents.json, id_keys.npy (:mod:`intentrank.index.id_keys`),
dense/embeddings.npy (and its own ANN structure, dense/ann.faiss), terms/ (each row's BM25
term frequencies and TF-IDF counts) and graph/entities.json. A build (or a full merge)
writes one segment at the generation's top level (``dir`` "."), with the whole-corpus
structures a fresh build also writes (bm25/, tfidf/, graph/pagerank.npy); an add, an upsert
or a sync writes one new segment
``segments/seg-<id>/`` holding only its new and changed passages. A segment's deleted rows
are a file of the commit (``deleted.npy`` for the top-level segment, ``deletes/seg-<id>.npy``
for the others): a delete writes that file only.

Each generation directory holds its segments as hard links to the files of the generation it
was written from, so a commit writes only its new segment, its delete files and its manifest,
and a segment's files are freed when the last generation naming it is removed (which happens
only when no reader holds that generation: :mod:`intentrank.index.layout`).

The row order of a commit is its segments' rows in list order, deleted rows left out: what an
Index shows and what a fresh build of those documents in that order would number them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BASE = "."
SEGMENTS_DIR = "segments"
DELETES_DIR = "deletes"
BASE_DELETES = "deleted.npy"

SEGMENT_ANN_MIN_ROWS = 1024
"""A segment of fewer rows gets no ANN structure: it is searched exactly (cheap at that size,
and recall 1)."""
SEGMENTS_PER_TIER = 10
"""The tiered merge policy lets at most this many segments share a size tier (Lucene's
TieredMergePolicy ``segmentsPerTier``, 10) before merging them."""
MAX_MERGE_AT_ONCE = 10
"""Segments one merge combines at most (Lucene's ``maxMergeAtOnce``, 10)."""
FLOOR_ROWS = 1000
"""Segments below this many live rows count as this size when tiering (Lucene's
``floorSegmentMB``): tiny segments merge together early."""


@dataclass(frozen=True)
class SegmentEntry:
    """One segment of a commit: its directory (relative to the generation), its rows (as
    stored) and the file of its deleted rows (sorted local rows; None: none deleted)."""

    dir: str
    rows: int
    deleted: int = 0
    deletes: str | None = None

    @property
    def name(self) -> str:
        return "base" if self.dir == BASE else self.dir.rsplit("/", 1)[-1]

    @property
    def live(self) -> int:
        return self.rows - self.deleted

    def deletes_file(self) -> str:
        """Where this segment's deleted rows go in a new commit."""
        return BASE_DELETES if self.dir == BASE else f"{DELETES_DIR}/{self.name}.npy"

    def to_dict(self) -> dict[str, Any]:
        return {"dir": self.dir, "rows": self.rows, "deleted": self.deleted,
                "deletes": self.deletes}

    @classmethod
    def from_dict(cls, raw: Any) -> SegmentEntry:
        if not isinstance(raw, dict):
            raise ValueError(f"a segment record is {type(raw).__name__}, not an object")
        entry = cls(str(raw["dir"]), int(raw["rows"]), int(raw.get("deleted") or 0),
                    raw.get("deletes"))
        if entry.dir != BASE and not entry.dir.startswith(f"{SEGMENTS_DIR}/seg-"):
            raise ValueError(f"segment directory {entry.dir!r} is not {BASE!r} or "
                             f"{SEGMENTS_DIR}/seg-<id>")
        if entry.rows < 1 or not 0 <= entry.deleted < entry.rows:
            raise ValueError(f"segment {entry.dir}: {entry.deleted} of {entry.rows} rows "
                             f"deleted")
        return entry


def entries_of(manifest: dict[str, Any]) -> list[SegmentEntry]:
    """A manifest's segments (an index written before segments: one, at the top level)."""
    if "segments" in manifest:
        raw = manifest["segments"]
        if not isinstance(raw, list) or not raw:
            raise ValueError("'segments' is not a non-empty list")
        return [SegmentEntry.from_dict(r) for r in raw]
    deleted = int(manifest.get("deleted") or 0)
    rows = int(manifest["rows"]) if deleted else int(manifest["n_docs"])
    return [SegmentEntry(BASE, rows, deleted, BASE_DELETES if deleted else None)]


def new_segment_dir() -> str:
    return f"{SEGMENTS_DIR}/seg-{uuid.uuid4().hex[:12]}"


def segment_records(entry: SegmentEntry, files: dict[str, Any]) -> dict[str, Any]:
    """The file records (manifest ``files``) of a segment's own files (not its deletes)."""
    if entry.dir == BASE:
        return {rel: r for rel, r in files.items()
                if not rel.startswith((f"{SEGMENTS_DIR}/", f"{DELETES_DIR}/"))
                and rel != BASE_DELETES}
    return {rel: r for rel, r in files.items() if rel.startswith(entry.dir + "/")}


def check_rows(ids: Any, entry: SegmentEntry, offsets: np.ndarray, hint: str) -> list[str]:
    """A segment's ids.json, checked against its row count and doc offsets."""
    from intentrank.index.errors import IndexCorruptError

    if not isinstance(ids, list) or len(ids) != entry.rows or len(offsets) != entry.rows:
        raise IndexCorruptError(f"segment {entry.dir}: the manifest records {entry.rows} "
                                f"documents, ids.json holds {len(ids)} and doc_offsets.npy "
                                f"{len(offsets)}; {hint}")
    return ids


def load_deleted(gen_dir: Path, entry: SegmentEntry) -> np.ndarray:
    """A segment's deleted local rows, sorted (checked against its row count)."""
    if entry.deletes is None:
        return np.zeros(0, dtype=np.int64)
    dead = np.asarray(np.load(gen_dir / entry.deletes), dtype=np.int64)
    if dead.ndim != 1 or len(dead) != entry.deleted or (len(dead) and (
            dead.min() < 0 or dead.max() >= entry.rows or np.any(np.diff(dead) <= 0))):
        raise ValueError(f"holds {dead.shape} rows, not {entry.deleted} distinct sorted rows "
                         f"below {entry.rows}")
    return dead


def link(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (a copy where the file system has no hard links)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
        with open(dst, "rb") as fh:
            os.fsync(fh.fileno())


def open_segments(index: Any) -> tuple[list[np.ndarray], list[np.ndarray], list[Any],
                                       list[int]]:
    """Open every segment of an Index being opened: its deleted rows (as physical rows),
    doc offsets (memory-mapped, checked against its row count), open docs.jsonl and its
    size. Its ids are read when first needed (:func:`segment_ids`)."""
    from intentrank.index.errors import IndexCorruptError

    dead, offsets, fhs = [], [], []
    try:
        for entry, start in zip(index.segments, index._seg_start.tolist(), strict=False):
            rel = "" if entry.dir == BASE else entry.dir + "/"
            if entry.deletes is not None:
                with index._reading(entry.deletes):
                    dead.append(load_deleted(index.gen_dir, entry) + start)
            with index._reading(f"{rel}doc_offsets.npy") as file:
                offsets.append(np.load(file, mmap_mode="r"))
            if offsets[-1].shape != (entry.rows,):
                raise IndexCorruptError(f"segment {entry.dir}: the manifest records "
                                        f"{entry.rows} documents, doc_offsets.npy holds "
                                        f"{offsets[-1].shape}; {index._hint}")
            fhs.append(open(index.gen_dir / rel / "docs.jsonl", "rb"))  # noqa: SIM115
    except BaseException:
        for fh in fhs:
            fh.close()
        raise
    return dead, offsets, fhs, [os.fstat(fh.fileno()).st_size for fh in fhs]


def segment_ids(index: Any) -> list[str]:
    """Every segment's ids.json of an open Index, checked, concatenated (physical rows)."""
    ids: list[str] = []
    for entry, offsets in zip(index.segments, index._seg_offsets, strict=True):
        rel = "" if entry.dir == BASE else entry.dir + "/"
        with index._reading(f"{rel}ids.json") as file:
            ids += check_rows(json.loads(file.read_text()), entry, offsets, index._hint)
    return ids


def segment_vectors(index: Any) -> list[np.ndarray]:
    """Every segment's vectors of an open Index, memory-mapped, shapes checked."""
    from intentrank.index.errors import IndexCorruptError

    parts = []
    for entry, rel in zip(index.segments, segment_files(index.segments, "dense/embeddings.npy"),
                          strict=True):
        with index._reading(rel) as file:
            vecs = np.load(file, mmap_mode="r")
        if vecs.ndim != 2 or vecs.shape[0] != entry.rows:
            raise IndexCorruptError(f"{index.gen_dir / rel} has shape {vecs.shape}, expected "
                                    f"({entry.rows}, dim); {index._hint}")
        parts.append(vecs)
    return parts


def segment_files(entries: Sequence[SegmentEntry], name: str) -> list[str]:
    """File ``name`` of every segment, relative to the generation, in segment order."""
    return [name if e.dir == BASE else f"{e.dir}/{name}" for e in entries]


def segment_lists(index: Any, name: str) -> list[Any]:
    """The JSON lists ``name`` of every segment of an open Index, concatenated (physical
    rows)."""
    from intentrank.index.errors import IndexCorruptError

    out: list[Any] = []
    for entry, rel in zip(index.segments, segment_files(index.segments, name), strict=True):
        with index._reading(rel) as file:
            part = json.loads(file.read_text())
        if not isinstance(part, list) or len(part) != entry.rows:
            raise IndexCorruptError(f"{file} holds {len(part)} rows, not {entry.rows}; "
                                    f"{index._hint}")
        out += part
    return out


def load_term_rows(index: Any, name: str) -> Any:
    """The kept term data ``name`` of every segment of an open Index, stacked (physical
    rows); None for an index built before it was kept (one segment only)."""
    from intentrank.index.errors import IndexCorruptError
    from intentrank.index.terms import TermRows

    parts = []
    for entry in index.segments:
        with index._reading(f"{entry.dir}/terms/{name}.npz"):
            parts.append(TermRows.load(index.gen_dir / entry.dir, name))
    rows = parts[0] if len(parts) == 1 else (None if None in parts else TermRows.stack(parts))
    if rows is None and not index.flat:
        raise IndexCorruptError(f"{index.gen_dir} has deleted rows or several segments but "
                                f"not every segment has terms/{name}.npz; {index._hint}")
    return rows


def local_rows(index: Any, rows: np.ndarray | None) -> list[np.ndarray]:
    """An open Index's rows (all live rows if None; ascending) as each segment's local
    rows."""
    phys = np.arange(len(index)) if rows is None else np.asarray(rows, dtype=np.int64)
    if index.live is not None:
        phys = index.live.phys[phys]
    seg = np.searchsorted(index._seg_start, phys, side="right") - 1
    return [phys[seg == i] - int(index._seg_start[i]) for i in range(len(index.segments))]


# -- the merge policy ----------------------------------------------------------------------
def tier_of(live_rows: int) -> int:
    """A segment's size tier: segments within a factor of 10 of each other share one (sizes
    below FLOOR_ROWS count as FLOOR_ROWS)."""
    return int(math.floor(math.log10(max(live_rows, FLOOR_ROWS))))


def merge_candidates(entries: Sequence[SegmentEntry]) -> list[int] | None:
    """The segments (positions) the tiered policy merges now, or None: in the lowest tier
    holding more than SEGMENTS_PER_TIER segments, its MAX_MERGE_AT_ONCE smallest. A merge's
    result lands in a higher tier or stays, so repeated merges converge (Lucene's
    TieredMergePolicy, simplified: size tiers of a factor of 10 instead of its scored
    search; deletes are merged away by a delete itself, see
    :data:`intentrank.index.tombstones.MERGE_DELETED_SHARE`)."""
    tiers: dict[int, list[int]] = {}
    for i, entry in enumerate(entries):
        tiers.setdefault(tier_of(entry.live), []).append(i)
    for tier in sorted(tiers):
        members = tiers[tier]
        if len(members) > SEGMENTS_PER_TIER:
            smallest = sorted(members, key=lambda i: (entries[i].live, i))[:MAX_MERGE_AT_ONCE]
            return sorted(smallest)
    return None


def describe(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Each segment of a commit as a user sees it: name, rows, deleted, live, bytes (its
    files'), tier."""
    files = manifest["files"]
    return [{"segment": e.name, "dir": e.dir, "rows": e.rows, "deleted": e.deleted,
             "live": e.live, "tier": tier_of(e.live),
             "bytes": sum(int(r["size"]) for r in segment_records(e, files).values())}
            for e in entries_of(manifest)]


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=2)


class SegmentVectors:
    """The vectors of several segments (each memory-mapped) as one matrix of physical rows:
    a slice within one segment is that segment's memory map; anything else is gathered."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = parts
        self.starts = np.cumsum([0] + [len(p) for p in parts])
        self.dtype, self.ndim = parts[0].dtype, 2
        self.shape = (int(self.starts[-1]), parts[0].shape[1])

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice) and key.step in (None, 1):
            a, b, _ = key.indices(self.shape[0])
            seg = int(np.searchsorted(self.starts, a, side="right")) - 1
            if b <= self.starts[seg + 1]:
                return self.parts[seg][a - self.starts[seg]:b - self.starts[seg]]
        if isinstance(key, tuple):
            return np.asarray(self)[key]
        rows = np.arange(self.shape[0])[key]
        if np.ndim(rows) == 0:
            return self[int(rows):int(rows) + 1][0]
        seg = np.searchsorted(self.starts, rows, side="right") - 1
        out = np.empty((len(rows), self.shape[1]), dtype=self.dtype)
        for s in np.unique(seg).tolist():
            mine = seg == s
            out[mine] = self.parts[s][rows[mine] - self.starts[s]]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.concatenate([np.asarray(p) for p in self.parts])
        return out if dtype is None else out.astype(dtype)

    def __matmul__(self, other: Any) -> np.ndarray:
        return np.concatenate([np.asarray(p) @ other for p in self.parts])
