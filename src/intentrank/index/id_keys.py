"""A segment's id keys: find the rows of given ids without reading every id of the index.

Each segment written since they exist holds ``id_keys.npy``, a ``(4, rows)`` uint64 array:
the 64-bit hashes of its passage ids sorted, the local row of each, then the same for its
units (a passage's parent id, or its own id when it has none). An update looks the ids and
units of its few documents up in every segment by binary search on the memory-mapped file
(what it costs follows the size of the change, not of the index); a hash is only a
candidate, each found row's own docs.jsonl line says whether it really holds that id. A
segment without the file (written before) makes the caller read every id, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.index.segments import segment_ids

KEYS_FILE = "id_keys.npy"


def key_of(text: str) -> int:
    """The 64-bit hash of an id (stable across processes and machines)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(),
                          "little")


def _sorted(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    keys = hashes_of(texts)
    order = np.argsort(keys, kind="stable")
    return keys[order], order.astype(np.uint64)


def write_keys(folder: Path, ids: Sequence[str], parents: Sequence[str | None]) -> None:
    """Write ``folder/id_keys.npy`` for a segment of these ids and parents (row order)."""
    id_keys, id_rows = _sorted(ids)
    unit_keys, unit_rows = _sorted([p or i for i, p in zip(ids, parents, strict=True)])
    np.save(folder / KEYS_FILE, np.stack([id_keys, id_rows, unit_keys, unit_rows]))


def check_keys(keys: np.ndarray, rows: int) -> None:
    """Raise ValueError unless ``keys`` is a segment of ``rows`` rows' id keys."""
    if keys.dtype != np.uint64 or keys.shape != (4, rows):
        raise ValueError(f"holds {keys.dtype} {keys.shape}, not uint64 (4, {rows})")


def hashes_of(texts: Sequence[str]) -> np.ndarray:
    """Each text's :func:`key_of`, as uint64."""
    return np.fromiter((key_of(t) for t in texts), dtype=np.uint64, count=len(texts))


def candidates(keys: np.ndarray, wanted: Sequence[str], want: np.ndarray, units: bool
               ) -> dict[str, list[int]]:
    """The local rows of a segment's ``keys`` whose id (``units``: unit) hash equals each
    wanted text's (``want``: their :func:`hashes_of`; candidates: the caller checks the
    row's id), ascending; texts without a candidate are left out."""
    column = 2 if units else 0
    hashes, rows = keys[column], keys[column + 1]
    lo = np.searchsorted(hashes, want, side="left")
    hi = np.searchsorted(hashes, want, side="right")
    return {text: sorted(int(r) for r in rows[a:b])
            for text, a, b in zip(wanted, lo.tolist(), hi.tolist(), strict=True) if b > a}


def segment_keys(index: Any, seg: int) -> np.ndarray | None:
    """Segment ``seg``'s id keys of an open Index, memory-mapped and checked (opened once);
    None for a segment written before them."""
    if seg not in index._id_keys:
        entry = index.segments[seg]
        rel = KEYS_FILE if entry.dir == "." else f"{entry.dir}/{KEYS_FILE}"
        keys = None
        if rel in index._files:
            with index._reading(rel) as file:
                keys = np.load(file, mmap_mode="r")
                check_keys(keys, entry.rows)
        index._id_keys[seg] = keys
    return index._id_keys[seg]


def lookup_rows(index: Any, wanted: Iterable[str], units: bool) -> dict[str, list[int]]:
    """The live rows of an open Index whose id (``units``: unit) is each of ``wanted``,
    ascending; texts it does not hold are left out. With every segment's id keys: a binary
    search per segment and one docs.jsonl line read per row found; else every id is read."""
    wanted = list(dict.fromkeys(wanted))
    if not wanted:
        return {}
    keys = [segment_keys(index, seg) for seg in range(len(index.segments))]
    if any(k is None for k in keys):  # a segment written before id keys: read every id
        return _scan(index, set(wanted), units)
    live, want = index.live, hashes_of(wanted)
    out: dict[str, list[int]] = {}
    for seg, seg_keys in enumerate(keys):
        start = int(index._seg_start[seg])
        for text, local in candidates(seg_keys, wanted, want, units).items():
            for row in local:
                phys = start + row
                if live is not None and not live.mask[phys]:
                    continue
                rec = json.loads(index.doc_line(phys, physical=True))
                if ((rec.get("parent_id") or rec["id"]) if units else rec["id"]) == text:
                    out.setdefault(text, []).append(
                        phys if live is None else int(live.virt_of[phys]))
    return out


def _scan(index: Any, wanted: set[str], units: bool) -> dict[str, list[int]]:
    if not units:
        row_of = index.row_of
        return {text: [row_of[text]] for text in wanted if text in row_of}
    every = index.all_units()
    return {unit: every[unit] for unit in wanted if unit in every}


class IdLookup:
    """An :class:`~intentrank.index.store.Index`'s ids: read when first asked for (every
    segment's ids.json); an update looks up the few it names in the id keys instead."""

    @cached_property
    def ids(self) -> list[str]:
        ids = segment_ids(self)
        live = self.live  # type: ignore[attr-defined]
        return ids if live is None else [ids[r] for r in live.phys.tolist()]

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {doc_id: i for i, doc_id in enumerate(self.ids)}

    @cached_property
    def id_array(self) -> np.ndarray:  # rows -> ids without a Python loop
        return np.array(self.ids, dtype=object)

    def rows_of_ids(self, ids: Iterable[str]) -> dict[str, int]:
        """The row of each of ``ids`` the index holds (the others left out)."""
        return {i: rows[0] for i, rows in lookup_rows(self, ids, units=False).items()}

    def all_units(self) -> dict[str, list[int]]:
        """Every unit the index holds (a parent id, or the id of a passage without one) and
        its rows, ascending: reads every id and parent (a sync compares them all)."""
        out: dict[str, list[int]] = {}
        parents = self.parent_of_rows  # type: ignore[attr-defined]
        for row, (doc_id, parent) in enumerate(zip(self.ids, parents, strict=True)):
            out.setdefault(parent or doc_id, []).append(row)
        return out

    def rows_of_units(self, units: Iterable[str]) -> dict[str, list[int]]:
        """The rows, ascending, of each of ``units`` (a parent id, or the id of a passage
        without one) the index holds (the others left out)."""
        return lookup_rows(self, units, units=True)
