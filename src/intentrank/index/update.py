"""Update an index in place: upsert, delete and sync, each committed as a new generation.

An update writes a complete generation, like a build, but from the live one: documents it
keeps are copied (their docs.jsonl lines, dense vectors, BM25 term frequencies, TF-IDF counts
and entities; see :mod:`intentrank.index.terms`), only new and changed passages are
tokenised and encoded, and the corpus-wide parts of the lexical legs (BM25 impact scores with
the corpus's document frequencies and average length, TF-IDF weights, the entity graph) are
computed from those rows. So every leg of the updated index returns exactly what an index
built from scratch on the final corpus (in the index's row order) returns, and its corpus hash
is that index's. The commit is the build's (:func:`intentrank.index.build.commit_generation`):
one writer per directory, the new generation swapped in atomically, readers keep the
generation they opened, a crash at any point leaves the previous or the new generation.

The unit of an update is a document: passages with a ``parent_id`` (chunks, or the passages
of an ingested file) are replaced and deleted together with their siblings.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.data.corpus import chunk_documents
from intentrank.errors import IntentrankError
from intentrank.index.build import (
    Progress,
    _sigterm_raises,
    commit_generation,
    doc_line,
    embedding_cache_for,
    write_manifest,
)
from intentrank.index.entities import extract_entities
from intentrank.index.hits import bm25_tokenize
from intentrank.index.legs import encode_passages, write_dense
from intentrank.index.store import Index
from intentrank.index.terms import (
    TermRows,
    bm25_from_rows,
    save_graph,
    save_tfidf,
    tfidf_from_rows,
    tfidf_rows,
)
from intentrank.index.tombstones import MERGE_DELETED_SHARE, write_tombstones
from intentrank.types import Document


@dataclass
class UpdateStats:
    """What an update did, counted in documents (a document's passages count once)."""

    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    deleted: int = 0
    passages: int = 0  # in the index afterwards
    encoded: int = 0  # passages whose text was new, tokenised and encoded
    tombstones: int = 0  # a delete kept the files: rows now dead in them (0: compact)
    merged: bool = False  # a delete crossed MERGE_DELETED_SHARE and wrote a compact generation
    seconds: float = 0.0
    generation: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced or self.deleted)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        how = (f" ({self.tombstones} dead rows kept until a merge)" if self.tombstones else
               " (merged: compact)" if self.merged else "")
        return (f"{self.added} added, {self.replaced} replaced, {self.unchanged} unchanged, "
                f"{self.deleted} deleted{how}; {self.passages} passages, {self.encoded} "
                f"encoded, {self.seconds:.1f}s")


def unit_of(doc: Document) -> str:
    """The document a passage belongs to: its parent's id, or its own."""
    return doc.parent_id or doc.id


# The new generation's rows: an int is a row of the live generation kept as it is, a
# Document a passage written anew (its leg data reused when the live generation holds the
# same id with the same text).
Plan = list[int | Document]


def upsert(path: str | Path, docs: Iterable[Document], *, log: Progress | None = None,
           progress: bool = False, embedding_cache: bool = True) -> UpdateStats:
    """Add new documents, replace changed ones (in place: their rows keep their position) and
    skip unchanged ones (same docs.jsonl lines). Chunked indexes chunk ``docs`` first."""
    def plan_for(index: Index, stats: UpdateStats) -> Plan | None:
        incoming = list(docs)
        if index.settings.chunk_size:
            incoming = list(chunk_documents(incoming, index.settings.chunk_size,
                                            index.settings.chunk_overlap))
        units: dict[str, list[Document]] = {}
        for doc in incoming:
            units.setdefault(unit_of(doc), []).append(doc)
        _check_unique(incoming)
        old_units = _units(index)
        rows_of: dict[str, list[int]] = {}
        for row, unit in enumerate(old_units):
            rows_of.setdefault(unit, []).append(row)
        plan: Plan = []
        placed: set[str] = set()
        for row, unit in enumerate(old_units):
            if unit not in units:
                plan.append(row)
            elif unit not in placed:
                placed.add(unit)
                new = units[unit]
                if _same_lines(index, rows_of[unit], new):
                    stats.unchanged += 1
                    plan.extend(rows_of[unit])
                else:
                    stats.replaced += 1
                    plan.extend(new)
        for unit, new in units.items():
            if unit not in placed:
                stats.added += 1
                plan.extend(new)
        return plan if (stats.added or stats.replaced) else None

    return _update(path, plan_for, log, progress, embedding_cache)


def delete(path: str | Path, ids: Sequence[str] = (), filter: Any = None, *,
           log: Progress | None = None, missing_ok: bool = False) -> UpdateStats:
    """Delete documents by id (a parent id deletes all its passages) and/or every passage a
    filter matches (:mod:`intentrank.filters`). An id the index does not hold is an error
    unless ``missing_ok``.

    The rows are tombstoned (:mod:`intentrank.index.tombstones`): the new generation links
    the live one's files and lists the rows that are gone, so the delete costs what it
    deletes. When more than ``MERGE_DELETED_SHARE`` of the rows would then be dead, it merges
    instead: a compact generation of the live rows (:func:`merge`)."""
    def plan_for(index: Index, stats: UpdateStats) -> Plan | np.ndarray | None:
        drop = _rows_named(index, set(ids), missing_ok)
        if filter is not None:
            drop |= index.allowed_rows(filter)
        if not drop.any():
            return None
        stats.deleted = len({json.loads(index.doc_line(r)).get("parent_id") or index.ids[r]
                             for r in np.flatnonzero(drop).tolist()})
        return drop

    return _update(path, plan_for, log, False)


def merge(path: str | Path, *, log: Progress | None = None) -> UpdateStats:
    """Write the index's live rows as a compact generation (no tombstones), the same index a
    build of its documents gives. Deletes merge by themselves when tombstones pile up
    (``MERGE_DELETED_SHARE``); this does it now. Nothing to do: nothing written."""
    def plan_for(index: Index, stats: UpdateStats) -> Plan | None:
        stats.unchanged = len(set(_units(index)))
        stats.merged = bool(index.rows_deleted)
        return list(range(len(index))) if index.rows_deleted else None

    return _update(path, plan_for, log, False)


def _rows_named(index: Index, gone: set[str], missing_ok: bool) -> np.ndarray:
    """The rows ``gone`` names (passage ids, or parent ids: all their passages), as a mask.
    Passage ids are looked up directly; only ids that are not passages' make it read every
    row's parent."""
    drop = np.zeros(len(index), dtype=bool)
    rest = set()
    for doc_id in gone:
        row = index.row_of.get(doc_id)
        if row is None:
            rest.add(doc_id)
        else:
            drop[row] = True
    if rest:
        parents = index.parent_of_rows
        found = set()
        for row, parent in enumerate(parents):
            if parent in rest:
                drop[row] = True
                found.add(parent)
        unknown = sorted(rest - found)
        if unknown and not missing_ok:
            raise IntentrankError(f"{index.path} holds no document {unknown[0]!r}"
                                  + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1
                                     else ""))
    return drop


def sync(path: str | Path, docs: Iterable[Document], *, log: Progress | None = None,
         progress: bool = False, embedding_cache: bool = True,
         keep: Iterable[str] = ()) -> UpdateStats:
    """Make the index hold exactly ``docs`` (e.g. a folder read by
    :func:`intentrank.data.ingest.read_folder`), in their order: the result is the index a
    build of ``docs`` gives, while only new and changed passages are encoded. Documents
    named in ``keep`` (e.g. files that could not be read this time) keep their passages,
    after the others."""
    keep = set(keep)

    def plan_for(index: Index, stats: UpdateStats) -> Plan | None:
        incoming = list(docs)
        if index.settings.chunk_size:
            incoming = list(chunk_documents(incoming, index.settings.chunk_size,
                                            index.settings.chunk_overlap))
        _check_unique(incoming)
        if not incoming:
            raise IntentrankError("sync with no documents would empty the index; delete it "
                                  "instead")
        old_units = _units(index)
        old_line = {doc_id: row for row, doc_id in enumerate(index.ids)}
        plan: Plan = []
        for doc in incoming:
            row = old_line.get(doc.id)
            plan.append(row if row is not None and index.doc_line(row) == doc_line(doc)
                        else doc)
        new_units = [unit_of(d) for d in incoming]
        present = set(new_units)
        kept = [r for r, u in enumerate(old_units) if u in keep and u not in present]
        plan += kept
        new_units += [old_units[r] for r in kept]
        incoming = incoming + [index.doc(index.ids[r]) for r in kept]
        before = _group(old_units, [index.doc_line(r) for r in range(len(index))])
        after = _group(new_units, [doc_line(d) for d in incoming])
        stats.added = len(set(after) - set(before))
        stats.deleted = len(set(before) - set(after))
        stats.replaced = sum(1 for u in after if u in before and after[u] != before[u])
        stats.unchanged = sum(1 for u in after if u in before and after[u] == before[u])
        if plan == list(range(len(index))):
            return None
        return plan

    return _update(path, plan_for, log, progress, embedding_cache)


def _check_unique(docs: Sequence[Document]) -> None:
    seen: set[str] = set()
    for doc in docs:
        if doc.id in seen:
            raise IntentrankError(f"duplicate document id {doc.id!r} in the update")
        seen.add(doc.id)


def _group(units: Sequence[str], lines: Sequence[bytes]) -> dict[str, str]:
    digests: dict[str, Any] = {}
    for unit, line in zip(units, lines, strict=True):
        digests.setdefault(unit, hashlib.sha256()).update(line)
    return {u: d.hexdigest() for u, d in digests.items()}


def _units(index: Index) -> list[str]:
    parents = index.parent_of_rows
    return [p or i for p, i in zip(parents, index.ids, strict=True)]


def _same_lines(index: Index, rows: Sequence[int], new: Sequence[Document]) -> bool:
    """Whether the live rows ``rows`` hold exactly ``new``'s docs.jsonl lines."""
    return len(rows) == len(new) and all(index.doc_line(r) == doc_line(d)
                                         for r, d in zip(rows, new, strict=True))


def _update(path: str | Path, plan_for: Any, log: Progress | None, progress: bool,
            embedding_cache: bool = True) -> UpdateStats:
    """Commit the generation ``plan_for(live index, stats)`` describes (None: no change).
    ``embedding_cache=False`` encodes new passages instead of looking them up in the shared
    embedding cache (as :func:`~intentrank.index.build.build_index`)."""
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
        _check_updatable(existing)
        plan = plan_for(existing, stats)
        if plan is None:
            say(f"{path}: nothing to change ({stats.summary()})")
            return existing
        if isinstance(plan, np.ndarray):  # a delete: these rows go
            if plan.all():
                raise IntentrankError(f"the update would leave {path} with no documents; "
                                      f"delete the index directory instead")
            if _tombstones_fit(existing, int(plan.sum())):
                t = time.perf_counter()
                stats.tombstones = write_tombstones(existing, plan, tmp)
                stats.timings = {"tombstones": time.perf_counter() - t}
                return None
            stats.merged = True
            plan = [int(r) for r in np.flatnonzero(~plan)]
        if not plan:
            raise IntentrankError(f"the update would leave {path} with no documents; "
                                  f"delete the index directory instead")
        _write_generation(existing, plan, tmp, stats, say, progress, embedding_cache)
        return None

    with _sigterm_raises(path) as guard:
        index = commit_generation(path, guard, write, say)
    stats.passages = len(index)
    stats.generation = index.generation
    stats.seconds = time.perf_counter() - t0
    index.close()
    say(f"{path}: {stats.summary()}")
    return stats


def _tombstones_fit(index: Index, dropping: int) -> bool:
    """Whether deleting ``dropping`` more rows may be tombstoned: the index keeps its term
    data (built since updates exist) and the dead rows stay within MERGE_DELETED_SHARE."""
    rows = len(index) + index.rows_deleted
    lexical = [leg for leg in ("bm25", "tfidf") if index.has(leg)]
    kept = all((index.gen_dir / "terms" / f"{leg}.npz").is_file() for leg in lexical)
    return kept and index.rows_deleted + dropping <= MERGE_DELETED_SHARE * rows


def _check_updatable(index: Index) -> None:
    s = index.settings
    if s.shards > 1:
        raise IntentrankError(f"{index.path} is sharded (shards={s.shards}); updates need an "
                              f"unsharded index: rebuild it with shards 1")
    if "bm25" in s.legs and s.bm25.method in ("bm25l", "bm25+"):
        raise IntentrankError(f"{index.path} uses bm25.method {s.bm25.method!r}; updates "
                              f"support lucene, robertson and atire")


def _write_generation(old: Index, plan: Plan, tmp: Path, stats: UpdateStats, say: Progress,
                      progress: bool, embedding_cache: bool) -> None:
    """Write the generation ``plan`` describes into ``tmp``."""
    settings = old.settings
    timings: dict[str, float] = {}
    t = time.perf_counter()
    old_rows, new_docs, order = _split(old, plan)
    digest = hashlib.sha256()
    offsets = np.zeros(len(plan), dtype=np.int64)
    ids: list[str] = []
    parents: list[str | None] = []
    old_parents = old.parent_of_rows
    with open(tmp / "docs.jsonl", "wb") as fh:
        for i, entry in enumerate(plan):
            line = old.doc_line(entry) if isinstance(entry, int) else doc_line(entry)
            digest.update(line)
            offsets[i] = fh.tell()
            fh.write(line)
            ids.append(old.ids[entry] if isinstance(entry, int) else entry.id)
            parents.append(old_parents[entry] if isinstance(entry, int) else entry.parent_id)
    np.save(tmp / "doc_offsets.npy", offsets)
    (tmp / "ids.json").write_text(json.dumps(ids))
    (tmp / "parents.json").write_text(json.dumps(parents))
    timings["docs"] = time.perf_counter() - t
    texts = [d.full_text(settings.dense.title_sep) for d in new_docs]
    stats.encoded = len(new_docs)
    say(f"updating {old.path}: {len(old_rows)} passages kept, {len(new_docs)} to encode")
    leg_stats: dict[str, Any] = {}
    for leg in settings.legs:
        t = time.perf_counter()
        if leg == "bm25":
            s = settings.bm25
            tokens = (bm25_tokenize(texts, s.stopwords, s.stemmer, tokens=s.tokens) if texts
                      else [])
            rows = _stacked(_old_rows(old, "bm25"), old_rows, TermRows.from_tokens(tokens),
                            order)
            rows.save(tmp, "bm25")
            bm25_from_rows(rows, s).save(str(tmp / "bm25"), show_progress=False)
        elif leg == "dense":
            cache = embedding_cache_for(say) if embedding_cache and texts else None
            try:
                vecs, enc = encode_passages(texts, settings, progress, cache)
            finally:
                if cache is not None:
                    cache.close()
            dim = old.embeddings.shape[1]
            both = np.concatenate([np.asarray(old.embeddings[old_rows], dtype=np.float32),
                                   vecs.reshape(-1, dim)])
            leg_stats["dense"] = write_dense(np.ascontiguousarray(both[order]), settings,
                                             tmp / "dense", enc)
        elif leg == "tfidf":
            rows = _stacked(_old_rows(old, "tfidf"), old_rows,
                            tfidf_rows(texts, settings.tfidf), order)
            rows.save(tmp, "tfidf")
            save_tfidf(*tfidf_from_rows(rows, settings.tfidf), tmp / "tfidf")
        elif leg == "graph":
            kept = old.entities()
            ents = [kept[r] for r in old_rows] + [sorted(extract_entities(x)) for x in texts]
            leg_stats["graph"] = save_graph([ents[i] for i in order], settings.graph,
                                            tmp / "graph")
        timings[leg] = time.perf_counter() - t
    stats.timings = timings
    write_manifest(tmp, digest.hexdigest(), len(plan), settings, timings, leg_stats,
                   update={k: v for k, v in stats.to_dict().items()
                           if k not in ("timings", "generation", "seconds", "passages")})


def _split(old: Index, plan: Plan) -> tuple[list[int], list[Document], np.ndarray]:
    """The live rows whose leg data is reused, the passages to encode, and the order that
    puts ``old rows + new passages`` into plan order. A planned Document whose id and text
    the live generation already holds reuses that row's leg data."""
    sep = old.settings.dense.title_sep
    old_rows: list[int] = []
    new_docs: list[Document] = []
    where: list[tuple[int, int]] = []  # (0, i): old_rows[i]; (1, j): new_docs[j]
    for entry in plan:
        if isinstance(entry, Document):
            row = old.row_of.get(entry.id)
            if row is not None and old.doc(entry.id).full_text(sep) == entry.full_text(sep):
                entry = row
        if isinstance(entry, int):
            where.append((0, len(old_rows)))
            old_rows.append(entry)
        else:
            where.append((1, len(new_docs)))
            new_docs.append(entry)
    order = np.array([i if part == 0 else len(old_rows) + i for part, i in where],
                     dtype=np.int64)
    return old_rows, new_docs, order


def _old_rows(old: Index, name: str) -> TermRows:
    """The live generation's term rows (recomputed from its documents if it was built before
    they were kept)."""
    rows = old.term_rows(name)
    if rows is not None:
        return rows
    texts = [old.doc_text(d) for d in old.ids]
    if name == "bm25":
        s = old.settings.bm25
        return TermRows.from_tokens(bm25_tokenize(texts, s.stopwords, s.stemmer,
                                                  tokens=s.tokens))
    return tfidf_rows(texts, old.settings.tfidf)


def _stacked(old: TermRows, old_rows: list[int], new: TermRows, order: np.ndarray
             ) -> TermRows:
    return TermRows.stack([old.take(old_rows), new]).take(order)

