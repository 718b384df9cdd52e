"""A persistent embedding cache keyed by model and text content hash.

The cache only ever saves time: a damaged or unreadable cache file never stops a build. A
file that is not a valid SQLite database is moved aside (``<name>.corrupt``) and a new cache
is started; any other failure to open, read or write it disables the cache for the rest of
the run. Either way a warning says so (:class:`EmbeddingCacheWarning`, or the ``warn``
callback).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sqlite3
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from intentrank.paths import cache_dir


class EmbeddingCacheWarning(UserWarning):
    """The embedding cache could not be used as is (it was rebuilt or skipped)."""


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt", ".pth")


def model_key(model: str) -> str:
    """``model`` as a cache key: a hub or bundled name as it is; a local directory or file
    also by the sha256 of its weight files, so a model retrained into the same directory
    never reuses the old model's vectors."""
    path = Path(model).expanduser()
    if not path.exists():
        return model
    files = [path] if path.is_file() else sorted(
        f for f in path.rglob("*") if f.is_file() and f.suffix in WEIGHT_SUFFIXES)
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(path) if f != path else f.name).encode())
        with f.open("rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(block)
    return f"{model}@{digest.hexdigest()[:16]}"


class EmbeddingCache:
    """Vectors stored in SQLite under (model key, sha256 of text); safe to share across runs."""

    def __init__(self, path: str | Path | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path) if path else cache_dir() / "embeddings.sqlite"
        self.warn = warn or functools.partial(warnings.warn, category=EmbeddingCacheWarning,
                                              stacklevel=2)
        self.hits = self.misses = 0
        self._db: sqlite3.Connection | None = None
        try:
            self._db = self._connect()
        except (sqlite3.Error, OSError) as exc:
            # not a database / a malformed one (OperationalError: locked, read-only, no space)
            if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                    exc, sqlite3.OperationalError):
                self._replace_corrupt(exc)
            else:
                self._disable(f"cannot open the embedding cache {self.path} ({exc})")

    @property
    def enabled(self) -> bool:
        return self._db is not None

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=60)
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS vec (model TEXT, key TEXT, dim INT, data BLOB, "
                "PRIMARY KEY (model, key))"
            )
            db.execute("SELECT count(*) FROM (SELECT 1 FROM vec LIMIT 1)").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def _replace_corrupt(self, exc: sqlite3.Error) -> None:
        aside = self.path.with_name(self.path.name + ".corrupt")
        try:
            os.replace(self.path, aside)
            for suffix in ("-journal", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            self._db = self._connect()
        except (sqlite3.Error, OSError) as again:
            self._disable(f"the embedding cache {self.path} is damaged ({exc}) and could not "
                          f"be replaced ({again})")
            return
        self.warn(f"the embedding cache {self.path} was damaged ({exc}); moved it to {aside} "
                  f"and started a new cache (embeddings will be recomputed)")

    def _disable(self, message: str) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db = None
        self.warn(message + "; going on without the embedding cache")

    def _lookup(self, model_key: str, unique: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        if self._db is None:
            return found
        try:
            for start in range(0, len(unique), 900):
                chunk = unique[start:start + 900]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, dim, data FROM vec WHERE model = ? AND key IN ({marks})",
                    [model_key, *chunk],
                )
                for key, dim, data in rows:
                    if isinstance(data, bytes) and dim and len(data) == 4 * dim:
                        found[key] = np.frombuffer(data, dtype=np.float32)
                    # else: a damaged row: treat it as a miss (it is rewritten below)
        except sqlite3.Error as exc:
            self._disable(f"cannot read the embedding cache {self.path} ({exc})")
            return {}
        dims = {v.shape[0] for v in found.values()}
        if len(dims) > 1:  # rows of one model must share a dimension
            self._disable(f"the embedding cache {self.path} holds vectors of several sizes "
                          f"{sorted(dims)} for {model_key}")
            return {}
        return found

    def _store(self, model_key: str, keys: list[str], vecs: np.ndarray) -> None:
        if self._db is None:
            return
        try:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vec VALUES (?, ?, ?, ?)",
                    [(model_key, k, v.shape[0], v.tobytes())
                     for k, v in zip(keys, vecs, strict=True)],
                )
        except sqlite3.Error as exc:
            self._disable(f"cannot write to the embedding cache {self.path} ({exc})")

    def encode(
        self,
        model_key: str,
        texts: Sequence[str],
        encode: Callable[[list[str]], np.ndarray],
    ) -> np.ndarray:
        """Vectors for ``texts``; only texts not cached are passed to ``encode``."""
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        unique = list(dict.fromkeys(keys))
        found = self._lookup(model_key, unique)
        missing = [k for k in unique if k not in found]
        if missing:
            text_of = dict(zip(keys, texts, strict=True))  # one text per key: its sha256
            vecs = np.asarray(encode([text_of[k] for k in missing]), dtype=np.float32)
            if found and vecs.shape[1] != next(iter(found.values())).shape[0]:
                # cached vectors of another size under this key: trust only the fresh ones
                self._disable(f"the embedding cache {self.path} holds vectors of another size "
                              f"for {model_key}")
                return np.asarray(encode(list(texts)), dtype=np.float32)
            self._store(model_key, missing, vecs)
            found.update(zip(missing, vecs, strict=True))
        self.hits += len(unique) - len(missing)
        self.misses += len(missing)
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
