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


def normalise(text: str) -> str:
    """Lower case, every run of non-word characters one space: how list items, aspects and
    knowledge elements are compared for duplicates."""
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
    seen = {normalise(e) for e in exclude}
    out: list[str] = []
    for item in items:
        item = item.strip().strip('"').strip()
        key = normalise(item)
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


def parse_yes_no(text: str) -> Parsed[bool | None]:
    """A yes/no answer from the first word that is one of them."""
    m = re.search(r"\b(yes|no)\b", text.lower())
    if not m:
        return Parsed(None, False, "neither yes nor no")
    return Parsed(m.group(1) == "yes", True)


# --- named parsers for prompt contracts ------------------------------------------------------
# A contract names its parser (``parser: numbered_list``); :func:`intentrank.llm.step.run_step`
# calls it on the reply text. A named parser returns the value, a :class:`Repaired` value
# (usable, but only after a counted repair), or raises :class:`ParseError` saying why not.


CITATION_MARKER = re.compile(r"\[\s*(\d+(?:\s*[,;-]\s*\d+)*)\s*\]")
"""A citation marker as answers write it: ``[1]``, ``[1, 3]``, ``[2-4]``, ``[1, 2-4]``; also
malformed ones such as ``[1-2-3]`` (see :func:`citation_numbers`)."""
_CITED_PART = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")
MAX_CITED_RANGE = 20


def citation_numbers(body: str) -> tuple[int, ...] | None:
    """The numbers a marker's body (group 1 of :data:`CITATION_MARKER`) cites, in order.

    Parts are separated by ``,`` or ``;``; each is a number or a range ``a-b`` (``a..b``
    when ``0 < b - a < 20``, else the two ends). None for a malformed body (a part with two
    dashes, ``1-2-3``): the caller treats it as an invalid citation. Never raises.
    """
    numbers: list[int] = []
    for part in re.split(r"[,;]", body):
        match = _CITED_PART.fullmatch(part)
        if match is None:
            return None
        a = int(match.group(1))
        if match.group(2) is None:
            numbers.append(a)
            continue
        b = int(match.group(2))
        numbers.extend(range(a, b + 1) if 0 < b - a < MAX_CITED_RANGE else (a, b))
    return tuple(numbers)


def read_citation_markers(text: str) -> tuple[list[int], list[str]]:
    """Every number cited by the text's citation markers, in order (repeats kept), and
    the malformed markers as written."""
    numbers: list[int] = []
    malformed: list[str] = []
    for match in CITATION_MARKER.finditer(text):
        cited = citation_numbers(match.group(1))
        if cited is None:
            malformed.append(match.group(0))
        else:
            numbers.extend(cited)
    return numbers, malformed


class ParseError(ValueError):
    """A reply a parser cannot read (the step falls back, counted as ``unparseable``)."""


@dataclass(frozen=True)
class Repaired(Generic[T]):
    """A value that needed a repair to be usable (counted as ``repairs``, logged with
    ``detail``): e.g. a partial ranking completed, weights renormalised to sum to 1."""

    value: T
    detail: str


def repair_order(answer: list[Any], n: int) -> tuple[list[int], bool]:
    """A permutation of ``range(n)`` from a 1-based answer; ``True`` if it needed repair.

    Valid, unique numbers keep the answer's order; missing ones follow in their old order.
    """
    seen: list[int] = []
    for item in answer:
        try:
            i = int(item) - 1
            exact = 0 <= i < n and float(item) == i + 1
        except (TypeError, ValueError, OverflowError):  # inf, nan, "two", [1], {...}
            continue
        if exact and i not in seen:
            seen.append(i)
    missing = [i for i in range(n) if i not in seen]
    return seen + missing, bool(missing) or len(answer) != n


def read_text(text: str) -> str:
    """The reply, stripped (never fails; an empty reply is the empty string)."""
    return text.strip()


def read_numbered_list(text: str, *, limit: int | None = None,
                       exclude: tuple[str, ...] = ()) -> list[str]:
    """The items of :func:`parse_numbered_list`, or ParseError when there are none."""
    parsed = parse_numbered_list(text, limit=limit, exclude=exclude)
    if not parsed.ok:
        raise ParseError(parsed.reason)
    return parsed.value


def read_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in the reply (fenced or inline), or ParseError."""
    value, reason = _first_json(text, dict)
    if value is None:
        raise ParseError(reason)
    return value


def read_json_array(text: str) -> list[Any]:
    """The first JSON array in the reply (fenced or inline), or ParseError."""
    value, reason = _first_json(text, list)
    if value is None:
        raise ParseError(reason)
    return value


def read_permutation(text: str, *, n: int | None = None) -> list[int] | Repaired[list[int]]:
    """A 0-based order of ``n`` items from a 1-based JSON array of item numbers, bare
    (``[2, 1, 3]``) or under ``"ranking"`` (``{"ranking": [2, 1, 3]}``, structured output).

    Without ``n`` the numbers come back as read (0-based). With ``n`` an answer that is not a
    permutation of 1..n is repaired by :func:`repair_order` and returned as
    :class:`Repaired`; an array with no usable number is a ParseError.
    """
    obj, _ = _first_json(text, dict)
    if isinstance(obj, dict) and isinstance(obj.get("ranking"), list):
        answer = obj["ranking"]
    else:
        answer = read_json_array(text)
    if n is None:
        return [int(i) - 1 for i in answer if isinstance(i, int) and not isinstance(i, bool)]
    order, repaired = repair_order(answer, n)
    if order == list(range(n)) and not any(
            isinstance(i, int | float) and not isinstance(i, bool) and 1 <= i <= n
            for i in answer):
        raise ParseError(f"no passage number in {answer[:20]!r}")
    return Repaired(order, f"answer {answer[:20]!r} is not a permutation of 1..{n}") \
        if repaired else order


def read_yes_no(text: str) -> bool:
    """True for yes, False for no (the first of the two words), or ParseError."""
    parsed = parse_yes_no(text)
    if parsed.value is None:
        raise ParseError(parsed.reason)
    return parsed.value


PARSERS: dict[str, Callable[..., Any]] = {
    "text": read_text,
    "numbered_list": read_numbered_list,
    "json_object": read_json_object,
    "json_array": read_json_array,
    "permutation": read_permutation,
    "yes_no": read_yes_no,
}


def register_parser(name: str, parser: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``parser`` (reply text, keyword options -> value or ParseError) usable by name."""
    PARSERS[name] = parser
    return parser
