"""Metadata as columns: every field over all rows of an index as typed numpy arrays, so a
filter over a million rows is a few array operations, not a Python loop per row."""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from intentrank.filters.values import (
    STRING,
    Value,
    elements,
    key_of,
    kind_of,
    lookup,
    spelled,
    views,
)

WIDE_BYTES = 256 << 20  # the most a numpy copy of a column's strings may take
RANGE_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


class Column:
    """One field over all rows. Its elements ("entries") are held as one array per kind of
    value (:func:`~intentrank.filters.values.views`): numbers and dates as float64 with NaN,
    bools as int8 with -1, strings as codes into the sorted distinct strings (-1: none), so
    equality, IN and PREFIX are integer tests and string ranges a bisection. ``rows`` gives
    each entry's row, None when no row holds a list (entry i is row i); ``present``: the rows
    that hold the field (not null)."""

    def __init__(self, values: Sequence[Any]) -> None:
        self.n = len(values)
        self.present = np.fromiter(map(operator.is_not, values, repeat(None)), bool, self.n)
        if any(issubclass(t, list | tuple) for t in set(map(type, values))):
            per_row = [(v if None not in v else elements(v)) if isinstance(v, list | tuple)
                       else [] if v is None else [v] for v in values]  # elements(v), faster
            self.rows: np.ndarray | None = np.repeat(
                np.arange(self.n, dtype=np.int64), [len(e) for e in per_row])
            entries = [x for e in per_row for x in e]
        else:
            self.rows, entries = None, list(values)
        self._typed(entries)

    def _typed(self, entries: list[Any]) -> None:
        """Fill the typed arrays. Strings are coded through their sorted distinct values, and
        what a string spells (a number, a date) is worked out once per distinct string."""
        n = len(entries)
        self.num, self.date = np.full(n, np.nan), np.full(n, np.nan)
        self.flag, self.codes = np.full(n, -1, dtype=np.int8), np.full(n, -1, dtype=np.int64)
        kinds = set(map(type, entries))
        if kinds <= {str, int, float, type(None)}:  # JSON scalars: no per-entry views()
            at_str = [i for i, v in enumerate(entries) if type(v) is str] \
                if kinds != {str} else slice(None)
            at_num = [i for i, v in enumerate(entries) if type(v) in (int, float)] \
                if kinds & {int, float} else []
            other: list[int] = []
        else:
            at_str = [i for i, v in enumerate(entries) if isinstance(v, str)]
            at_num = [i for i, v in enumerate(entries) if type(v) in (int, float)]
            other = [i for i, v in enumerate(entries)
                     if v is not None and not isinstance(v, str) and type(v) not in (int, float)]
        strings = entries if isinstance(at_str, slice) else [entries[i] for i in at_str]
        self.vocab, codes = _code_strings(strings)
        if len(codes):
            self.codes[at_str] = codes
            spelled_as = _spelled_vocab(self.vocab)
            self.num[at_str] = spelled_as[codes, 0]
            self.date[at_str] = spelled_as[codes, 1]
        if at_num:
            nums = [entries[i] for i in at_num]
            try:
                self.num[at_num] = np.array(nums, dtype=np.float64)
            except OverflowError:  # an int beyond the float range
                self.num[at_num] = [views(v)[0] for v in nums]
        for i in other:  # bools, dates, numpy numbers, mappings
            self.num[i], self.date[i], _, self.flag[i] = views(entries[i])

    def to_rows(self, hit: np.ndarray) -> np.ndarray:
        """The rows with at least one entry in ``hit``."""
        if self.rows is None:
            return hit
        out = np.zeros(self.n, dtype=bool)
        out[self.rows[hit]] = True
        return out

    def equal(self, value: Value) -> np.ndarray:
        """The entries equal to ``value``."""
        kind, key = kind_of(value), key_of(value)
        if kind == STRING:
            i = bisect_left(self.vocab, key)
            found = i < len(self.vocab) and self.vocab[i] == key
            return self.codes == (i if found else -2)
        return (self.num, self.date, None, self.flag)[kind] == key

    def in_range(self, op: str, value: Value) -> np.ndarray:
        """The entries with ``entry op value``, ``op`` one of ``< <= > >=``."""
        kind, key = kind_of(value), key_of(value)  # not a bool: Compare refuses bool ranges
        if kind == STRING:
            cut = (bisect_left if op in ("<", ">=") else bisect_right)(self.vocab, key)
            return (self.codes >= 0) & (self.codes < cut) if op in ("<", "<=") \
                else self.codes >= cut
        return RANGE_OPS[op]((self.num, self.date)[kind], key)

    def prefix(self, prefix: str) -> np.ndarray:
        """The string entries that start with ``prefix`` (one run of the sorted strings)."""
        lo = bisect_left(self.vocab, prefix)
        hi = bisect_left(self.vocab, True, lo=lo, key=lambda s: not s.startswith(prefix))
        return (self.codes >= lo) & (self.codes < hi)


def _code_strings(strings: list[str]) -> tuple[list[str], np.ndarray]:
    """The sorted distinct strings and each string's index among them: by numpy's sort where
    its fixed-width strings hold them exactly (no trailing NUL, which they drop, and not too
    wide), else by a dict."""
    n = len(strings)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    if n and int(lengths.max()) * n * 4 <= WIDE_BYTES:
        arr = np.array(strings, dtype=str)
        if np.array_equal(np.strings.str_len(arr), lengths):
            vocab, codes = np.unique(arr, return_inverse=True)
            return vocab.tolist(), codes.astype(np.int64).reshape(-1)
    first: dict[str, int] = {}
    seen = np.fromiter((first.setdefault(s, len(first)) for s in strings), np.int64, count=n)
    distinct = list(first)
    order = sorted(range(len(distinct)), key=distinct.__getitem__)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return [distinct[i] for i in order], rank[seen]


def _spelled_vocab(vocab: list[str]) -> np.ndarray:
    """(number, date) rows of :func:`spelled` for sorted strings; only those that start like
    a number or a date can spell one, and in sorted order they are three runs."""
    out = np.full((len(vocab), 2), np.nan)
    for lo, hi in (("+", ","), ("-", "/"), ("0", ":")):
        for i in range(bisect_left(vocab, lo), bisect_left(vocab, hi)):
            out[i] = spelled(vocab[i])
    return out


class MetadataColumns:
    """Per-field columns over the records of an index's rows (metadata plus ``id`` and
    ``parent_id``, see :func:`~intentrank.filters.values.record_of`); a field's column is
    built on its first use, then kept."""

    def __init__(self, records: Sequence[Mapping[str, Any]]) -> None:
        self.records = records
        self._columns: dict[str, Column] = {}

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> MetadataColumns:
        return cls(records if isinstance(records, list | tuple) else list(records))

    def __len__(self) -> int:
        return len(self.records)

    def column(self, field: str) -> Column:
        """The column of ``field``."""
        col = self._columns.get(field)
        if col is None:
            values = [r.get(field) for r in self.records] if "." not in field \
                else [lookup(r, field) for r in self.records]
            col = self._columns[field] = Column(values)
        return col
