"""A shard replica: the Ray actor that serves one shard index of a cluster directory
(:mod:`intentrank.scale.shardset`) through :mod:`intentrank.index.shard_api`.

A replica keeps the shard's generations it was asked for open (the newest
:data:`KEEP_GENERATIONS`), so a request pinned to a generation at its start reads that one
from every shard even if an update commits meanwhile. It opens the shard directory by its
path (every host reads the same path). Writes (``upsert``, ``delete``) run on one replica of
the owning shard and commit a new generation of the shard directory (the index's own atomic
commit); every replica then opens it (``refresh``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

KEEP_GENERATIONS = 3


class StaleGeneration(RuntimeError):  # noqa: N818 (a state, as Ray reports it)
    """The replica no longer has (or never had) the generation a request is pinned to."""


class ShardReplica:
    """Serves shard ``shard`` of the cluster at ``root`` (an absolute path)."""

    def __init__(self, root: str, shard: int, replica: int) -> None:
        self.root, self.shard, self.replica = Path(root), shard, replica
        self.path = self.root / f"shard-{shard:03d}"
        self._lock = threading.Lock()
        self.indexes: dict[str, Any] = {}  # generation -> open Index, oldest first
        self.calls = 0
        self.refresh()

    # -- generations ---------------------------------------------------------------------
    def refresh(self) -> str:
        """Open the shard's live generation if it is not open yet; its name."""
        from intentrank.index import Index

        idx = Index(self.path)
        with self._lock:
            if idx.generation in self.indexes:
                idx.close()
            else:
                self.indexes[idx.generation] = idx
                while len(self.indexes) > KEEP_GENERATIONS:
                    old = next(iter(self.indexes))
                    self.indexes.pop(old).close()
            return idx.generation

    def _at(self, generation: str | None) -> Any:
        with self._lock:
            if generation is None:
                return self.indexes[next(reversed(self.indexes))]
            found = self.indexes.get(generation)
        if found is None:
            self.refresh()  # committed since this replica last looked
            with self._lock:
                found = self.indexes.get(generation)
        if found is None:
            raise StaleGeneration(f"shard {self.shard} replica {self.replica} does not hold "
                                  f"generation {generation} (open: {list(self.indexes)})")
        self.calls += 1
        return found

    def info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        newest = self._at(None)
        return {"shard": self.shard, "replica": self.replica, "generation": newest.generation,
                "generations": list(self.indexes), "documents": len(newest),
                "node_id": ctx.get_node_id(), "host": ray.util.get_node_ip_address(),
                "pid": os.getpid(), "calls": self.calls,
                "restarts": ctx.was_current_actor_reconstructed}

    # -- reads ---------------------------------------------------------------------------
    def ids(self, generation: str) -> list[str]:
        return list(self._at(generation).ids)

    def parents(self, generation: str) -> list[str | None]:
        return list(self._at(generation).parent_of_rows)

    def bm25_stats(self, generation: str, terms: list[str], allow: np.ndarray | None
                   ) -> dict[str, Any]:
        from intentrank.index.shard_api import bm25_term_stats

        return bm25_term_stats(self._at(generation), terms, allow)

    def bm25_search(self, generation: str, tokens: list[list[str]], k: int, n: int,
                    avg_len: float, df: dict[str, int], allow: np.ndarray | None
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
        from intentrank.index.shard_api import bm25_search_global

        return [tuple(h) for h in bm25_search_global(self._at(generation), tokens, k, n,
                                                     avg_len, df, allow)]

    def dense_search(self, generation: str, vectors: np.ndarray, k: int,
                     allow: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        from intentrank.index.shard_api import dense_search

        return [tuple(h) for h in dense_search(self._at(generation), vectors, k, allow)]

    def docs(self, generation: str, ids: list[str]) -> list[bytes | None]:
        from intentrank.index.shard_api import doc_records

        return doc_records(self._at(generation), ids)

    def allowed(self, generation: str, filter_text: str) -> np.ndarray:
        from intentrank.index.shard_api import allowed_mask

        return allowed_mask(self._at(generation), filter_text)

    def ping(self) -> bool:
        return True

    # -- writes (one replica of the owning shard; the others then refresh) ----------------
    def upsert(self, records: list[dict[str, Any]]) -> str:
        from intentrank.index.update import upsert
        from intentrank.types import Document

        upsert(self.path, [Document(**r) for r in records])
        return self.refresh()

    def delete(self, ids: list[str]) -> str:
        from intentrank.index.update import delete

        delete(self.path, ids, missing_ok=True)
        return self.refresh()
