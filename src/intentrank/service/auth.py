"""API keys: stored only as sha256 hex digests, each with a name, the indexes and pipelines it
may use, a forced scope, permissions, a rate limit and an expiry.

A keys file (YAML or JSON; ``intentrank keys add|list|rotate|revoke`` write it)::

    tenant_field: tenant                 # optional: the metadata field naming a tenant
    access_field: acl                    # optional: the metadata field listing groups
    keys:
      - name: acme-finance               # shown in the access log, never the key
        sha256: 9f86d081884c7d65...      # sha256 hex of the key (hash_key)
        pipelines: [bm25, rrf]           # optional; default every pipeline ("*")
        indexes: [docs]                  # optional; default every index ("*")
        tenant: acme                     # optional: sees only tenant = "acme"
        groups: [finance, all-staff]     # optional: sees only acl IN ("finance", ...)
        filter: 'year >= 2020'           # optional: a further forced metadata filter
        permissions: [read, evaluate]    # read, write, evaluate, admin (default read, evaluate)
        rate_limit: 600                  # optional: requests per minute
        expires: 2027-01-31T00:00:00Z    # optional: refused from then on
        revoked: 2026-11-27T14:00:00Z    # optional: refused (kept for the record)

A key with none of ``tenant``, ``groups``, ``filter`` sees every document (as keys did
before scopes); one with any of them sees only the documents their conjunction matches
(:attr:`ApiKey.scope`, a filter of :mod:`intentrank.filters`). ``$INTENTRANK_API_KEYS``
holds unscoped keys: entries separated by commas, each ``<sha256>`` or
``<sha256>:<pipeline>|<pipeline>``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from intentrank.errors import ConfigError

ENV_VAR = "INTENTRANK_API_KEYS"
PERMISSIONS = ("read", "write", "evaluate", "admin")
DEFAULT_PERMISSIONS = frozenset({"read", "evaluate"})
FIELDS = ("name", "sha256", "pipelines", "indexes", "tenant", "groups", "filter",
          "permissions", "rate_limit", "expires", "revoked")
_HEX = re.compile(r"[0-9a-f]{64}")
_VALUE = re.compile(r"[A-Za-z0-9_.:@/+ -]{1,200}")  # tenants and groups: quotable as is
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def hash_key(key: str) -> str:
    """The sha256 hex digest a key is stored as."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def generate_key() -> str:
    """A new random key (32 bytes of entropy, URL-safe)."""
    return "ir_" + secrets.token_urlsafe(32)


def parse_time(value: Any, where: str) -> float:
    """An ISO date or datetime (naive: UTC) as epoch seconds."""
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not an ISO date or datetime") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ApiKey:
    """One stored key. ``None`` for ``pipelines`` / ``indexes``: all of them."""

    name: str
    sha256: str
    pipelines: frozenset[str] | None = None
    indexes: frozenset[str] | None = None
    tenant: str | None = None
    groups: frozenset[str] | None = None
    filter: str | None = None
    permissions: frozenset[str] = DEFAULT_PERMISSIONS
    rate_limit: float | None = None  # requests per minute
    expires: float | None = None  # epoch seconds
    revoked: float | None = None
    tenant_field: str = "tenant"
    access_field: str = "acl"

    def allows(self, pipeline: str) -> bool:
        return self.pipelines is None or pipeline in self.pipelines

    def allows_index(self, index: str) -> bool:
        return self.indexes is None or index in self.indexes

    def can(self, permission: str) -> bool:
        """Whether the key holds ``permission`` (``admin`` holds every one)."""
        return permission in self.permissions or "admin" in self.permissions

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires

    @property
    def scope(self) -> str | None:
        """The forced filter (text of :mod:`intentrank.filters`'s grammar), or None: every
        document. Tenant and groups are names checked at load, so they are quoted as is."""
        parts = []
        if self.tenant is not None:
            parts.append(f'{self.tenant_field} = "{self.tenant}"')
        if self.groups is not None:
            names = ", ".join(f'"{g}"' for g in sorted(self.groups))
            parts.append(f"{self.access_field} IN ({names})")
        if self.filter is not None:
            parts.append(f"({self.filter})")
        return " AND ".join(parts) or None

    def record(self) -> dict[str, Any]:
        """The key as a keys-file entry (what :func:`write_keys` stores)."""
        out: dict[str, Any] = {"name": self.name, "sha256": self.sha256}
        for name in ("pipelines", "indexes", "groups"):
            if getattr(self, name) is not None:
                out[name] = sorted(getattr(self, name))
        for name in ("tenant", "filter", "rate_limit"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        out["permissions"] = [p for p in PERMISSIONS if p in self.permissions]
        for name in ("expires", "revoked"):
            if getattr(self, name) is not None:
                out[name] = iso(getattr(self, name))
        return out


def _names(value: Any, field: str, where: str, pattern: re.Pattern[str] | None = None
           ) -> frozenset[str] | None:
    if value is None or value == "*" or value == ["*"]:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and v and (pattern is None or pattern.fullmatch(v))
            for v in value):
        rule = " (letters, digits, ' ', '_', '.', ':', '@', '/', '+', '-')" if pattern else ""
        raise ConfigError(f"{where}: {field!r} must be a list of names{rule} or '*', "
                          f"got {value!r}")
    return frozenset(value)


def make_key(entry: dict[str, Any], where: str, tenant_field: str = "tenant",
             access_field: str = "acl") -> ApiKey:
    """A key from a keys-file entry, every field checked (errors name ``where``)."""
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown} (known: {', '.join(FIELDS)})")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or not _HEX.fullmatch(digest.strip().lower()):
        raise ConfigError(f"{where}: 'sha256' must be 64 hex digits (the sha256 of the key), "
                          f"not the key itself")
    tenant = entry.get("tenant")
    if tenant is not None and not (isinstance(tenant, str) and _VALUE.fullmatch(tenant)):
        raise ConfigError(f"{where}: 'tenant' must be a name (letters, digits, ' ', '_', '.', "
                          f"':', '@', '/', '+', '-'), got {tenant!r}")
    flt = entry.get("filter")
    if flt is not None:
        if not isinstance(flt, str) or not flt.strip():
            raise ConfigError(f"{where}: 'filter' must be a filter expression")
        from intentrank.filters import parse_filter

        try:
            parse_filter(flt)
        except ValueError as exc:
            raise ConfigError(f"{where}: 'filter': {exc}") from None
    perms = entry.get("permissions", sorted(DEFAULT_PERMISSIONS))
    if isinstance(perms, str):
        perms = [perms]
    if not isinstance(perms, list) or any(p not in PERMISSIONS for p in perms):
        raise ConfigError(f"{where}: 'permissions' must be a list of {', '.join(PERMISSIONS)}, "
                          f"got {perms!r}")
    rate = entry.get("rate_limit")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or rate <= 0):
        raise ConfigError(f"{where}: 'rate_limit' must be a number of requests per minute "
                          f"above 0, got {rate!r}")
    return ApiKey(
        name=str(entry.get("name", "key")), sha256=digest.strip().lower(),
        pipelines=_names(entry.get("pipelines"), "pipelines", where),
        indexes=_names(entry.get("indexes"), "indexes", where),
        tenant=tenant, groups=_names(entry.get("groups"), "groups", where, _VALUE),
        filter=flt, permissions=frozenset(perms),
        rate_limit=float(rate) if rate is not None else None,
        expires=parse_time(entry["expires"], f"{where}: 'expires'")
        if entry.get("expires") is not None else None,
        revoked=parse_time(entry["revoked"], f"{where}: 'revoked'")
        if entry.get("revoked") is not None else None,
        tenant_field=tenant_field, access_field=access_field)


class KeyStore:
    """The accepted keys; a presented key is compared with every stored digest in constant
    time (:func:`hmac.compare_digest`, no early exit)."""

    def __init__(self, keys: Iterable[ApiKey] = (), tenant_field: str = "tenant",
                 access_field: str = "acl") -> None:
        self.keys: list[ApiKey] = []
        self.tenant_field, self.access_field = tenant_field, access_field
        seen: dict[str, str] = {}
        for k in keys:
            if k.sha256 in seen.values():
                raise ConfigError(f"API key {k.name!r}: the same key digest is listed twice")
            if k.name in seen:
                raise ConfigError(f"API key name {k.name!r} is listed twice")
            seen[k.name] = k.sha256
            self.keys.append(k)

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, presented: str) -> ApiKey | None:
        """The stored, unrevoked key for a presented plain key, or None."""
        digest = hash_key(presented).encode()
        found = None
        for k in self.keys:  # every digest compared: the time does not depend on which
            if hmac.compare_digest(digest, k.sha256.encode()) and k.revoked is None:
                found = k
        return found

    def named(self, name: str) -> ApiKey | None:
        return next((k for k in self.keys if k.name == name), None)

    def pipelines_named(self) -> set[str]:
        """Every pipeline name some key is restricted to (checked against the served ones)."""
        return {p for k in self.keys for p in (k.pipelines or ())}

    def indexes_named(self) -> set[str]:
        return {i for k in self.keys for i in (k.indexes or ())}

    @classmethod
    def from_file(cls, path: str | Path) -> KeyStore:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read API keys file: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise ConfigError(f"{path}: an API keys file needs a top-level 'keys' list")
        unknown = sorted(set(data) - {"keys", "tenant_field", "access_field"})
        if unknown:
            raise ConfigError(f"{path}: unknown top-level field(s) {unknown}")
        fields = {}
        for name in ("tenant_field", "access_field"):
            value = data.get(name, "tenant" if name == "tenant_field" else "acl")
            if not isinstance(value, str) or not _FIELD.fullmatch(value):
                raise ConfigError(f"{path}: {name!r} must be a metadata field name, "
                                  f"got {value!r}")
            fields[name] = value
        keys = []
        for i, entry in enumerate(data["keys"]):
            where = f"{path}: keys[{i}]"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: expected a mapping with 'sha256' (and optional "
                                  f"{', '.join(FIELDS[2:])})")
            keys.append(make_key({"name": f"key{i + 1}", **entry}, where, **fields))
        return cls(keys, **fields)

    @classmethod
    def from_env(cls, value: str) -> KeyStore:
        keys = []
        for i, item in enumerate(p.strip() for p in value.split(",")):
            if not item:
                continue
            digest, _, names = item.partition(":")
            pipelines = [n.strip() for n in names.split("|") if n.strip()] if names else None
            keys.append(make_key({"name": f"env{i + 1}", "sha256": digest,
                                  "pipelines": pipelines}, f"${ENV_VAR} entry {i + 1}"))
        return cls(keys)
