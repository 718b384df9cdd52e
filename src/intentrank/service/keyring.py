"""The keys a running service accepts, reloaded when the keys file changes (checked on every
request: one ``stat``) or on SIGHUP, without dropping a request; a malformed file keeps the
keys in use and the reason is logged. Also the edits behind ``intentrank keys``: add,
rotate, revoke, each written atomically (a reader sees the old file or the new one)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from intentrank.data.readers import atomic_write
from intentrank.errors import ConfigError
from intentrank.service.auth import ApiKey, KeyStore, generate_key, hash_key, make_key


class KeyRing:
    """The current :class:`KeyStore`: a fixed one, or the one a keys file holds now."""

    def __init__(self, store: KeyStore | None = None, path: str | Path | None = None,
                 log: Callable[[str], None] = print) -> None:
        if store is None and path is None:
            raise ConfigError("a key ring needs a key store or a keys file")
        self.path = Path(path) if path is not None else None
        self.log = log
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._forced = False
        self.reloads = self.reload_errors = 0
        self.store = store if store is not None else KeyStore()
        if self.path is not None:
            self._stamp = self._stat()
            self.store = KeyStore.from_file(self.path)  # a bad file at start-up: an error

    def __getstate__(self) -> dict[str, Any]:  # sent to Ray Serve replicas: no lock
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def request_reload(self) -> None:
        """Reload on the next request (SIGHUP's handler: nothing else happens in it)."""
        self._forced = True

    def current(self) -> KeyStore:
        """The keys in force now: the file is read again if it changed (or SIGHUP asked)."""
        if self.path is None:
            return self.store
        stamp = self._stat()
        if stamp == self._stamp and not self._forced:
            return self.store
        with self._lock:
            stamp = self._stat()
            if stamp != self._stamp or self._forced:
                self._forced = False
                self._stamp = stamp
                try:
                    self.store = KeyStore.from_file(self.path)
                    self.reloads += 1
                    self.log(f"API keys reloaded from {self.path}: {len(self.store)} key(s)")
                except ConfigError as exc:
                    self.reload_errors += 1
                    self.log(f"API keys not reloaded, the previous {len(self.store)} key(s) "
                             f"stay in force: {exc}")
            return self.store

    def __len__(self) -> int:
        return len(self.current())

    def pipelines_named(self) -> set[str]:
        return self.current().pipelines_named()

    def indexes_named(self) -> set[str]:
        return self.current().indexes_named()


# -- edits (intentrank keys ...) ------------------------------------------------------------
def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"keys": []}
    KeyStore.from_file(path)  # refuse to edit a file the service could not read
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _write(path: Path, data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    atomic_write(path, text)
    os.chmod(path, 0o600)


def add_key(path: str | Path, entry: dict[str, Any]) -> str:
    """Add a key described by ``entry`` (keys-file fields but ``sha256``) to the file
    (created if missing); returns the new plain key, which is stored only as its digest."""
    path = Path(path)
    data = _read(path)
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("a key needs a name")
    if any(e.get("name") == name for e in data["keys"]):
        raise ConfigError(f"{path}: a key named {name!r} exists (rotate or revoke it)")
    key = generate_key()
    record = {k: v for k, v in {**entry, "sha256": hash_key(key)}.items() if v is not None}
    make_key(record, f"key {name!r}")  # every field checked before the file is touched
    data["keys"].append(record)
    _write(path, data)
    return key


def _entry(data: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    for entry in data["keys"]:
        if entry.get("name") == name:
            return entry
    names = ", ".join(str(e.get("name")) for e in data["keys"]) or "none"
    raise ConfigError(f"{path}: no key named {name!r} (keys: {names})")


def rotate_key(path: str | Path, name: str) -> str:
    """Give key ``name`` a new secret (its scope and permissions stay); the old secret stops
    working as soon as a service reads the file. Returns the new plain key."""
    path = Path(path)
    data = _read(path)
    entry = _entry(data, name, path)
    if entry.get("revoked") is not None:
        raise ConfigError(f"{path}: key {name!r} is revoked; add a new key instead")
    key = generate_key()
    entry["sha256"] = hash_key(key)
    _write(path, data)
    return key


def revoke_key(path: str | Path, name: str, now: float | None = None) -> None:
    """Mark key ``name`` revoked (kept in the file, with the time, for the record)."""
    from intentrank.service.auth import iso

    path = Path(path)
    data = _read(path)
    entry = _entry(data, name, path)
    entry["revoked"] = iso(time.time() if now is None else now)
    _write(path, data)


def list_keys(path: str | Path) -> list[ApiKey]:
    """The keys of a file (digests, never plain keys)."""
    return KeyStore.from_file(path).keys
