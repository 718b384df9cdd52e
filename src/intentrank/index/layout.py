"""The on-disk layout of an index directory: generations, CURRENT, locks and file records.

::

    DIR/
      CURRENT              the live generation's name ("gen-..."), replaced atomically
      .lock                writer lock (flock, exclusive, non-blocking); holds the writer's pid
      folder.json          an index from before the commit recorded them: how the CLI read
                           its folder (now the manifest's ``folder``)
      gen-<id>/            one complete, immutable generation (a commit point)
        manifest.json      corpus hash, settings, versions, its segments and their deleted
                           rows (:mod:`intentrank.index.segments`), the folder options (globs,
                           chunking; ``intentrank.cli.ingest.FolderOptions``), for `sync`),
                           size + sha256 of every file below
        .readers.lock      readers hold a shared flock on it while an Index is open
        docs.jsonl         one document per line (id, title, text, parent_id, metadata)
        doc_offsets.npy    byte offset of each line in docs.jsonl
        ids.json, parents.json   document ids and their parents' ids, row order
        id_keys.npy        hashes of the ids and parent ids, sorted, with their rows: an
                           update finds the rows of the ids it names without reading every
                           id (:mod:`intentrank.index.id_keys`)
        bm25/              bm25s index (bm25/shard-<i>/ with shards > 1: global statistics)
        dense/             embeddings.npy (L2-normalised float32, row i = document i,
                           memory-mapped); ann*.faiss with dense.ann.method hnsw / ivfpq
        tfidf/             vectorizer.pkl, matrix.npz
        graph/             entities.json, pagerank.npy, edges.npy
        terms/             each row's BM25 term frequencies and TF-IDF counts (updates)
        segments/seg-<id>/ a segment an update wrote: docs, ids, parents, terms/, dense/
                           (embeddings, ann.faiss from 1024 rows), graph/entities.json
        deleted.npy, deletes/seg-<id>.npy   each segment's deleted rows
                           (every file of a segment an update kept is a hard link to the
                           previous generation's)
      .tmp-<id>/           a generation being built (removed by the next build if left over)
      .trash-<id>/         an old generation being deleted

A reader resolves CURRENT once and reads that generation for its whole life. A writer builds
into ``.tmp-<id>``, renames it to ``gen-<id>``, then replaces CURRENT; it deletes an older
generation only if it can lock that generation's ``.readers.lock`` exclusively (nobody has it
open), otherwise a later build removes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from intentrank.errors import IntentrankError
from intentrank.index.errors import IndexBusyError, IndexCorruptError, rebuild_hint

CURRENT = "CURRENT"
WRITER_LOCK = ".lock"
READERS_LOCK = ".readers.lock"
MANIFEST = "manifest.json"
GEN_PREFIX = "gen-"
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
CURRENT_TMP_PREFIX = "CURRENT.tmp-"
# What an index directory of format 1 (before generations) held at its top level.
LEGACY_NAMES = frozenset({MANIFEST, "docs.jsonl", "doc_offsets.npy", "ids.json", "bm25",
                          "dense", "tfidf", "graph"})
_GEN_NAME = re.compile(r"gen-[0-9A-Za-z_-]{1,64}")


def new_generation_name() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{GEN_PREFIX}{stamp}-{uuid.uuid4().hex[:8]}"


def is_generation_name(name: str) -> bool:
    return _GEN_NAME.fullmatch(name) is not None


def is_own_entry(name: str) -> bool:
    """A name this package writes into an index directory (format 2)."""
    return (name in (CURRENT, WRITER_LOCK) or name.startswith(
        (GEN_PREFIX, TMP_PREFIX, TRASH_PREFIX, CURRENT_TMP_PREFIX)))


def is_legacy(path: Path) -> bool:
    """``path`` holds a format-1 index (manifest.json at the top, no generations)."""
    return (path / MANIFEST).is_file() and not is_generation_name(path.name) \
        and not (path / CURRENT).exists()


def read_current(path: Path) -> str | None:
    """The generation CURRENT names, or None if there is no CURRENT file.

    Raises :class:`IndexCorruptError` if CURRENT cannot be read or names no valid generation.
    """
    file = path / CURRENT
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IndexCorruptError(f"{file} cannot be read ({exc}); {rebuild_hint(path)}") from exc
    name = raw.decode("ascii", "replace").strip()  # a non-ASCII byte names no generation
    if not is_generation_name(name):
        shown = raw[:60].decode("ascii", "replace")
        what = "is empty" if not raw.strip() else f"does not name a generation ({shown!r})"
        raise IndexCorruptError(f"{file} {what}; {rebuild_hint(path)}")
    return name


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_current(path: Path, generation: str) -> None:
    """Point CURRENT at ``generation`` atomically (temporary file, fsync, os.replace)."""
    tmp = path / f"{CURRENT_TMP_PREFIX}{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(generation + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path / CURRENT)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path)


def record_files(root: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``root`` (manifest and reader lock excepted);
    each file is fsynced on the way so the generation is durable before CURRENT names it."""
    names = [p.relative_to(root).as_posix() for p in sorted(root.rglob("*"))
             if p.is_file() and not (p.parent == root and p.name in (MANIFEST, READERS_LOCK))]
    return record_files_named(root, names)


def record_files_named(root: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """Size and sha256 of the files ``names`` under ``root`` (fsynced, as
    :func:`record_files`), and every directory under ``root`` fsynced."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        p = root / name
        with open(p, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256")
            with contextlib.suppress(OSError):
                os.fsync(fh.fileno())
        out[name] = {"size": p.stat().st_size, "sha256": digest.hexdigest()}
    for d in {p.parent for p in root.rglob("*")} | {root}:
        fsync_dir(d)
    return out


def check_sizes(root: Path, files: dict[str, dict[str, Any]]) -> None:
    """Every recorded file exists with its recorded size (cheap: one stat per file)."""
    hint = rebuild_hint(root.parent)
    for rel, rec in files.items():
        p = root / rel
        try:
            size = os.stat(p).st_size
        except FileNotFoundError:
            raise IndexCorruptError(f"{p} is missing; {hint}") from None
        except OSError as exc:
            raise IndexCorruptError(f"{p} cannot be read ({exc}); {hint}") from exc
        expected = rec["size"]
        if size < expected:
            raise IndexCorruptError(f"{p} is truncated ({size} of {expected} bytes); "
                                    f"{hint}")
        if size != expected:
            raise IndexCorruptError(f"{p} has {size} bytes where the manifest records "
                                    f"{expected}; {hint}")


def verify_files(root: Path, files: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Check the sha256 of every recorded file; return the ``files`` and ``bytes`` checked."""
    hint = rebuild_hint(root.parent)
    check_sizes(root, files)
    problems: list[str] = []
    for rel, rec in files.items():
        with open(root / rel, "rb") as fh:
            sha = hashlib.file_digest(fh, "sha256").hexdigest()
        if sha != rec["sha256"]:
            problems.append(f"{root / rel} does not match its sha256 (the manifest records "
                            f"{rec['sha256'][:12]}..., the file has {sha[:12]}...)")
    if problems:
        raise IndexCorruptError("; ".join(problems) + f"; {hint}")
    return {"files": len(files), "bytes": sum(rec["size"] for rec in files.values())}


# -- locks ---------------------------------------------------------------------------------
def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


class WriterLock:
    """Exclusive, non-blocking flock on ``DIR/.lock``; the holder's pid is written into it.

    The lock file may be unlinked by its holder (a failed first build removes what it
    created), so after locking we check the path still names the file we locked."""

    def __init__(self, path: Path) -> None:
        self.dir = path
        self.file = path / WRITER_LOCK
        self.fd: int | None = None

    def acquire(self) -> WriterLock:
        for _ in range(100):
            try:
                fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise IntentrankError(f"cannot write into the index directory {self.dir} "
                                      f"({exc.strerror}: {self.file})") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_pid(fd)
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                who = f"pid {holder}" if holder else "another process"
                raise IndexBusyError(f"index {self.dir} is being built by {who}; wait for it "
                                     f"to finish or build into another directory") from None
            if _same_file(fd, self.file):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self.fd = fd
                return self
            os.close(fd)  # the file was unlinked between open and flock: try again
        raise IndexBusyError(f"could not lock {self.file}: it keeps being replaced")

    def unlink(self) -> None:
        """Remove the lock file (while still holding the lock)."""
        with contextlib.suppress(OSError):
            self.file.unlink()

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def open_reader_lock(gen_dir: Path) -> IO[bytes] | None | bool:
    """Hold a shared flock on ``gen_dir/.readers.lock`` for as long as the returned file is
    open. Returns None if the generation vanished (deleted by a writer: resolve CURRENT again)
    and False where no lock can be taken (a read-only copy without the lock file)."""
    file = gen_dir / READERS_LOCK
    try:
        fd = os.open(file, os.O_RDONLY)
    except FileNotFoundError:
        if not (gen_dir / MANIFEST).exists():
            return None
        try:  # the lock file alone was deleted: recreate it
            fd = os.open(file, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            return False
    fcntl.flock(fd, fcntl.LOCK_SH)
    if not _same_file(fd, file):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def remove_generation(path: Path, name: str, say: Callable[[str], None]) -> bool:
    """Delete generation ``name`` unless a reader holds it open; True if it was removed."""
    gen_dir = path / name
    fd: int | None = None
    try:
        fd = os.open(gen_dir / READERS_LOCK, os.O_RDONLY)
    except FileNotFoundError:
        pass  # an incomplete generation: nobody can be reading it
    except OSError as exc:
        say(f"cannot lock old generation {gen_dir} ({exc}); leaving it")
        return False
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                say(f"old generation {gen_dir} is still open in a reader; a later build will "
                    f"remove it")
                return False
        trash = path / f"{TRASH_PREFIX}{uuid.uuid4().hex[:8]}"
        os.replace(gen_dir, trash)
    finally:
        if fd is not None:
            os.close(fd)
    shutil.rmtree(trash, ignore_errors=True)
    return True


def pin_generation(path: Path) -> tuple[str, Path, IO[bytes] | bool]:
    """Resolve CURRENT and take a shared lock on that generation (retrying if a writer
    deleted it in between): its name, directory and the lock."""
    import time

    previous = None
    for attempt in range(50):
        name = read_current(path)
        if name is None:
            raise no_index_error(path)
        gen_dir = path / name
        lock = open_reader_lock(gen_dir)
        if lock is not None:
            return name, gen_dir, lock
        if name == previous and not gen_dir.exists():
            raise IndexCorruptError(f"{path / CURRENT} names {name}, which does not exist; "
                                    f"{rebuild_hint(path)}")
        previous = name
        time.sleep(0.001 * attempt)
    raise IndexCorruptError(f"{path}: the live generation kept disappearing while opening it")


def load_manifest(gen_dir: Path) -> dict[str, Any]:
    hint = rebuild_hint(gen_dir.parent)
    file = gen_dir / MANIFEST
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise IndexCorruptError(f"{file} is missing; {hint}") from None
    except OSError as exc:
        raise IndexCorruptError(f"{file} cannot be read ({exc}); {hint}") from exc
    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        what = "is empty" if not raw.strip() else f"cannot be parsed ({exc})"
        raise IndexCorruptError(f"{file} {what}; {hint}") from exc
    if not isinstance(manifest, dict):
        raise IndexCorruptError(f"{file} is not a JSON object; {hint}")
    return manifest


def no_index_error(path: Path) -> IntentrankError:
    """Why ``path`` (whose CURRENT names nothing) holds no index to open."""
    from intentrank.index.errors import IndexFormatError, IndexNotFoundError

    hint = rebuild_hint(path)
    if is_generation_name(path.name) and (path / MANIFEST).is_file():
        return IndexNotFoundError(f"{path} is one generation inside the index {path.parent}; "
                                  f"open {path.parent} instead")
    if is_legacy(path):
        return IndexFormatError(f"{path} was built by an older intentrank (index format 1, "
                                f"before generations) that this version cannot read; {hint}")
    if path.is_dir() and any(n.name.startswith(GEN_PREFIX) for n in path.iterdir()):
        return IndexCorruptError(f"{path / CURRENT} is missing, so {path} holds no complete "
                                 f"index (an interrupted first build, or damage); {hint}")
    return IndexNotFoundError(f"{path} is not an intentrank index (no {CURRENT}); build one "
                              f"with `intentrank index`")
