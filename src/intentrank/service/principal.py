"""Who is asking: the one dependency every route but /health and the page goes through.

:func:`principal` reads the presented key (``Authorization: Bearer`` or ``X-API-Key``),
checks it against the key ring (reloaded when the file changed), its expiry and its rate
limit, and returns a :class:`Principal`: the key's name, permissions, indexes, pipelines
and forced scope. 401 means no key, or one that is unknown, revoked or expired; 403 a
valid key without the right (a permission, an index, a pipeline); 429 too many requests
(the key's rate limit) or too many failed authentications from one client address."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from intentrank.service.auth import ApiKey
from intentrank.service.engine import RequestError
from intentrank.service.scope import Scope


class TooMany(RequestError):
    """429 with ``Retry-After``."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(429, message)
        self.retry_after = max(1, int(retry_after + 0.999))


class Buckets:
    """Token buckets by name: ``per_minute`` tokens a minute, as many at most."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, float]] = {}  # name -> (tokens, when)
        self.clock = clock

    def _level(self, name: str, per_minute: float, now: float) -> float:
        tokens, when = self._state.get(name, (per_minute, now))
        return min(per_minute, tokens + (now - when) * per_minute / 60)

    def take(self, name: str, per_minute: float) -> float:
        """0 if a token was taken, else the seconds until one is there."""
        with self._lock:
            now = self.clock()
            tokens = self._level(name, per_minute, now)
            if tokens >= 1:
                self._state[name] = (tokens - 1, now)
                return 0.0
            self._state[name] = (tokens, now)
            return (1 - tokens) * 60 / per_minute

    def empty(self, name: str, per_minute: float) -> float:
        """Seconds until ``name`` has a token (0: it has one now), taking nothing."""
        with self._lock:
            tokens = self._level(name, per_minute, self.clock())
            return 0.0 if tokens >= 1 else (1 - tokens) * 60 / per_minute


@dataclass(frozen=True)
class Principal:
    """The caller: a key, or anyone when keys are off (``key`` None: everything)."""

    key: ApiKey | None = None

    @property
    def name(self) -> str | None:
        return self.key.name if self.key is not None else None

    @property
    def scope(self) -> Scope:
        """What this caller may see and write: its key's forced filter (every read is ANDed
        with it) and the namespace of the ids it may create."""
        return Scope.everything() if self.key is None else \
            Scope.of_key(self.key.name, self.key.scope)

    def can(self, permission: str) -> bool:
        return self.key is None or self.key.can(permission)

    def allows(self, pipeline: str) -> bool:
        return self.key is None or self.key.allows(pipeline)

    def allows_index(self, index: str) -> bool:
        return self.key is None or self.key.allows_index(index)

    def check_pipeline(self, pipeline: str) -> None:
        if not self.allows(pipeline):
            raise RequestError(403, f"this key may not use pipeline {pipeline!r}")

    def check_index(self, index: str) -> None:
        if not self.allows_index(index):
            raise RequestError(403, f"this key may not use index {index!r}")


def presented_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else \
        request.headers.get("x-api-key", "")


def principal(request: Request) -> Principal:
    """The caller of ``request``, or 401 / 429 (see the module)."""
    state = request.app.state
    settings = state.settings
    if not settings.require_keys:
        return Principal()
    client = f"client:{request.client.host if request.client else '?'}"
    failures = settings.auth_failures_per_minute
    wait = state.buckets.empty(client, failures)
    if wait:
        raise TooMany(f"too many failed authentications from this address; retry in "
                      f"{wait:.0f} s", wait)
    presented = presented_key(request)
    if not presented:
        raise RequestError(401, "an API key is required: send 'Authorization: Bearer "
                                "<key>' or 'X-API-Key: <key>'")
    key = state.keyring.current().lookup(presented)
    problem = "unknown API key" if key is None else \
        "this API key has expired" if key.expired(state.wall_clock()) else ""
    if problem:
        state.buckets.take(client, failures)
        raise RequestError(401, problem)
    assert key is not None
    request.scope.setdefault("intentrank", {})["key"] = key.name
    if key.rate_limit is not None:
        wait = state.buckets.take(f"key:{key.name}:{key.sha256}", key.rate_limit)
        if wait:
            raise TooMany(f"key {key.name!r} is over its rate limit of {key.rate_limit:g} "
                          f"requests a minute; retry in {wait:.0f} s", wait)
    return Principal(key)


def needs(permission: str) -> Any:
    """A dependency: the caller, who must hold ``permission`` (else 403)."""
    def check(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if not who.can(permission):
            raise RequestError(403, f"key {who.name!r} lacks the {permission!r} permission")
        return who
    return Depends(check)


Caller = Annotated[Principal, Depends(principal)]
Reader = Annotated[Principal, needs("read")]
Writer = Annotated[Principal, needs("write")]
Evaluator = Annotated[Principal, needs("evaluate")]
