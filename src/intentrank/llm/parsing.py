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


def _json_candidates(text: str, open_ch: str, close_ch: str) -> list[str]:
    """Fenced blocks first, then every balanced-looking span from an opening bracket."""
    found = [m.group(1) for m in _FENCE.finditer(text)]
    for start in (i for i, ch in enumerate(text) if ch == open_ch):
        end = text.rfind(close_ch, start)
        while end > start:
            found.append(text[start : end + 1])
            end = text.rfind(close_ch, start, end)
    return found


def _first_json(text: str, kind: type) -> tuple[Any, str]:
    open_ch, close_ch = ("[", "]") if kind is list else ("{", "}")
    for cand in _json_candidates(text, open_ch, close_ch):
        try:
            value = json.loads(cand.strip())
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, kind):
            return value, ""
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
