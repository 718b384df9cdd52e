"""The frameworks' metadata-filter objects as intentrank filters (free of any framework: a
LlamaIndex ``MetadataFilters`` is read by its attributes).

- LangChain's vector-store dict form (``search_kwargs={"filter": {...}}``):
  ``{"team": "a", "year": {"$gte": 2020}, "$or": [{...}, {...}], "$not": {...}}``; operators
  ``$eq $ne $gt $gte $lt $lte $in $nin $between``, several keys of one mapping are ANDed.
- LlamaIndex ``MetadataFilters(filters=[MetadataFilter(key, value, operator), ...],
  condition=and|or|not)``, nested; operators ``== != > >= < <= in nin``, ``contains`` (a
  list field holds the value), ``any`` (holds one of the values) and ``all`` (holds every
  one). ``not`` matches when none of its filters does, as in LlamaIndex.

Anything else (``$like``, ``$exists``, ``text_match``, ``is_empty``, a null value) has no
counterpart in the grammar and is refused with :class:`~intentrank.errors.FilterError`.
Text or a :class:`~intentrank.filters.Filter` passes through as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from intentrank.errors import FilterError
from intentrank.filters import And, Compare, Filter, In, Not, Or

LANGCHAIN_OPS = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
LLAMAINDEX_OPS = {"==": "=", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<=",
                  "contains": "="}  # = on a list field: one element equals the value


def _all(parts: list[Filter]) -> Filter:
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _any(parts: list[Filter]) -> Filter:
    return parts[0] if len(parts) == 1 else Or(tuple(parts))


def _scalar(value: Any, where: str) -> Any:
    if value is None or isinstance(value, Mapping | list | tuple | set):
        raise FilterError(f"{where}: expected a string, number, bool or date, got {value!r}")
    return value


def _values(value: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple | set):
        raise FilterError(f"{where}: expected a list of values, got {value!r}")
    return tuple(_scalar(v, where) for v in value)


def from_langchain(spec: Mapping[str, Any] | str | Filter | None) -> Filter | None:
    """A LangChain-style filter dict as a filter (None or ``{}``: no filter)."""
    if spec is None or isinstance(spec, str | Filter):
        return Filter.from_value(spec)
    if not isinstance(spec, Mapping):
        raise FilterError(f"filter: expected a dict, filter text or a Filter, got {spec!r}")
    return _langchain(spec, "filter") if spec else None


def _langchain(spec: Mapping[str, Any], where: str) -> Filter:
    if not isinstance(spec, Mapping) or not spec:
        raise FilterError(f"{where}: expected a non-empty dict, got {spec!r}")
    parts = []
    for key, value in spec.items():
        at = f"{where}.{key}"
        if key in ("$and", "$or"):
            if not isinstance(value, list | tuple) or not value:
                raise FilterError(f"{at}: expected a non-empty list of dicts, got {value!r}")
            subs = [_langchain(v, f"{at}[{i}]") for i, v in enumerate(value)]
            parts.append(_all(subs) if key == "$and" else _any(subs))
        elif key == "$not":
            parts.append(Not(_langchain(value, at)))
        elif key.startswith("$"):
            raise FilterError(f"{at}: unknown or unsupported operator {key!r}; known: $and, "
                              f"$or, $not, and per field {', '.join(LANGCHAIN_OPS)}, $in, "
                              f"$nin, $between")
        elif isinstance(value, Mapping):
            parts.append(_langchain_field(key, value, at))
        elif isinstance(value, list | tuple):
            raise FilterError(f"{at}: a list is not a value; for one of several values "
                              f"write {{{key!r}: {{'$in': {list(value)!r}}}}}")
        else:
            parts.append(Compare(key, "=", _scalar(value, at)))
    return _all(parts)


def _langchain_field(field: str, ops: Mapping[str, Any], where: str) -> Filter:
    if not ops:
        raise FilterError(f"{where}: expected operators such as {{'$gte': 2020}}, got {{}}")
    parts: list[Filter] = []
    for op, value in ops.items():
        at = f"{where}.{op}"
        if op in LANGCHAIN_OPS:
            parts.append(Compare(field, LANGCHAIN_OPS[op], _scalar(value, at)))
        elif op in ("$in", "$nin"):
            within = In(field, _values(value, at))
            parts.append(within if op == "$in" else Not(within))
        elif op == "$between":
            bounds = _values(value, at)
            if len(bounds) != 2:
                raise FilterError(f"{at}: expected [low, high], got {value!r}")
            parts += [Compare(field, ">=", bounds[0]), Compare(field, "<=", bounds[1])]
        else:
            raise FilterError(f"{at}: unsupported operator {op!r} (intentrank filters have "
                              f"{', '.join(LANGCHAIN_OPS)}, $in, $nin, $between; see "
                              f"docs/filters.md)")
    return _all(parts)


def from_llamaindex(filters: Any) -> Filter | None:
    """A LlamaIndex ``MetadataFilters`` (or one ``MetadataFilter``) as a filter; None (or
    empty filters) for none."""
    if filters is None or isinstance(filters, str | Filter):
        return Filter.from_value(filters)
    if hasattr(filters, "filters"):
        return _llamaindex_group(filters, "filters") if filters.filters else None
    if hasattr(filters, "key") and hasattr(filters, "operator"):
        return _llamaindex_one(filters, "filter")
    raise FilterError(f"filters: expected a LlamaIndex MetadataFilters, filter text or a "
                      f"Filter, got {filters!r}")


def _enum(value: Any) -> str:
    return str(getattr(value, "value", value))


def _llamaindex_group(group: Any, where: str) -> Filter:
    parts = []
    for i, f in enumerate(group.filters):
        at = f"{where}[{i}]"
        if hasattr(f, "filters"):
            if not f.filters:
                raise FilterError(f"{at}: an empty MetadataFilters inside another")
            parts.append(_llamaindex_group(f, f"{at}.filters"))
        else:
            parts.append(_llamaindex_one(f, at))
    condition = _enum(getattr(group, "condition", None) or "and")
    if condition == "and":
        return _all(parts)
    if condition == "or":
        return _any(parts)
    if condition == "not":  # LlamaIndex: none of the filters matches
        return Not(_any(parts))
    raise FilterError(f"{where}: unknown condition {condition!r}; known: and, or, not")


def _llamaindex_one(f: Any, where: str) -> Filter:
    op, field, value = _enum(f.operator), f.key, f.value
    at = f"{where} ({field} {op})"
    if op in LLAMAINDEX_OPS:
        return Compare(field, LLAMAINDEX_OPS[op], _scalar(value, at))
    if op in ("in", "any"):  # any: a list field holds one of the values
        return In(field, _values(value, at))
    if op == "nin":
        return Not(In(field, _values(value, at)))
    if op == "all":
        values = _values(value, at)
        if not values:
            raise FilterError(f"{at}: 'all' of no values")
        return _all([Compare(field, "=", v) for v in values])
    raise FilterError(f"{at}: the operator {op!r} has no intentrank counterpart (supported: "
                      f"==, !=, >, >=, <, <=, in, nin, contains, any, all; see "
                      f"docs/filters.md)")


__all__ = ["from_langchain", "from_llamaindex"]
