"""The filter syntax tree (frozen dataclasses), its evaluation on one record and on columns,
and the grammar that parses filter text into it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from intentrank.errors import FilterError
from intentrank.filters.columns import RANGE_OPS, Column, MetadataColumns
from intentrank.filters.values import (
    BOOL,
    DATE_PATTERN,
    KEYWORDS,
    NAME_PATTERN,
    NUMBER_PATTERN,
    Value,
    check_value,
    elements,
    format_field,
    format_value,
    key_of,
    kind_of,
    lookup,
    parse_date,
    usable,
    views,
)

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
MAX_DEPTH = 100


class Filter:
    """A metadata filter: combine with ``&``, ``|``, ``~``; ``str()`` gives text that
    :func:`parse_filter` turns back into an equal filter."""

    precedence: ClassVar[int] = 3  # OR 1, AND 2, NOT and comparisons 3

    def matches(self, record: Mapping[str, Any]) -> bool:
        """Whether one record (metadata plus ``id`` and ``parent_id``) passes."""
        raise NotImplementedError

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        """Which rows of ``columns`` pass, as a bool array (equal to :meth:`matches` of
        each row's record)."""
        raise NotImplementedError

    def fields(self) -> frozenset[str]:
        """The fields the filter reads."""
        raise NotImplementedError

    def __and__(self, other: Filter) -> Filter:
        return And((self, other))

    def __or__(self, other: Filter) -> Filter:
        return Or((self, other))

    def __invert__(self) -> Filter:
        return Not(self)

    @staticmethod
    def from_value(value: str | Filter | None, where: str = "filter") -> Filter | None:
        """A filter from its text, a filter, or None (no filter)."""
        if value is None or isinstance(value, Filter):
            return value
        if isinstance(value, str):
            return parse_filter(value)
        raise FilterError(f"{where} must be filter text or a Filter, got {value!r}")

    def _wrapped(self, outer: int) -> str:
        return f"({self})" if self.precedence < outer else str(self)


@dataclass(frozen=True)
class _OnField(Filter):
    """A test of one field's elements (:class:`Compare`, :class:`In`, :class:`Prefix`): the
    field is checked, and :meth:`mask` hands the field's column to :meth:`rows`."""

    field: str

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise FilterError(f"a filter field must be a non-empty string, got {self.field!r}")

    def fields(self) -> frozenset[str]:
        return frozenset({self.field})

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        return self.rows(columns.column(self.field))

    def rows(self, col: Column) -> np.ndarray:
        """Which rows pass, given the field's column."""
        raise NotImplementedError


@dataclass(frozen=True)
class Compare(_OnField):
    """``field op value``, ``op`` one of ``= != < <= > >=``."""

    op: str
    value: Value

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.op not in COMPARISONS:
            raise FilterError(f"unknown comparison {self.op!r}; known: {' '.join(COMPARISONS)}")
        value = check_value(self.value, f"{format_field(self.field)} {self.op}")
        if kind_of(value) == BOOL and self.op not in ("=", "!="):
            raise FilterError(f"{format_field(self.field)} {self.op} {format_value(value)}: "
                              f"a bool compares only with = and !=")
        object.__setattr__(self, "value", value)

    def matches(self, record: Mapping[str, Any]) -> bool:
        value = lookup(record, self.field)
        if value is None:
            return False
        kind, key = kind_of(self.value), key_of(self.value)
        got = [v for v in (views(x)[kind] for x in elements(value)) if usable(v, kind)]
        if self.op == "=":
            return key in got
        if self.op == "!=":
            return key not in got
        return any(RANGE_OPS[self.op](g, key) for g in got)

    def rows(self, col: Column) -> np.ndarray:
        if self.op in ("=", "!="):
            hit = col.to_rows(col.equal(self.value))
            return hit if self.op == "=" else col.present & ~hit
        return col.to_rows(col.in_range(self.op, self.value))

    def __str__(self) -> str:
        return f"{format_field(self.field)} {self.op} {format_value(self.value)}"


@dataclass(frozen=True)
class In(_OnField):
    """``field IN (v1, v2, ...)``: an element equals one of the values."""

    values: tuple[Value, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.values, str | bytes) or not isinstance(self.values, Iterable):
            raise FilterError(f"{format_field(self.field)} IN: the values must be a list, "
                              f"got {self.values!r}")
        where = f"{format_field(self.field)} IN"
        object.__setattr__(self, "values", tuple(check_value(v, where) for v in self.values))

    def matches(self, record: Mapping[str, Any]) -> bool:
        return any(Compare(self.field, "=", v).matches(record) for v in self.values)

    def rows(self, col: Column) -> np.ndarray:
        return col.to_rows(col.equal_any(self.values))

    def __str__(self) -> str:
        return f"{format_field(self.field)} IN ({', '.join(map(format_value, self.values))})"


@dataclass(frozen=True)
class Prefix(_OnField):
    """``field PREFIX "text"``: a string element starts with ``prefix``."""

    prefix: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.prefix, str):
            raise FilterError(f"{format_field(self.field)} PREFIX: the prefix must be a "
                              f"string, got {self.prefix!r}")

    def matches(self, record: Mapping[str, Any]) -> bool:
        return any(isinstance(x, str) and x.startswith(self.prefix)
                   for x in elements(lookup(record, self.field)))

    def rows(self, col: Column) -> np.ndarray:
        return col.to_rows(col.prefix(self.prefix))

    def __str__(self) -> str:
        return f"{format_field(self.field)} PREFIX {format_value(self.prefix)}"


@dataclass(frozen=True)
class _Junction(Filter):
    """Two or more parts joined by one word: :class:`And` and :class:`Or`. ``a AND (b AND
    c)`` is flattened to ``a AND b AND c``: one tree per text, so text round-trips."""

    parts: tuple[Filter, ...]
    word: ClassVar[str]
    test: ClassVar[Callable[[Iterable[object]], bool]]
    ufunc: ClassVar[np.ufunc]

    def __init_subclass__(cls, *, word: str, precedence: int,
                          test: Callable[[Iterable[object]], bool], ufunc: np.ufunc) -> None:
        super().__init_subclass__()
        cls.word, cls.precedence, cls.ufunc = word, precedence, ufunc
        cls.test = staticmethod(test)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        name, parts = type(self).__name__, self.parts
        if isinstance(parts, Filter) or not isinstance(parts, Iterable):
            raise FilterError(f"{name} takes a list of filters, got {parts!r}")
        parts = tuple(parts)
        if len(parts) < 2 or not all(isinstance(p, Filter) for p in parts):
            raise FilterError(f"{name} needs two or more filters, got {parts!r}")
        flat: list[Filter] = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, type(self)) else (p,))
        object.__setattr__(self, "parts", tuple(flat))

    def fields(self) -> frozenset[str]:
        return frozenset().union(*(p.fields() for p in self.parts))

    def matches(self, record: Mapping[str, Any]) -> bool:
        return self.test(p.matches(record) for p in self.parts)

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        return self.ufunc.reduce([p.mask(columns) for p in self.parts])

    def __str__(self) -> str:
        return f" {self.word} ".join(p._wrapped(self.precedence + 1) for p in self.parts)


class And(_Junction, word="AND", precedence=2, test=all, ufunc=np.logical_and):
    """Every part matches."""


class Or(_Junction, word="OR", precedence=1, test=any, ufunc=np.logical_or):
    """At least one part matches."""


@dataclass(frozen=True)
class Not(Filter):
    """The part does not match (a record without the field passes ``NOT field = v``)."""

    part: Filter

    def __post_init__(self) -> None:
        if not isinstance(self.part, Filter):
            raise FilterError(f"Not takes a filter, got {self.part!r}")

    def fields(self) -> frozenset[str]:
        return self.part.fields()

    def matches(self, record: Mapping[str, Any]) -> bool:
        return not self.part.matches(record)

    def mask(self, columns: MetadataColumns) -> np.ndarray:
        return ~self.part.mask(columns)

    def __str__(self) -> str:
        return f"NOT {self.part._wrapped(3)}"


def and_filters(*filters: Filter | str | None) -> Filter | None:
    """All the given filters at once (None ones ignored; None when none is left): how a
    forced filter narrows a user's."""
    parts = [f for f in map(Filter.from_value, filters) if f is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(tuple(parts))


# --- the grammar --------------------------------------------------------------------------

_TOKEN = re.compile(rf"""(?P<ws>\s+)|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<date>{DATE_PATTERN})(?![\w.:-])|(?P<num>{NUMBER_PATTERN})(?![\w.])
    |(?P<name>{NAME_PATTERN})|(?P<quoted>`(?:[^`\\]|\\.)*`)
    |(?P<op><=|>=|!=|=|<|>)|(?P<punct>[(),])""", re.VERBOSE | re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True)
class _Token:
    kind: str  # str date num name quoted op punct end
    text: str
    pos: int  # 0-based offset into the filter text

    def word(self) -> str:
        """The keyword this token is (lower case), or ''."""
        return self.text.lower() if self.kind == "name" and self.text.lower() in KEYWORDS \
            else ""


def _tokens(text: str) -> list[_Token]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterError(f"bad filter at position {pos + 1}: unexpected "
                              f"{text[pos:pos + 10]!r} in {text!r}")
        if m.lastgroup != "ws":
            out.append(_Token(m.lastgroup or "", m.group(), pos))
        pos = m.end()
    return [*out, _Token("end", "", len(text))]


class _Parser:
    """Recursive descent: or := and (OR and)*; and := not (AND not)*; not := NOT not | atom;
    atom := ( or ) | field op value | field [NOT] IN (values) | field [NOT] PREFIX string."""

    def __init__(self, text: str) -> None:
        self.text, self.tokens, self.i, self.depth = text, _tokens(text), 0, 0

    def fail(self, message: str, tok: _Token | None = None) -> FilterError:
        tok = tok or self.tokens[self.i]
        near = "the end" if tok.kind == "end" else repr(tok.text)
        return FilterError(f"bad filter at position {tok.pos + 1} ({near}): {message}; "
                           f"in {self.text!r}")

    def take(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def peek_word(self) -> str:
        return self.tokens[self.i].word()

    def parse(self) -> Filter:
        if self.tokens[0].kind == "end":
            raise FilterError("bad filter: it is empty")
        out = self.or_()
        if self.tokens[self.i].kind != "end":
            raise self.fail("expected AND, OR or the end")
        return out

    def or_(self) -> Filter:
        return self.joined("or", self.and_, Or)

    def and_(self) -> Filter:
        return self.joined("and", self.not_, And)

    def joined(self, word: str, part: Callable[[], Filter],
               junction: type[_Junction]) -> Filter:
        """One ``part``, or two or more joined by ``word`` as one ``junction``."""
        parts = [part()]
        while self.peek_word() == word:
            self.take()
            parts.append(part())
        return parts[0] if len(parts) == 1 else junction(tuple(parts))

    def not_(self) -> Filter:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}")
        if self.peek_word() == "not":
            self.take()
            out: Filter = Not(self.not_())
        else:
            out = self.atom()
        self.depth -= 1
        return out

    def atom(self) -> Filter:
        tok = self.take()
        if tok.text == "(":
            out = self.or_()
            if self.take().text != ")":
                raise self.fail("expected ')'", self.tokens[self.i - 1])
            return out
        if tok.kind == "quoted":
            field = _UNESCAPE.sub(r"\1", tok.text[1:-1])
        elif tok.kind == "name" and not tok.word():
            field = tok.text
        else:
            raise self.fail("expected a field name, NOT or '('", tok)
        negate = self.peek_word() == "not"
        if negate:
            self.take()
        out = self.condition(field, negate)
        return Not(out) if negate else out

    def condition(self, field: str, negated: bool) -> Filter:
        tok = self.take()
        if tok.kind == "op" and not negated:
            return Compare(field, tok.text, self.value())
        if tok.word() == "in":
            return In(field, self.values())
        if tok.word() == "prefix":
            arg = self.take()
            if arg.kind != "str":
                raise self.fail("PREFIX takes a quoted string", arg)
            return Prefix(field, _UNESCAPE.sub(r"\1", arg.text[1:-1]))
        expected = "IN or PREFIX" if negated else "a comparison (= != < <= > >=), IN or PREFIX"
        raise self.fail(f"expected {expected} after the field {format_field(field)}", tok)

    def values(self) -> tuple[Value, ...]:
        if self.take().text != "(":
            raise self.fail("IN takes a list in parentheses: IN (1, 2)", self.tokens[self.i - 1])
        out: list[Value] = []
        if self.tokens[self.i].text == ")":
            self.take()
            return ()
        while True:
            out.append(self.value())
            sep = self.take()
            if sep.text == ")":
                return tuple(out)
            if sep.text != ",":
                raise self.fail("expected ',' or ')' in the IN list", sep)

    def value(self) -> Value:
        tok = self.take()
        if tok.kind == "str":
            return check_value(_UNESCAPE.sub(r"\1", tok.text[1:-1]), "value")
        if tok.kind == "date":
            dt = parse_date(tok.text)
            if dt is None:
                raise self.fail("not a valid date", tok)
            return dt
        if tok.kind == "num":
            is_float = any(c in tok.text for c in ".eE")
            return float(tok.text) if is_float else int(tok.text)
        if tok.word() in ("true", "false"):
            return tok.word() == "true"
        if tok.kind == "name" and not tok.word():
            raise self.fail(f'expected a value; quote strings: "{tok.text}"', tok)
        raise self.fail("expected a value (a quoted string, a number, a date, true or false)",
                        tok)


def parse_filter(text: str) -> Filter:
    """The filter that ``text`` spells; :class:`~intentrank.errors.FilterError` names the
    position and the token where it is malformed."""
    if not isinstance(text, str):
        raise FilterError(f"filter text must be a string, got {text!r}")
    return _Parser(text).parse()
