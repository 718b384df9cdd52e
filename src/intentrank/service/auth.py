"""API keys: stored only as sha256 hex digests, each allowed all pipelines or a list of them.

A keys file (YAML or JSON)::

    keys:
      - name: alice                      # shown in the access log, never the key
        sha256: 9f86d081884c7d65...      # sha256 hex of the key (intentrank.service.auth.hash_key)
        pipelines: [bm25, rrf]           # optional; default every pipeline ("*")

or the ``INTENTRANK_API_KEYS`` environment variable: entries separated by commas, each
``<sha256>`` or ``<sha256>:<pipeline>|<pipeline>``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from intentrank.errors import ConfigError

ENV_VAR = "INTENTRANK_API_KEYS"
_HEX = re.compile(r"[0-9a-f]{64}")


def hash_key(key: str) -> str:
    """The sha256 hex digest a key is stored as."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def generate_key() -> str:
    """A new random key (32 bytes of entropy, URL-safe)."""
    return "ir_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ApiKey:
    """One stored key: its name, digest and the pipelines it may use (``None``: all)."""

    name: str
    sha256: str
    pipelines: frozenset[str] | None = None

    def allows(self, pipeline: str) -> bool:
        return self.pipelines is None or pipeline in self.pipelines


def _key(name: str, digest: object, pipelines: object, where: str) -> ApiKey:
    if not isinstance(digest, str) or not _HEX.fullmatch(digest.strip().lower()):
        raise ConfigError(f"{where}: 'sha256' must be 64 hex digits (the sha256 of the key), "
                          f"not the key itself")
    if pipelines is None or pipelines == "*" or pipelines == ["*"]:
        allowed = None
    elif isinstance(pipelines, list) and all(isinstance(p, str) and p for p in pipelines):
        allowed = frozenset(pipelines)
    else:
        raise ConfigError(f"{where}: 'pipelines' must be a list of pipeline names or '*', "
                          f"got {pipelines!r}")
    return ApiKey(name, digest.strip().lower(), allowed)


class KeyStore:
    """The accepted keys, looked up by digest."""

    def __init__(self, keys: Iterable[ApiKey] = ()) -> None:
        self._by_digest: dict[str, ApiKey] = {}
        for k in keys:
            if k.sha256 in self._by_digest:
                raise ConfigError(f"API key {k.name!r}: the same key digest is listed twice")
            self._by_digest[k.sha256] = k

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, presented: str) -> ApiKey | None:
        """The stored key for a presented plain key, or None."""
        return self._by_digest.get(hash_key(presented))

    def pipelines_named(self) -> set[str]:
        """Every pipeline name some key is restricted to (checked against the served ones)."""
        return {p for k in self._by_digest.values() for p in (k.pipelines or ())}

    @classmethod
    def from_file(cls, path: str | Path) -> KeyStore:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read API keys file: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise ConfigError(f"{path}: an API keys file needs a top-level 'keys' list")
        keys = []
        for i, entry in enumerate(data["keys"]):
            where = f"{path}: keys[{i}]"
            if not isinstance(entry, dict) or "sha256" not in entry:
                raise ConfigError(f"{where}: expected a mapping with 'sha256' (and optional "
                                  f"'name', 'pipelines')")
            unknown = sorted(set(entry) - {"name", "sha256", "pipelines"})
            if unknown:
                raise ConfigError(f"{where}: unknown field(s) {unknown}")
            keys.append(_key(str(entry.get("name", f"key{i + 1}")), entry["sha256"],
                             entry.get("pipelines"), where))
        return cls(keys)

    @classmethod
    def from_env(cls, value: str) -> KeyStore:
        keys = []
        for i, item in enumerate(p.strip() for p in value.split(",")):
            if not item:
                continue
            digest, _, names = item.partition(":")
            pipelines = [n.strip() for n in names.split("|") if n.strip()] if names else None
            keys.append(_key(f"env{i + 1}", digest, pipelines, f"${ENV_VAR} entry {i + 1}"))
        return cls(keys)
