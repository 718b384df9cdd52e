"""Metadata as columns: every field over all rows of an index as typed numpy arrays, so a
filter over a million rows is a few array operations, not a Python loop per row."""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, repeat
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

FEW_STRINGS = 4096  # distinct strings of a column up to which a dict codes them
WIDE_BYTES = 256 << 20  # the most a numpy copy of a column's strings may take
_TEXT, _NUM, _NONE, _OTHER = range(4)  # how Column._typed sorts entries, by exact type
_KINDS = {str: _TEXT, int: _NUM, float: _NUM, type(None): _NONE}
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
        """Fill the typed arrays in C-level passes: entries are sorted by type, strings coded
        through their sorted distinct values (what a string spells, a number or a date, is
        worked out once per distinct string), and only entries of other types (bools, dates,
        numpy numbers, ...) go through :func:`views` one by one."""
        n = len(entries)
        self.num, self.date = np.full(n, np.nan), np.full(n, np.nan)
        self.flag, self.codes = np.full(n, -1, dtype=np.int8), np.full(n, -1, dtype=np.int64)
        kind = np.fromiter(map(_KINDS.get, map(type, entries), repeat(_OTHER)), np.int8, n)
        others = np.flatnonzero(kind == _OTHER).tolist()
        for i in others:
            if isinstance(entries[i], str):  # a str subclass
                kind[i] = _TEXT
        is_str, is_num = kind == _TEXT, kind == _NUM
        self.vocab: list[str] = []
        if is_str.any():
            self.vocab, codes = _code_strings(list(compress(entries, is_str.tolist())))
            self.codes[is_str] = codes
            spelled_as = _spelled_vocab(self.vocab)
            self.num[is_str] = spelled_as[codes, 0]
            self.date[is_str] = spelled_as[codes, 1]
        if is_num.any():
            nums = list(compress(entries, is_num.tolist()))
            try:
                self.num[is_num] = np.array(nums, dtype=np.float64)
            except OverflowError:  # an int beyond the float range
                self.num[is_num] = [views(v)[0] for v in nums]
        for i in others:
            if kind[i] == _OTHER:
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
        return self.equal_any((value,))

    def equal_any(self, values: Sequence[Value]) -> np.ndarray:
        """The entries equal to one of ``values`` (one pass per kind of value given)."""
        keys: dict[int, list[Any]] = {}
        for v in values:
            keys.setdefault(kind_of(v), []).append(key_of(v))
        hit = np.zeros(len(self.codes), dtype=bool)
        for kind, wanted in keys.items():
            if kind == STRING:
                wanted = [i for i in map(self._code_of, wanted) if i >= 0]
            arr = (self.num, self.date, self.codes, self.flag)[kind]
            if len(wanted) == 1:
                hit |= arr == wanted[0]
            elif wanted:
                hit |= np.isin(arr, wanted)
        return hit

    def _code_of(self, text: str) -> int:
        i = bisect_left(self.vocab, text)
        return i if i < len(self.vocab) and self.vocab[i] == text else -1

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
    """The sorted distinct strings and each string's index among them, in C-level passes:
    a few distinct strings are sorted and looked up by a dict; many are sorted by numpy (where
    its fixed-width strings hold them exactly: not too wide, no trailing NUL, which they
    drop)."""
    distinct = set(strings)
    if len(distinct) > FEW_STRINGS:
        lengths = np.fromiter(map(len, strings), np.int64, count=len(strings))
        if int(lengths.max()) * len(strings) * 4 <= WIDE_BYTES:
            arr = np.array(strings, dtype=str)
            if np.array_equal(np.strings.str_len(arr), lengths):
                vocab, codes = np.unique(arr, return_inverse=True)
                return vocab.tolist(), codes.astype(np.int64).reshape(-1)
    vocab = sorted(distinct)
    index = {s: i for i, s in enumerate(vocab)}
    return vocab, np.fromiter(map(index.__getitem__, strings), np.int64, count=len(strings))


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
    ``parent_id``, see :meth:`~intentrank.types.Document.filter_record`); a field's column is
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
