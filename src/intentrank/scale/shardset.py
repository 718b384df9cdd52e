"""A distributed index on disk: N shard indexes and the cluster manifest.

A cluster directory holds ``cluster.json`` (format, shard count, replication factor, the
index settings, each shard's directory), ``order.json`` (every document id in the cluster's
row order: the corpus order at build, then ids added by updates, appended) and one ordinary
intentrank index directory per shard, ``shard-000`` ... Each document (each parent document
of a chunked index: all its passages together) belongs to shard ``sha1(id) mod N``
(:func:`shard_of`), so the owner of a passage is known for an update without a lookup.

The shard files reach a host by a path every host can read: the cluster directory is given
to the shard actors by its absolute path, and each opens ``<dir>/shard-NNN`` itself (on a
real cluster, a shared filesystem mounted at the same path on every host; the namespace
hosts of the fault tests share this machine's filesystem). Nothing is copied.

The cluster's row order defines ties: results equal those of one index of the corpus in
that order, whose ties are broken by row (``scale/coordinator.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from intentrank.errors import ConfigError, DataError
from intentrank.types import Document

MANIFEST = "cluster.json"
ORDER = "order.json"
FORMAT = 1
LEGS = ("bm25", "dense")  # the legs a shard serves (TF-IDF and the graph are whole-corpus)


def shard_of(unit: str, shards: int) -> int:
    """The shard owning document (or parent document) id ``unit``: a stable hash of it."""
    return int.from_bytes(hashlib.sha1(unit.encode("utf-8")).digest()[:8], "big") % shards


def unit_of(doc: Document) -> str:
    """The id whose hash places ``doc``: its parent's, else its own."""
    return doc.parent_id or doc.id


@dataclass(frozen=True)
class ClusterManifest:
    """What ``cluster.json`` records."""

    root: Path
    shards: int
    replicas: int
    settings: dict[str, Any]

    def shard_dir(self, shard: int) -> Path:
        return self.root / f"shard-{shard:03d}"

    @property
    def legs(self) -> list[str]:
        return list(self.settings.get("legs", []))

    @classmethod
    def load(cls, root: str | Path) -> ClusterManifest:
        """The manifest of the cluster directory ``root``; a clear error naming the file
        and the field when it is missing or malformed."""
        root = Path(root).resolve()
        path = root / MANIFEST
        if not path.is_file():
            raise ConfigError(f"{root} is not a cluster index: no {MANIFEST} (build one with "
                              f"`intentrank cluster build`)")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not JSON ({exc})") from exc
        for key in ("format", "shards", "replicas", "settings"):
            if key not in data:
                raise ConfigError(f"{path}: field {key!r} is missing")
        if data["format"] != FORMAT:
            raise ConfigError(f"{path}: format {data['format']!r} is not supported "
                              f"(expected {FORMAT})")
        for key in ("shards", "replicas"):
            if not isinstance(data[key], int) or data[key] < 1:
                raise ConfigError(f"{path}: field {key!r} must be a positive integer, got "
                                  f"{data[key]!r}")
        return cls(root, data["shards"], data["replicas"], data["settings"])

    def order(self) -> list[str]:
        """Every document id in the cluster's row order."""
        return json.loads((self.root / ORDER).read_text())


def is_cluster(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def write_order(root: Path, ids: list[str]) -> None:
    """Replace ``order.json`` atomically (write, fsync, rename)."""
    tmp = root / f".{ORDER}.tmp"
    with open(tmp, "w") as fh:
        json.dump(ids, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / ORDER)


def build_cluster(docs: Iterable[Document], root: str | Path, shards: int,
                  settings: Any = None, *, replicas: int = 2, overwrite: bool = False,
                  log: Any = None) -> ClusterManifest:
    """Split ``docs`` by :func:`shard_of` into ``shards`` ordinary indexes under ``root``
    (built one after another with ``settings``, an IndexSettings whose legs are among
    :data:`LEGS`), and write ``order.json`` and ``cluster.json`` (last: a cluster
    directory without it is not a cluster)."""
    from intentrank.index import IndexSettings, build_index

    settings = settings or IndexSettings(legs=LEGS)
    extra = sorted(set(settings.legs) - set(LEGS))
    if extra:
        raise ConfigError(f"a cluster index serves the legs {list(LEGS)}; {extra} are "
                          f"whole-corpus legs (build with --legs bm25,dense)")
    if shards < 1 or replicas < 1:
        raise ConfigError(f"shards and replicas must be >= 1, got {shards} and {replicas}")
    if settings.shards != 1:
        raise ConfigError("a cluster's shards are indexes of their own: leave the index "
                          "setting 'shards' at 1")
    root = Path(root).resolve()
    if (root / MANIFEST).exists() and not overwrite:
        raise ConfigError(f"{root} already holds a cluster index; use --overwrite")
    root.mkdir(parents=True, exist_ok=True)
    parts: list[list[Document]] = [[] for _ in range(shards)]
    order: list[str] = []
    units_seen: dict[str, int] = {}
    for doc in docs:
        s = shard_of(unit_of(doc), shards)
        parts[s].append(doc)
        units_seen[unit_of(doc)] = s
        order.append(doc.id)
    empty = [i for i, p in enumerate(parts) if not p]
    if empty:
        raise DataError(f"{len(order)} documents leave shard(s) {empty} empty: use fewer "
                        f"than {shards} shards")
    manifest = ClusterManifest(root, shards, replicas, settings.to_dict())
    for i, part in enumerate(parts):
        if log:
            log(f"shard {i}: {len(part)} documents -> {manifest.shard_dir(i)}")
        build_index(part, manifest.shard_dir(i), settings, overwrite=overwrite).close()
    if settings.chunk_size:  # the passages' ids, in the cluster's order
        order = _passage_order(manifest, [d.id for d in parts_flat(parts, order)])
    write_order(root, order)
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"format": FORMAT, "shards": shards, "replicas": replicas,
                               "settings": manifest.settings}, indent=1) + "\n")
    os.replace(tmp, root / MANIFEST)
    return manifest


def parts_flat(parts: list[list[Document]], order: list[str]) -> list[Document]:
    by_id = {d.id: d for p in parts for d in p}
    return [by_id[i] for i in order]


def _passage_order(manifest: ClusterManifest, doc_order: list[str]) -> list[str]:
    """For a chunked cluster: the passage ids, parents in ``doc_order``, passages in each
    parent's order (as one index of the corpus chunks them)."""
    from intentrank.index import Index

    passages: dict[str, list[str]] = {}
    for i in range(manifest.shards):
        with Index(manifest.shard_dir(i)) as idx:
            for pid, parent in zip(idx.ids, idx.parent_of_rows, strict=True):
                passages.setdefault(parent or pid, []).append(pid)
    return [p for d in doc_order for p in passages.get(d, [])]
