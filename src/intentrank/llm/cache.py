"""A persistent SQLite cache of LLM replies, so experiments replay exactly and cheaply."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from intentrank.llm.base import LLMReply, Message
from intentrank.paths import cache_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    seconds REAL NOT NULL,
    top_logprobs TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(
    backend: str,
    model: str,
    messages: list[Message],
    *,
    max_tokens: int,
    temperature: float,
    stop: list[str] | None,
    logprobs: int,
    json_schema: dict[str, Any] | None = None,
) -> str:
    """sha256 of the canonical JSON of everything that determines a reply (``json_schema``
    only when set)."""
    payload: dict[str, Any] = {
        "backend": backend, "model": model, "messages": messages, "max_tokens": max_tokens,
        "temperature": float(temperature), "stop": list(stop) if stop else None,
        "logprobs": int(logprobs),
    }
    if json_schema is not None:
        payload["json_schema"] = json_schema
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ReplyCache:
    """Replies keyed by :func:`cache_key`; one connection shared by threads under a lock.

    WAL mode lets several processes read while one writes.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else cache_dir() / "llm_cache.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)

    def get(self, key: str) -> LLMReply | None:
        """The stored reply (``cached=True``), or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT text, prompt_tokens, completion_tokens, seconds, top_logprobs "
                "FROM replies WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        text, prompt_tokens, completion_tokens, seconds, top = row
        raw: dict[str, Any] = {"cache_key": key, "original_seconds": seconds}
        return LLMReply(text, prompt_tokens, completion_tokens, 0.0, True, json.loads(top), raw)

    def put(self, key: str, reply: LLMReply, backend: str, model: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, backend, model, reply.text, reply.prompt_tokens, reply.completion_tokens,
                 reply.seconds, json.dumps(reply.top_logprobs), time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0])
