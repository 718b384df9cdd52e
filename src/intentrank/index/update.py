"""Update an index in place: upsert, delete and sync, each committed as a new generation.

An index is a list of immutable segments (:mod:`intentrank.index.segments`). An add, an
upsert or a sync writes one new segment holding only the new and changed passages, and marks
the rows they replace or remove as deleted; a delete writes only the deleted rows. Only the
new passages are tokenised and encoded (a passage whose id and text the index already holds
reuses that row's vectors, term data and entities). Every other file of the new generation
is a hard link to the live generation's. The lexical legs' corpus-wide statistics (BM25's
document frequencies and average length, TF-IDF's idf and norms, the entity graph) are
those of every live row of every segment (:class:`~intentrank.index.store.Index`), so every
leg returns exactly what an index built from scratch on the live documents, in the index's
row order (segment by segment), returns. A tiered merge policy merges small segments after an
add (:func:`intentrank.index.segments.merge_candidates`); :func:`merge` rewrites the index
as one segment. The commit is the build's (:func:`intentrank.index.build.commit_generation`):
one writer per directory, the new generation swapped in atomically, readers keep the
generation they opened, a crash at any point leaves the previous or the new generation.

The unit of an update is a document: passages with a ``parent_id`` (chunks, or the passages
of an ingested file) are replaced and deleted together with their siblings, and a changed
document's passages all move to the new segment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.data.corpus import chunk_documents
from intentrank.errors import IntentrankError
from intentrank.index.build import Progress, _sigterm_raises, commit_generation, doc_line
from intentrank.index.segments import merge_candidates
from intentrank.index.store import Index
from intentrank.index.tombstones import MERGE_DELETED_SHARE
from intentrank.index.writer import Change, Plan, UpdateStats, write_commit, write_generation
from intentrank.types import Document


def unit_of(doc: Document) -> str:
    """The document a passage belongs to: its parent's id, or its own."""
    return doc.parent_id or doc.id





def _take_units(index: Index, units: dict[str, list[Document]], rows_of: dict[str, list[int]],
                change: Change, stats: UpdateStats) -> None:
    """Put each new or changed unit's documents into ``change`` (a changed one's old rows
    dropped); count every unit as added, replaced or unchanged in ``stats``."""
    for unit, new in units.items():
        old = rows_of.get(unit)
        if old is not None and _same_lines(index, old, new):
            stats.unchanged += 1
            continue
        if old is None:
            stats.added += 1
        else:
            stats.replaced += 1
            change.drop[old] = True
        change.add += new

def upsert(path: str | Path, docs: Iterable[Document], *, log: Progress | None = None,
           progress: bool = False, embedding_cache: bool = True,
           folder: dict[str, Any] | None = None, merge_policy: bool = True) -> UpdateStats:
    """Add new documents, replace changed ones and skip unchanged ones (same docs.jsonl
    lines): one new segment holds the new and changed documents, the rows they replace are
    deleted. Chunked indexes chunk ``docs`` first. ``folder``: how a folder was read, kept
    in the commit (``intentrank.cli.ingest.FolderOptions``). ``merge_policy=False``: the
    tiered policy's merges are not run after the commit (a background merger runs them:
    ``serve --watch-index``)."""
    def plan_for(index: Index, stats: UpdateStats) -> Change | None:
        incoming = list(docs)
        if index.settings.chunk_size:
            incoming = list(chunk_documents(incoming, index.settings.chunk_size,
                                            index.settings.chunk_overlap))
        units: dict[str, list[Document]] = {}
        for doc in incoming:
            units.setdefault(unit_of(doc), []).append(doc)
        _check_unique(incoming)
        rows_of = index.rows_of_units(units)  # only the units this update names
        change = Change(np.zeros(len(index), dtype=bool))
        _take_units(index, units, rows_of, change, stats)
        return change if change.add else None

    return _update(path, plan_for, log, progress, embedding_cache, folder=folder,
                   policy=merge_policy)


def delete(path: str | Path, ids: Sequence[str] = (), filter: Any = None, *,
           log: Progress | None = None, missing_ok: bool = False) -> UpdateStats:
    """Delete documents by id (a parent id deletes all its passages) and/or every passage a
    filter matches (:mod:`intentrank.filters`). An id the index does not hold is an error
    unless ``missing_ok``.

    The rows are marked deleted in their segments: the new generation links every segment's
    files and writes the changed segments' deleted rows, so the delete costs what it
    deletes. When more than ``MERGE_DELETED_SHARE`` of the rows would then be dead, it merges
    instead: one segment of the live rows (:func:`merge`)."""
    def plan_for(index: Index, stats: UpdateStats) -> Change | None:
        drop = _rows_named(index, set(ids), missing_ok)
        if filter is not None:
            drop |= index.allowed_rows(filter)
        if not drop.any():
            return None
        stats.deleted = len({json.loads(index.doc_line(r)).get("parent_id") or index.ids[r]
                             for r in np.flatnonzero(drop).tolist()})
        return Change(drop)

    return _update(path, plan_for, log, False)


def merge(path: str | Path, *, log: Progress | None = None) -> UpdateStats:
    """Rewrite the index's live rows as one segment without deletes, the same index a build
    of its documents (in its row order) gives. Nothing to do (one segment, nothing
    deleted): nothing written."""
    def plan_for(index: Index, stats: UpdateStats) -> Plan | None:
        stats.unchanged = len(index.all_units())
        stats.merged = not index.flat
        return list(range(len(index))) if not index.flat else None

    return _update(path, plan_for, log, False)


def merge_tiers(path: str | Path, *, log: Progress | None = None) -> UpdateStats:
    """Merge what the tiered merge policy asks for now
    (:func:`~intentrank.index.segments.merge_candidates`), repeatedly, each merge its own
    commit; nothing to merge: nothing written."""
    total = UpdateStats()
    while True:
        stats = _update(path, _policy_plan, log, False, policy=False)
        if not stats.merged:
            total.passages = total.passages or stats.passages
            total.generation = total.generation or stats.generation
            total.segments = stats.segments
            return total
        total.merged, total.passages = True, stats.passages
        total.generation, total.segments = stats.generation, stats.segments
        total.seconds += stats.seconds


def _policy_plan(index: Index, stats: UpdateStats) -> Change | None:
    picked = merge_candidates(index.segments)
    if picked is None:
        return None
    stats.merged = True
    rows = np.concatenate([_segment_rows(index, i) for i in picked]).tolist()
    return Change(np.zeros(len(index), dtype=bool), list(rows), picked)


def _segment_rows(index: Index, seg: int) -> np.ndarray:
    """The live (virtual) rows of segment ``seg``."""
    start, end = int(index._seg_start[seg]), int(index._seg_start[seg + 1])
    if index.live is None:
        return np.arange(start, end)
    virt = index.live.virt_of[start:end]
    return virt[virt >= 0]


def _rows_named(index: Index, gone: set[str], missing_ok: bool) -> np.ndarray:
    """The rows ``gone`` names (passage ids, or parent ids: all their passages), as a mask.
    Both are looked up in the segments' id keys (only the ids named are read)."""
    drop = np.zeros(len(index), dtype=bool)
    found = index.rows_of_ids(gone)
    drop[list(found.values())] = True
    rest = gone - found.keys()
    if rest:
        parents = index.rows_of_units(rest)  # a unit not found as a passage id: a parent
        for rows in parents.values():
            drop[rows] = True
        unknown = sorted(rest - parents.keys())
        if unknown and not missing_ok:
            raise IntentrankError(f"{index.path} holds no document {unknown[0]!r}"
                                  + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1
                                     else ""))
    return drop


def sync(path: str | Path, docs: Iterable[Document], *, log: Progress | None = None,
         progress: bool = False, embedding_cache: bool = True,
         keep: Iterable[str] = (), folder: dict[str, Any] | None = None,
         merge_policy: bool = True) -> UpdateStats:
    """Make the index hold exactly ``docs`` (e.g. a folder read by
    :func:`intentrank.data.ingest.read_folder`): documents whose passages are unchanged keep
    their rows, new and changed ones go to one new segment (in ``docs``' order), the others
    are deleted; only new and changed passages are encoded. Documents named in ``keep``
    (e.g. files that could not be read this time) keep their passages. ``merge_policy``: as
    :func:`upsert`'s."""
    keep = set(keep)

    def plan_for(index: Index, stats: UpdateStats) -> Change | None:
        incoming = list(docs)
        if index.settings.chunk_size:
            incoming = list(chunk_documents(incoming, index.settings.chunk_size,
                                            index.settings.chunk_overlap))
        _check_unique(incoming)
        if not incoming:
            raise IntentrankError("sync with no documents would empty the index; delete it "
                                  "instead")
        units: dict[str, list[Document]] = {}
        for doc in incoming:
            units.setdefault(unit_of(doc), []).append(doc)
        rows_of = index.all_units()
        change = Change(np.zeros(len(index), dtype=bool))
        for unit, old in rows_of.items():
            if unit not in units and unit not in keep:
                stats.deleted += 1
                change.drop[old] = True
        _take_units(index, units, rows_of, change, stats)
        return change if (change.add or change.drop.any()) else None

    return _update(path, plan_for, log, progress, embedding_cache, folder=folder,
                   policy=merge_policy)


def _check_unique(docs: Sequence[Document]) -> None:
    seen: set[str] = set()
    for doc in docs:
        if doc.id in seen:
            raise IntentrankError(f"duplicate document id {doc.id!r} in the update")
        seen.add(doc.id)


def _same_lines(index: Index, rows: Sequence[int], new: Sequence[Document]) -> bool:
    """Whether the live rows ``rows`` hold exactly ``new``'s docs.jsonl lines."""
    return len(rows) == len(new) and all(index.doc_line(r) == doc_line(d)
                                         for r, d in zip(rows, new, strict=True))


def _update(path: str | Path, plan_for: Any, log: Progress | None, progress: bool,
            embedding_cache: bool = True, *, folder: dict[str, Any] | None = None,
            policy: bool = True) -> UpdateStats:
    """Commit what ``plan_for(live index, stats)`` describes (None: no change; a Change: a
    new segment and deletes; a Plan: a rewrite into one segment), then, after an add (and
    ``policy``), what the tiered merge policy asks for. ``embedding_cache=False`` encodes
    new passages instead of looking them up in the shared embedding cache (as
    :func:`~intentrank.index.build.build_index`). ``folder``: recorded in the commit."""
    path = Path(path)
    say = log or (lambda msg: None)
    stats = UpdateStats()
    t0 = time.perf_counter()
    if not Index.exists(path):
        raise IntentrankError(f"{path} holds no index to update; build one with "
                              f"`intentrank index SRC {path}`")

    def write(tmp: Path, existing: Index | None) -> Index | None:
        if existing is None:  # pragma: no cover - Index.exists was checked
            raise IntentrankError(f"{path} holds no index to update")
        plan = plan_for(existing, stats)
        extra = _folder_record(existing, folder)
        if plan is None:
            if folder is None or extra.get("folder") == existing.manifest.get("folder"):
                say(f"{path}: nothing to change ({stats.summary()})")
                return existing
            plan = Change(np.zeros(len(existing), dtype=bool))  # the folder options alone
        if isinstance(plan, Change):
            dropping = int(plan.drop.sum())
            if dropping == len(existing) and not plan.add:
                raise IntentrankError(f"the update would leave {path} with no documents; "
                                      f"delete the index directory instead")
            kept = _terms_kept(existing)
            if kept and (plan.add or plan.merged or _deletes_fit(existing, dropping)):
                t = time.perf_counter()
                stats.tombstones = write_commit(existing, plan, tmp, stats, say, progress,
                                                embedding_cache, extra)
                stats.timings.setdefault("commit", time.perf_counter() - t)
                return None
            # deletes past the share, or an index built before term data was kept: rewrite
            stats.merged = not plan.add
            plan = [int(r) for r in np.flatnonzero(~plan.drop)] + plan.add
        write_generation(existing, plan, tmp, stats, say, progress, embedding_cache, extra)
        return None

    with _sigterm_raises(path) as guard:
        index = commit_generation(path, guard, write, say)
    stats.passages = len(index)
    stats.generation = index.generation
    stats.segments = len(index.segments)
    due = policy and stats.added + stats.replaced and merge_candidates(index.segments)
    index.close()
    stats.seconds = time.perf_counter() - t0
    say(f"{path}: {stats.summary()}")
    if due:
        merged = merge_tiers(path, log=log)
        stats.generation, stats.segments = merged.generation, merged.segments
        stats.merged = merged.merged
        stats.timings["merge"] = merged.seconds
        stats.seconds = time.perf_counter() - t0
    return stats


def _folder_record(index: Index, folder: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest's ``folder`` entry for the new commit: the given options, else the live
    commit's."""
    recorded = folder if folder is not None else index.manifest.get("folder")
    return {} if recorded is None else {"folder": recorded}


def _terms_kept(index: Index) -> bool:
    """Whether every segment keeps its term data (built since updates exist)."""
    lexical = [leg for leg in ("bm25", "tfidf") if index.has(leg)]
    return all(f"{e.dir}/terms/{leg}.npz".removeprefix("./") in index._files
               for e in index.segments for leg in lexical)


def _deletes_fit(index: Index, dropping: int) -> bool:
    """Whether deleting ``dropping`` more rows may just mark them: the dead rows stay within
    MERGE_DELETED_SHARE of the rows the segments hold."""
    return index.rows_deleted + dropping <= MERGE_DELETED_SHARE * index._n_phys
