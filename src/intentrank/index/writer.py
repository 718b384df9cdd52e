"""Write a commit of an index: a new segment and the deleted rows of the others (hard links to
every file kept), or a rewrite of the live rows as one top-level segment with the
whole-corpus files a build writes (:mod:`intentrank.index.segments`)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.index import layout
from intentrank.index.bm25 import save_bm25s
from intentrank.index.bm25_scorer import bm25_from_rows
from intentrank.index.build import Progress, doc_line, embedding_cache_for, write_manifest
from intentrank.index.entities import extract_entities
from intentrank.index.hits import bm25_tokenize
from intentrank.index.id_keys import write_keys
from intentrank.index.legs import encode_passages, write_dense
from intentrank.index.segments import (
    BASE,
    SEGMENT_ANN_MIN_ROWS,
    SegmentEntry,
    link,
    new_segment_dir,
    segment_records,
)
from intentrank.index.shards import shard_bounds, write_bm25_shards
from intentrank.index.store import FORMAT_VERSION, Index
from intentrank.index.terms import (
    TermRows,
    save_graph,
    save_tfidf,
    tfidf_from_rows,
    tfidf_rows,
)
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
    merged: bool = False  # segments were merged (a merge, or a delete past MERGE_DELETED_SHARE)
    segments: int = 0  # segments of the index afterwards
    seconds: float = 0.0
    generation: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    leg_stats: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced or self.deleted)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "leg_stats"}

    def summary(self) -> str:
        how = (f" ({self.tombstones} dead rows kept until a merge)" if self.tombstones else
               " (segments merged)" if self.merged else "")
        return (f"{self.added} added, {self.replaced} replaced, {self.unchanged} unchanged, "
                f"{self.deleted} deleted{how}; {self.passages} passages, {self.encoded} "
                f"encoded, {self.seconds:.1f}s" + (f"; {self.segments} segment"
                                                   f"{'' if self.segments == 1 else 's'}"
                                                   if self.segments else ""))


@dataclass
class Change:
    """What a commit changes: the live rows it deletes and the rows of its new segment (an
    int: a live row kept, merged into it; a Document: a passage written anew, its leg data
    reused when the live index holds the same id with the same text). ``merged``: the
    segments (positions) the new segment replaces, which it takes the place of."""

    drop: np.ndarray
    add: list[int | Document] = field(default_factory=list)
    merged: list[int] = field(default_factory=list)


# A full rewrite into one segment: the live rows, in order (a merge, or a delete that leaves
# too many rows dead).
Plan = list[int | Document]


def write_commit(old: Index, change: Change, tmp: Path, stats: UpdateStats, say: Progress,
                 progress: bool, embedding_cache: bool, extra: dict[str, Any]) -> int:
    """Fill ``tmp`` with the commit ``change`` makes of ``old``: hard links to the segments it
    keeps, the changed segments' deleted rows, the new segment, a manifest. Returns the rows
    dead in the new commit."""
    dead = np.zeros(old._n_phys, dtype=bool)
    if old.live is None:
        dead[:len(change.drop)] = change.drop
    else:
        dead[old.live.deleted] = True
        dead[old.live.phys[change.drop]] = True
    merged = set(change.merged)
    entries: list[SegmentEntry] = []
    files: dict[str, Any] = {}
    new_at = len(old.segments) if not merged else min(merged)
    for i, entry in enumerate(old.segments):
        if i == new_at and change.add:
            entries.append(_new_segment(old, change.add, tmp, stats, say, progress,
                                        embedding_cache, files))
        if i in merged:
            continue
        start = int(old._seg_start[i])
        mine = np.flatnonzero(dead[start:start + entry.rows])
        if len(mine) == entry.rows:
            continue  # every row deleted: the segment leaves the index
        records = segment_records(entry, old.manifest["files"])
        for rel in records:
            link(old.gen_dir / rel, tmp / rel)
        files.update(records)
        deletes = None
        if len(mine):
            deletes = entry.deletes_file()
            if len(mine) == entry.deleted and entry.deletes is not None:
                link(old.gen_dir / entry.deletes, tmp / deletes)
                files[deletes] = old.manifest["files"][entry.deletes]
            else:
                (tmp / deletes).parent.mkdir(parents=True, exist_ok=True)
                np.save(tmp / deletes, mine.astype(np.int64))
                files.update(layout.record_files_named(tmp, [deletes]))
        entries.append(SegmentEntry(entry.dir, entry.rows, len(mine), deletes))
    if new_at == len(old.segments) and change.add:
        entries.append(_new_segment(old, change.add, tmp, stats, say, progress,
                                    embedding_cache, files))
    n_docs = sum(e.live for e in entries)
    flat = len(entries) == 1 and entries[0].dir == BASE and not entries[0].deleted
    manifest = {**{k: v for k, v in old.manifest.items()
                   if k not in ("deleted", "rows", "folder", "update")},
                "format": FORMAT_VERSION, "n_docs": n_docs,
                "corpus_sha256": old.manifest["corpus_sha256"] if flat else None,
                "segments": [e.to_dict() for e in entries], **extra,
                "update": {k: v for k, v in stats.to_dict().items()
                           if k not in ("timings", "generation", "seconds", "passages",
                                        "segments")},
                "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "files": files}
    write_commit_manifest(tmp, manifest)
    return sum(e.deleted for e in entries)


def write_commit_manifest(tmp: Path, manifest: dict[str, Any]) -> None:
    """Record the commit in ``tmp`` (last: a generation without it is incomplete)."""
    layout.fsync_dir(tmp)
    with open(tmp / layout.MANIFEST, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=2))
        fh.flush()
        os.fsync(fh.fileno())


def _new_segment(old: Index, plan: Plan, tmp: Path, stats: UpdateStats, say: Progress,
                 progress: bool, embedding_cache: bool, files: dict[str, Any]
                 ) -> SegmentEntry:
    """Write the segment of ``plan``'s rows into ``tmp`` (its file records into ``files``)."""
    rel = new_segment_dir()
    out = tmp / rel
    out.mkdir(parents=True)
    timings = _write_rows(old, plan, out, stats, say, progress, embedding_cache,
                          segment=True)
    stats.timings.update(timings)
    files.update({f"{rel}/{name}": r for name, r in layout.record_files(out).items()})
    return SegmentEntry(rel, len(plan))


def write_generation(old: Index, plan: Plan, tmp: Path, stats: UpdateStats, say: Progress,
                      progress: bool, embedding_cache: bool, extra: dict[str, Any]) -> None:
    """Write the index ``plan`` describes into ``tmp`` as one top-level segment, with the
    whole-corpus files a build writes."""
    digest = hashlib.sha256()
    timings = _write_rows(old, plan, tmp, stats, say, progress, embedding_cache,
                          segment=False, digest=digest)
    stats.timings = timings
    write_manifest(tmp, digest.hexdigest(), len(plan), old.settings, timings,
                   stats.leg_stats, **extra,
                   update={k: v for k, v in stats.to_dict().items()
                           if k not in ("timings", "generation", "seconds", "passages",
                                        "segments", "leg_stats")})


def _write_rows(old: Index, plan: Plan, tmp: Path, stats: UpdateStats, say: Progress,
                progress: bool, embedding_cache: bool, *, segment: bool,
                digest: Any = None) -> dict[str, float]:
    """Write ``plan``'s rows into ``tmp``: docs, ids, parents, each leg's kept data, and
    unless ``segment`` the whole-corpus files of the lexical legs."""
    settings = old.settings
    timings: dict[str, float] = {}
    t = time.perf_counter()
    old_rows, new_docs, order = _split(old, plan)
    offsets = np.zeros(len(plan), dtype=np.int64)
    ids: list[str] = []
    parents: list[str | None] = []
    old_parents = old.parent_of_rows if old_rows else []  # a plain add reads no old row
    with open(tmp / "docs.jsonl", "wb") as fh:
        for i, entry in enumerate(plan):
            line = old.doc_line(entry) if isinstance(entry, int) else doc_line(entry)
            if digest is not None:
                digest.update(line)
            offsets[i] = fh.tell()
            fh.write(line)
            ids.append(old.ids[entry] if isinstance(entry, int) else entry.id)
            parents.append(old_parents[entry] if isinstance(entry, int) else entry.parent_id)
    np.save(tmp / "doc_offsets.npy", offsets)
    (tmp / "ids.json").write_text(json.dumps(ids))
    (tmp / "parents.json").write_text(json.dumps(parents))
    write_keys(tmp, ids, parents)
    timings["docs"] = time.perf_counter() - t
    texts = [d.full_text(settings.dense.title_sep) for d in new_docs]
    stats.encoded += len(new_docs)
    say(f"updating {old.path}: {len(old_rows)} passages kept, {len(new_docs)} to encode")
    for leg in settings.legs:
        t = time.perf_counter()
        if leg == "bm25":
            s = settings.bm25
            tokens = (bm25_tokenize(texts, s.stopwords, s.stemmer, tokens=s.tokens) if texts
                      else [])
            rows = _stacked(old, "bm25", old_rows, TermRows.from_tokens(tokens), order)
            rows.save(tmp, "bm25")
            if not segment and settings.shards > 1:  # the build's shards, global statistics
                stats.leg_stats["bm25"] = write_bm25_shards(
                    rows, s, tmp, shard_bounds(len(rows), settings.shards))
            elif not segment:
                save_bm25s(bm25_from_rows(rows, s), tmp / "bm25")
        elif leg == "dense":
            cache = embedding_cache_for(say) if embedding_cache and texts else None
            try:
                vecs, enc = encode_passages(texts, settings, progress, cache)
            finally:
                if cache is not None:
                    cache.close()
            dim = old.embeddings.shape[1]
            kept = (np.asarray(old.embeddings[old_rows], dtype=np.float32) if old_rows
                    else np.zeros((0, dim), dtype=np.float32))  # a plain add reads no vector
            vecs = np.ascontiguousarray(np.concatenate([kept, vecs.reshape(-1, dim)])[order])
            if segment and len(vecs) < SEGMENT_ANN_MIN_ROWS:  # searched exactly
                (tmp / "dense").mkdir()
                np.save(tmp / "dense" / "embeddings.npy", vecs)
            elif segment:  # one ANN structure per segment, sharded index or not
                write_dense(vecs, replace(settings, shards=1), tmp / "dense", enc)
            else:
                stats.leg_stats["dense"] = write_dense(vecs, settings, tmp / "dense", enc)
        elif leg == "tfidf":
            rows = _stacked(old, "tfidf", old_rows, tfidf_rows(texts, settings.tfidf), order)
            rows.save(tmp, "tfidf")
            if not segment:
                save_tfidf(*tfidf_from_rows(rows, settings.tfidf), tmp / "tfidf")
        elif leg == "graph":
            kept = old.entities() if old_rows else []  # a plain add reuses no old row
            ents = [kept[r] for r in old_rows] + [sorted(extract_entities(x)) for x in texts]
            ents = [ents[i] for i in order]
            if segment:
                (tmp / "graph").mkdir()
                (tmp / "graph" / "entities.json").write_text(json.dumps(ents))
            else:
                stats.leg_stats["graph"] = save_graph(ents, settings.graph, tmp / "graph")
        timings[leg] = time.perf_counter() - t
    return timings


def _split(old: Index, plan: Plan) -> tuple[list[int], list[Document], np.ndarray]:
    """The live rows whose leg data is reused, the passages to encode, and the order that
    puts ``old rows + new passages`` into plan order. A planned Document whose id and text
    the live generation already holds reuses that row's leg data."""
    sep = old.settings.dense.title_sep
    old_rows: list[int] = []
    new_docs: list[Document] = []
    where: list[tuple[int, int]] = []  # (0, i): old_rows[i]; (1, j): new_docs[j]
    held = old.rows_of_ids(e.id for e in plan if isinstance(e, Document))
    for entry in plan:
        if isinstance(entry, Document):
            row = held.get(entry.id)
            if row is not None and old.doc(entry.id, row).full_text(sep) == entry.full_text(sep):
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


def _stacked(old: Index, name: str, old_rows: list[int], new: TermRows, order: np.ndarray
             ) -> TermRows:
    """The kept rows of ``old``'s term rows ``name`` and ``new``, in plan order; a plan that
    reuses no old row (a plain add's segment) never loads ``old``'s term rows."""
    if not old_rows:
        return new.take(order)
    return TermRows.stack([_old_rows(old, name).take(old_rows), new]).take(order)

