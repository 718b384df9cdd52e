"""What a filter compares: filter values, the typed views of a record's elements, field
look-up, and the text form of values and field names."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from intentrank.errors import FilterError

Value = str | int | float | bool | datetime
KEYWORDS = frozenset({"and", "or", "not", "in", "prefix", "true", "false"})
NUMBER, DATE, STRING, BOOL = range(4)  # the slots of views(), one per kind of value

DATE_PATTERN = (r"\d{4}-\d{2}-\d{2}"
                r"(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
NUMBER_PATTERN = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_][A-Za-z0-9_\-]*)*"
DATE_RE, NUMBER_RE = re.compile(DATE_PATTERN), re.compile(NUMBER_PATTERN)
NAME_RE = re.compile(NAME_PATTERN)
_NUMERIC_START = frozenset("0123456789+-.")


def parse_date(text: str) -> datetime | None:
    """An ISO date or datetime string as an aware UTC datetime (naive ones are UTC); None
    when it is not one."""
    if not DATE_RE.fullmatch(text):
        return None
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _as_float(x: Any) -> float:
    try:
        return float(x)
    except OverflowError:  # an int beyond the float range
        return math.copysign(math.inf, x)


def _as_datetime(x: date) -> datetime:
    if isinstance(x, datetime):
        return x.replace(tzinfo=UTC) if x.tzinfo is None else x.astimezone(UTC)
    return datetime(x.year, x.month, x.day, tzinfo=UTC)


def spelled(text: str) -> tuple[float, float]:
    """The number and the date (POSIX seconds) a string spells; NaN where it spells none."""
    if not text or text[0] not in _NUMERIC_START:  # the common case, decided cheaply
        return math.nan, math.nan
    dt = parse_date(text)
    return (_as_float(text) if NUMBER_RE.fullmatch(text) else math.nan,
            dt.timestamp() if dt else math.nan)


def views(x: Any) -> tuple[float, float, str | None, int]:
    """One metadata element as each kind of filter value sees it: (number, date as POSIX
    seconds, string, bool as 0/1), with NaN, NaN, None, -1 where it is not of that kind. A
    string that spells a number or an ISO date is that number or date too (CSV fields)."""
    nan = math.nan
    if isinstance(x, bool):
        return nan, nan, None, int(x)
    if isinstance(x, numbers.Real):
        return _as_float(x), nan, None, -1
    if isinstance(x, str):
        return (*spelled(x), x, -1)
    if isinstance(x, date):
        return nan, _as_datetime(x).timestamp(), None, -1
    return nan, nan, None, -1


def kind_of(value: Value) -> int:
    """Which slot of :func:`views` a filter value compares with."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, datetime):
        return DATE
    return STRING if isinstance(value, str) else NUMBER


def key_of(value: Value) -> Any:
    """A filter value in the form its slot of :func:`views` holds."""
    return views(value)[kind_of(value)]


def usable(view: Any, kind: int) -> bool:
    """Whether an element's view of one kind holds a value."""
    if kind == STRING:
        return view is not None
    return view != -1 if kind == BOOL else not math.isnan(view)


def check_value(value: Any, where: str) -> Value:
    """A filter value, normalised: ISO date strings and dates become UTC datetimes, numpy
    numbers Python ones."""
    if isinstance(value, str):
        return parse_date(value) or value
    if isinstance(value, date):
        return _as_datetime(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    raise FilterError(f"{where}: a filter value must be a string, a finite number, a bool "
                      f"or a date, got {value!r}")


def format_value(value: Value) -> str:
    """A value as filter text (it parses back to an equal value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        if value.hour == value.minute == value.second == value.microsecond == 0:
            return value.date().isoformat()
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def format_field(name: str) -> str:
    """A field name as filter text: bare if it is a plain name, else in backticks."""
    if NAME_RE.fullmatch(name) and name.lower() not in KEYWORDS:
        return name
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def lookup(record: Mapping[str, Any], field: str) -> Any:
    """A record's value of ``field``: its own key, else a dotted path through nested
    mappings; None when missing."""
    if field in record:
        return record[field]
    if "." not in field:
        return None
    cur: Any = record
    for part in field.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def elements(value: Any) -> list[Any]:
    """The elements a field's value compares by: a list's non-null items, else itself."""
    if isinstance(value, list | tuple):
        return [v for v in value if v is not None]
    return [] if value is None else [value]

