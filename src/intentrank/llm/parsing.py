"""Turn LLM replies into values, never raising: each parser returns the value or a fallback
with the reason, so callers can count malformed answers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_NUMBERED = re.compile(r"^\s*(?:[-*•]|\(?\d{1,2}[.):]|Q\d{1,2}[.):]?)\s+(.*\S)\s*$")
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A parsed value, or the fallback with why parsing failed (``ok`` is False)."""

    value: T
    ok: bool
    reason: str = ""


def _normalise(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def parse_numbered_list(
    text: str, *, limit: int | None = None, exclude: tuple[str, ...] = (), min_chars: int = 3
) -> Parsed[list[str]]:
    """Items of a numbered or bulleted list; blank, duplicate and excluded (echoed) lines go.

    Falls back to all non-empty lines when no line is numbered; an empty result is not ok.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    items = [m.group(1) for ln in lines if (m := _NUMBERED.match(ln))]
    reason = ""
    if not items:
        items, reason = [ln.strip() for ln in lines], "no numbered lines"
    seen = {_normalise(e) for e in exclude}
    out: list[str] = []
    for item in items:
        item = item.strip().strip('"').strip()
        key = _normalise(item)
        if len(key) < min_chars or key in seen:
            continue
        seen.add(key)
        out.append(item)
    if limit is not None:
        out = out[:limit]
    if not out:
        return Parsed([], False, reason or "no usable items")
    return Parsed(out, True, reason)


MAX_PARSE_CHARS = 50_000  # a runaway reply is read this far
MAX_SCAN_CHARS = 2_000_000  # characters the JSON decoder may scan over all failed attempts

_DECODER = json.JSONDecoder()


def _first_json(text: str, kind: type) -> tuple[Any, str]:
    """The first JSON value of ``kind`` in ``text``: a fenced block that is one, else the
    value starting at the first opening bracket where one parses (what follows it is
    ignored). Bounded: a reply of thousands of brackets (a model stuck in a loop) is scanned
    for at most :data:`MAX_SCAN_CHARS` characters in all, and deep nesting is no error."""
    if not isinstance(text, str):
        return None, f"not text: {type(text).__name__}"
    text = text[:MAX_PARSE_CHARS]
    open_ch = "[" if kind is list else "{"
    for m in _FENCE.finditer(text):
        try:
            value = json.loads(m.group(1).strip())
        except (ValueError, RecursionError):
            continue
        if isinstance(value, kind):
            return value, ""
    start, budget = text.find(open_ch), MAX_SCAN_CHARS
    while start != -1 and budget > 0:
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            value, budget = None, budget - max(exc.pos - start, 1)
        except (ValueError, RecursionError):
            value, budget = None, budget - (len(text) - start)
        if isinstance(value, kind):
            return value, ""
        start = text.find(open_ch, start + 1)
    return None, f"no JSON {kind.__name__} found"


def parse_json_array(text: str, fallback: list[Any] | None = None) -> Parsed[list[Any]]:
    """The first JSON array in the reply (fenced or inline)."""
    value, reason = _first_json(text, list)
    if value is None:
        return Parsed(list(fallback or []), False, reason)
    return Parsed(value, True)


def parse_json_object(
    text: str,
    fallback: T,
    validate: Callable[[dict[str, Any]], T] | None = None,
) -> Parsed[T | dict[str, Any]]:
    """The first JSON object in the reply, passed through ``validate`` when given.

    ``validate`` returns the cleaned value or raises ``ValueError`` / ``KeyError`` /
    ``TypeError`` with the reason; any failure returns ``fallback``.
    """
    value, reason = _first_json(text, dict)
    if value is None:
        return Parsed(fallback, False, reason)
    if validate is None:
        return Parsed(value, True)
    try:
        return Parsed(validate(value), True)
    except (ValueError, KeyError, TypeError) as exc:
        return Parsed(fallback, False, f"invalid: {exc}")


def parse_yes_no(text: str) -> Parsed[bool | None]:
    """A yes/no answer from the first word that is one of them."""
    m = re.search(r"\b(yes|no)\b", text.lower())
    if not m:
        return Parsed(None, False, "neither yes nor no")
    return Parsed(m.group(1) == "yes", True)
