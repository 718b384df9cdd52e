"""Metadata as columns: every field over all rows of an index as typed numpy arrays, so a
filter over a million rows is a few array operations, not a Python loop per row."""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from intentrank.filters.values import STRING, Value, elements, key_of, kind_of, lookup, views

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
        self.present = np.fromiter((v is not None for v in values), dtype=bool, count=self.n)
        if any(isinstance(v, list | tuple) for v in values):
            per_row = [elements(v) for v in values]
            self.rows: np.ndarray | None = np.repeat(
                np.arange(self.n, dtype=np.int64), [len(e) for e in per_row])
            entries = [x for e in per_row for x in e]
        else:
            self.rows, entries = None, list(values)
        parts = [views(v) for v in entries]
        self.num = np.array([p[0] for p in parts], dtype=np.float64)
        self.date = np.array([p[1] for p in parts], dtype=np.float64)
        self.flag = np.array([p[3] for p in parts], dtype=np.int8)
        strings = [p[2] for p in parts]
        self.vocab = sorted({s for s in strings if s is not None})
        self.code = {s: i for i, s in enumerate(self.vocab)}
        self.codes = np.array([-1 if s is None else self.code[s] for s in strings],
                              dtype=np.int64)

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
            return self.codes == self.code.get(key, -2)
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
            col = self._columns[field] = Column([lookup(r, field) for r in self.records])
        return col
