"""Build an index generation atomically, one writer per directory (the steps are in
:mod:`intentrank.index.layout`; the legs are built by :mod:`intentrank.index.legs`): a crash
at any point leaves the previous index readable, and the next build removes what it left."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.data.corpus import chunk_documents
from intentrank.errors import IndexMismatchError
from intentrank.extras import package_versions
from intentrank.index import layout
from intentrank.index.embedding_cache import EmbeddingCache, EmbeddingCacheWarning
from intentrank.index.errors import IndexBuildInterrupted, IndexCorruptError, IndexFormatError
from intentrank.index.id_keys import write_keys
from intentrank.index.layout import MANIFEST
from intentrank.index.legs import Encoder, build_leg
from intentrank.index.settings import IndexSettings, IndexSettingsError
from intentrank.index.shards import shard_bounds
from intentrank.index.store import FORMAT_VERSION, Index
from intentrank.types import Document

Progress = Callable[[str], None]


def _doc_lines(docs: Iterable[Document], settings: IndexSettings
               ) -> Iterator[tuple[Document, bytes]]:
    """Each document (after the settings' chunking) with its docs.jsonl line; the corpus hash
    is the sha256 of these lines. Duplicate ids raise ``ValueError``."""
    if settings.chunk_size:
        docs = chunk_documents(docs, settings.chunk_size, settings.chunk_overlap)
    seen: set[str] = set()
    for doc in docs:
        if doc.id in seen:  # chunk ids can collide with real ids
            raise ValueError(f"duplicate document id {doc.id!r}")
        seen.add(doc.id)
        yield doc, doc_line(doc)


def doc_line(doc: Document) -> bytes:
    """The document's line in docs.jsonl (the corpus hash is the sha256 of these lines)."""
    rec: dict[str, Any] = {"id": doc.id, "title": doc.title, "text": doc.text}
    if doc.parent_id is not None:
        rec["parent_id"] = doc.parent_id
    if doc.metadata:
        rec["metadata"] = dict(doc.metadata)
    return (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")


def corpus_sha256(docs: Iterable[Document], settings: IndexSettings | None = None) -> str:
    """The corpus hash :func:`build_index` records for ``docs`` under ``settings`` (same
    chunking), computed streaming without writing anything."""
    digest = hashlib.sha256()
    for _, line in _doc_lines(docs, settings or IndexSettings()):
        digest.update(line)
    return digest.hexdigest()


def _write_docs(docs: Iterable[Document], settings: IndexSettings, tmp: Path
                ) -> tuple[list[Document], str]:
    """Write docs.jsonl, doc_offsets.npy, ids.json, parents.json and id_keys.npy; return the
    docs and the corpus hash."""
    digest = hashlib.sha256()
    kept: list[Document] = []
    offsets: list[int] = []
    with open(tmp / "docs.jsonl", "wb") as fh:
        for doc, line in _doc_lines(docs, settings):
            digest.update(line)
            offsets.append(fh.tell())
            fh.write(line)
            kept.append(doc)
    np.save(tmp / "doc_offsets.npy", np.asarray(offsets, dtype=np.int64))
    ids, parents = [d.id for d in kept], [d.parent_id for d in kept]
    (tmp / "ids.json").write_text(json.dumps(ids))
    (tmp / "parents.json").write_text(json.dumps(parents))
    write_keys(tmp, ids, parents)
    return kept, digest.hexdigest()


def build_index(
    docs: Iterable[Document],
    path: str | Path,
    settings: IndexSettings | None = None,
    *,
    overwrite: bool = False,
    progress: bool = False,
    embedding_cache: bool = True,
    log: Progress | None = None,
    encoder: Encoder | None = None,
    folder: dict[str, Any] | None = None,
) -> Index:
    """Build (or reuse) the index at ``path`` from ``docs``.

    An existing index built from the same corpus with the same settings is reused as is;
    one built differently raises :class:`IndexMismatchError` unless ``overwrite``, which
    always rebuilds (also over a damaged or older-format index). ``embedding_cache=False``
    encodes every passage instead of reusing cached vectors. Only one build may run per
    directory: another one fails at once with :class:`IndexBusyError`. Any error (or SIGTERM)
    while reading the corpus or building leaves the previous index as it was, removes the
    temporary generation and any directory this call created. ``encoder`` replaces the
    dense leg's own model for passages (it must encode with the same model: the manifest
    records ``settings.dense``), e.g. :func:`intentrank.scale.encode.ray_encoder`.
    ``folder``: how a folder of documents was read, recorded in the commit (for ``sync``).
    """
    settings = settings or IndexSettings()
    if not isinstance(settings, IndexSettings):
        raise TypeError(f"settings must be IndexSettings, got {type(settings).__name__}")
    path = Path(path)
    say = log or (lambda msg: None)
    if path.exists() and not path.is_dir():
        raise IndexMismatchError(f"{path} exists and is not a directory; choose an empty or "
                                 f"new directory")
    with _sigterm_raises(path) as guard:
        return _build_locked(docs, path, settings, guard, overwrite=overwrite,
                             progress=progress, embedding_cache=embedding_cache, say=say,
                             encoder=encoder, folder=folder)


def _build_locked(
    docs: Iterable[Document], path: Path, settings: IndexSettings, guard: _Guard, *,
    overwrite: bool, progress: bool, embedding_cache: bool, say: Progress,
    encoder: Encoder | None = None, folder: dict[str, Any] | None = None,
) -> Index:
    def write(tmp: Path, existing: Index | None) -> Index | None:
        return _build_generation(docs, tmp, settings, existing, overwrite=overwrite,
                                 progress=progress, embedding_cache=embedding_cache, say=say,
                                 encoder=encoder, folder=folder)

    return commit_generation(path, guard, write, say, overwrite=overwrite)


GenerationWriter = Callable[[Path, "Index | None"], "Index | None"]


def commit_generation(path: Path, guard: _Guard, write: GenerationWriter, say: Progress, *,
                      overwrite: bool = False) -> Index:
    """Under the directory's writer lock: ``write(tmp, existing)`` fills a new generation
    directory (or returns an Index to keep instead of committing), which then replaces the
    live one atomically. Any failure leaves the previous generation live and removes what
    this call wrote."""
    created = _make_dirs(path)
    try:
        lock = layout.WriterLock(path).acquire()
    except BaseException:
        _remove_dirs(created)
        raise
    tmp: Path | None = None
    gen_dir: Path | None = None
    existing: Index | None = None
    try:
        _remove_leftovers(path, say)
        existing, legacy = _existing_index(path, overwrite, say)
        gen = layout.new_generation_name()
        tmp = path / f"{layout.TMP_PREFIX}{gen[len(layout.GEN_PREFIX):]}"
        tmp.mkdir()
        (tmp / layout.READERS_LOCK).touch()
        reused = write(tmp, existing)
        if reused is not None:
            shutil.rmtree(tmp)
            if reused is not existing and existing is not None:
                existing.close()
            return reused
        gen_dir = path / gen
        os.replace(tmp, gen_dir)
        tmp = None
        layout.fsync_dir(path)
        guard.committing = True  # SIGTERM from here on waits until the swap is done
        layout.write_current(path, gen)
        gen_dir = None  # live now: never remove it on failure
        result = Index(path)
        if existing is not None:
            existing.close()
        _remove_old(path, gen, legacy, say)
        return result
    except BaseException:
        if existing is not None:
            existing.close()
        for leftover in (tmp, gen_dir):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
        if not (path / layout.CURRENT).exists():
            lock.unlink()  # nothing to protect: leave the directory as we found it
        _remove_dirs(created)
        raise
    finally:
        lock.release()


def _make_dirs(path: Path) -> list[Path]:
    """mkdir -p ``path``; return the directories this call created, deepest last."""
    here = path.absolute()
    missing = list(itertools.takewhile(lambda p: not p.exists(), (here, *here.parents)))
    created: list[Path] = []
    try:
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue  # created concurrently by someone else: not ours to remove
            created.append(d)
    except BaseException:
        _remove_dirs(created)
        raise
    return created


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        try:
            d.rmdir()  # only if empty: never removes what someone else put there
        except OSError:
            break


class _Guard:
    committing = False
    pending = False


@contextlib.contextmanager
def _sigterm_raises(path: Path) -> Iterator[_Guard]:
    """In the main thread, turn SIGTERM into :class:`IndexBuildInterrupted` so the build's
    cleanup runs; the previous handler is restored afterwards. Once the guard is
    ``committing`` (CURRENT is being replaced), SIGTERM is held until the block ends."""
    guard = _Guard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if fired:  # already unwinding: let the cleanup finish
            return
        fired = True
        if guard.committing:
            guard.pending = True
            return
        raise IndexBuildInterrupted(
            f"building the index at {path} was interrupted by SIGTERM; its temporary files "
            f"were removed and the previous index (if any) is unchanged", signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield guard
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    if guard.pending:
        raise IndexBuildInterrupted(
            f"SIGTERM arrived while the new index at {path} was being installed; it is "
            f"complete and live", signal.SIGTERM)


def _remove_leftovers(path: Path, say: Progress) -> None:
    """Remove what killed builds left (safe: we hold the writer lock) and generations that
    CURRENT no longer names and no reader holds."""
    try:
        live = layout.read_current(path)
    except IndexCorruptError:
        live = None
    for entry in sorted(path.iterdir()):
        name = entry.name
        if name.startswith((layout.TMP_PREFIX, layout.TRASH_PREFIX)):
            say(f"removing {entry} left by an interrupted build")
            shutil.rmtree(entry, ignore_errors=True)
        elif name.startswith(layout.CURRENT_TMP_PREFIX):
            entry.unlink(missing_ok=True)
        elif name.startswith(layout.GEN_PREFIX) and name != live and entry.is_dir():
            if live is None and (path / layout.CURRENT).exists():
                continue  # CURRENT is damaged: keep every generation until it is replaced
            if layout.remove_generation(path, name, say):
                say(f"removed unused generation {entry}")


def _existing_index(path: Path, overwrite: bool, say: Progress) -> tuple[Index | None, bool]:
    """The index now at ``path`` (None if there is none, or it is damaged and we overwrite),
    and whether ``path`` holds a format-1 index that the new generation replaces."""
    entries = [e.name for e in path.iterdir()]
    if layout.CURRENT in entries:
        try:
            return Index(path), False
        except (IndexCorruptError, IndexFormatError) as exc:
            if not overwrite:
                raise
            say(f"replacing the damaged index at {path}: {exc}")
            return None, False
    if layout.is_legacy(path):  # format 1, before generations
        if not overwrite:
            Index(path)  # raises IndexFormatError with the rebuild hint
        say(f"replacing the older-format index at {path}")
        return None, True
    foreign = [n for n in entries if not layout.is_own_entry(n)]
    if foreign:
        raise IndexMismatchError(f"{path} exists and is not an intentrank index (it holds "
                                 f"{sorted(foreign)[:3]}); choose an empty or new directory")
    return None, False


def _build_generation(
    docs: Iterable[Document], tmp: Path, settings: IndexSettings, existing: Index | None, *,
    overwrite: bool, progress: bool, embedding_cache: bool, say: Progress,
    encoder: Encoder | None = None, folder: dict[str, Any] | None = None,
) -> Index | None:
    """Write a complete generation into ``tmp``; return ``existing`` instead if it is up to
    date (and we do not overwrite)."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    kept, corpus_hash = _write_docs(docs, settings, tmp)
    timings["docs"] = time.perf_counter() - t0
    if not kept:
        raise ValueError("the corpus holds no documents")
    bounds = shard_bounds(len(kept), settings.shards)  # more shards than documents: refused
    ann = settings.dense.ann
    smallest = min(e - a for a, e in bounds)
    if "dense" in settings.legs and ann.method == "ivfpq" and smallest < 2 ** ann.pq_bits:
        raise IndexSettingsError(
            f"invalid index settings: dense.ann.method 'ivfpq' with pq_bits={ann.pq_bits} "
            f"needs at least {2 ** ann.pq_bits} vectors to train, the corpus has {smallest}"
            f"{' in its smallest shard' if settings.shards > 1 else ''}; use 'exact' or "
            f"'hnsw'")
    if existing is not None and not overwrite:
        if (existing.corpus_sha256 == corpus_hash
                and not existing.settings.differences(settings)):
            say(f"index at {tmp.parent} is up to date ({len(existing)} documents); reusing it")
            if "bm25" in settings.legs:  # search-time only: the requested backend applies
                existing.set_bm25_backend(settings.bm25.backend)
            return existing
        existing.check(settings, corpus_hash)  # raises IndexMismatchError
    texts = [d.full_text(settings.dense.title_sep) for d in kept]
    stats: dict[str, Any] = {}
    cache = embedding_cache_for(say) if embedding_cache and "dense" in settings.legs else None
    for leg in settings.legs:
        say(f"building {leg} over {len(texts)} documents")
        t = time.perf_counter()
        leg_stats = build_leg(leg, texts, settings, tmp, progress, cache, encoder)
        if leg_stats:
            stats[leg] = leg_stats
        timings[leg] = time.perf_counter() - t
    write_manifest(tmp, corpus_hash, len(kept), settings, timings, stats,
                   **({"folder": folder} if folder is not None else {}))
    return None


def write_manifest(tmp: Path, corpus_hash: str, n_docs: int, settings: IndexSettings,
                   timings: dict[str, float], stats: dict[str, Any], **extra: Any) -> None:
    """Record the generation in ``tmp`` (last: a generation without it is incomplete)."""
    manifest = {
        "format": FORMAT_VERSION,
        "corpus_sha256": corpus_hash,
        "n_docs": n_docs,
        "settings": settings.to_dict(),
        "versions": package_versions(("intentrank", "bm25s", "sentence-transformers",
                                      "scikit-learn", "scipy", "numpy", "torch", "faiss-cpu")),
        "build_seconds": timings,
        "stats": stats,
        **extra,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": layout.record_files(tmp),
    }
    with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=2))
        fh.flush()
        os.fsync(fh.fileno())


def embedding_cache_for(say: Progress) -> EmbeddingCache:
    """The shared embedding cache; its warnings are also said through ``say``."""

    def warn(message: str) -> None:
        say(message)
        warnings.warn(message, EmbeddingCacheWarning, stacklevel=4)

    return EmbeddingCache(warn=warn)


def _remove_old(path: Path, live: str, legacy: bool, say: Progress) -> None:
    for entry in sorted(path.iterdir()):
        if entry.name.startswith(layout.GEN_PREFIX) and entry.name != live and entry.is_dir():
            layout.remove_generation(path, entry.name, say)
        elif legacy and entry.name in layout.LEGACY_NAMES:  # the format-1 index we replaced
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    layout.fsync_dir(path)


def open_or_build(
    docs: Iterable[Document] | Callable[[], Iterable[Document]],
    path: str | Path,
    settings: IndexSettings | None = None,
    *,
    progress: bool = False,
    log: Progress | None = None,
    source: str | None = None,
) -> Index:
    """Open the index at ``path`` after checking it was built from ``docs``; build it if
    there is none.

    An existing index is checked by hashing ``docs`` with the index's own settings (its
    chunking); ``settings`` only apply to a new build. ``docs`` may be a callable returning
    the documents, called once. ``source`` names the corpus in error messages.
    Raises :class:`IndexMismatchError` if the index was built from another corpus.
    """
    path = Path(path)
    say = log or (lambda msg: None)
    if Index.exists(path):
        index = Index(path)
        try:
            if settings is not None and index.settings.differences(settings):
                say(f"{path} was built with other settings than requested; using its own: "
                    + "; ".join(index.settings.differences(settings)))
            corpus = docs() if callable(docs) else docs
            digest = corpus_sha256(corpus, index.settings)
            if digest != index.corpus_sha256:
                what = source or "the given documents"
                raise IndexMismatchError(
                    f"{path} was built from another corpus than {what} (index sha256 "
                    f"{index.corpus_sha256[:12]}..., corpus sha256 {digest[:12]}...): rebuild "
                    f"with `intentrank index {source or 'SRC'} {path} --overwrite`")
        except BaseException:
            index.close()
            raise
        return index
    corpus = docs() if callable(docs) else docs
    return build_index(corpus, path, settings, progress=progress, log=log)
