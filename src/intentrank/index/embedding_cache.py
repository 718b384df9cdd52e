"""A persistent embedding cache keyed by model and text content hash."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from intentrank.paths import cache_dir


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Vectors stored in SQLite under (model key, sha256 of text); safe to share across runs."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else cache_dir() / "embeddings.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vec (model TEXT, key TEXT, dim INT, data BLOB, "
            "PRIMARY KEY (model, key))"
        )
        self.hits = 0
        self.misses = 0

    def encode(
        self,
        model_key: str,
        texts: Sequence[str],
        encode: Callable[[list[str]], np.ndarray],
    ) -> np.ndarray:
        """Vectors for ``texts``; only texts not cached are passed to ``encode``."""
        keys = [text_key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 900):
            chunk = unique[start:start + 900]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT key, data FROM vec WHERE model = ? AND key IN ({marks})",
                [model_key, *chunk],
            )
            for key, data in rows:
                found[key] = np.frombuffer(data, dtype=np.float32)
        missing = [k for k in unique if k not in found]
        self.hits += len(unique) - len(missing)
        self.misses += len(missing)
        if missing:
            first_text = {}
            for k, t in zip(keys, texts, strict=True):
                first_text.setdefault(k, t)
            vecs = np.asarray(encode([first_text[k] for k in missing]), dtype=np.float32)
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vec VALUES (?, ?, ?, ?)",
                    [(model_key, k, v.shape[0], v.tobytes()) for k, v in zip(missing, vecs,
                                                                            strict=True)],
                )
            found.update(zip(missing, vecs, strict=True))
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32)

    def close(self) -> None:
        self._db.close()
