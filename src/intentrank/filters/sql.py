"""A filter as a parameterised SQL ``WHERE`` condition for PostgreSQL (psycopg 3).

Every value travels as a query parameter (``%s``), never inside the SQL text; identifiers
(columns) are quoted by :mod:`psycopg.sql`; metadata keys of a JSONB column are parameters
too (``metadata -> %s``). The condition means what :meth:`Filter.matches` means on the row's
record (docs/filters.md): a field's value is its JSONB value (a plain column's ``to_jsonb``),
compared element by element (a JSON array's items, else the value itself) with the value's
own kind: numbers with numbers and numeric strings (as ``numeric``), strings with strings
(code-point order, ``COLLATE "C"``), dates with ISO date strings (as ``timestamptz``; a date
without a zone is UTC: the session's ``TimeZone`` must be UTC), bools with bools; a missing
or null field matches no comparison, ``!=`` included. Every node is ``true`` or ``false``,
never SQL NULL, so ``NOT`` negates exactly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from intentrank.filters.tree import And, Compare, Filter, In, Not, Or, Prefix
from intentrank.filters.values import BOOL, DATE, NUMBER, STRING, kind_of

# POSIX forms of values.py's NUMBER_PATTERN and DATE_PATTERN (ASCII digits)
SQL_NUMBER = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
SQL_DATE = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
            r"(Z|[-+][0-9]{2}:?[0-9]{2})?)?$")
_RANGE = {"<": "<", "<=": "<=", ">": ">", ">=": ">="}


@dataclass(frozen=True)
class SqlFields:
    """Where a filter's fields live in a table: ``id`` (cast to text) and ``parent_id``
    columns, ``columns`` (filter field -> a plain column), and a JSONB ``metadata`` column
    holding every other field (None: the other fields are missing everywhere)."""

    id: str = "id"
    parent: str | None = None
    metadata: str | None = "metadata"
    columns: Mapping[str, str] = field(default_factory=dict)


def compile_filter(flt: Filter | str | None, fields: SqlFields, prefix: str = "f"
                   ) -> tuple[Any, dict[str, Any]]:
    """``flt`` as a :class:`psycopg.sql.Composed` condition and its parameters by name
    (named placeholders ``%(f0)s``, ``%(f1)s``, ...: ``prefix`` and a number; ``TRUE`` and
    no parameters for None)."""
    from psycopg import sql

    parsed = Filter.from_value(flt)
    if parsed is None:
        return sql.SQL("TRUE"), {}
    params: dict[str, Any] = {}
    return _Compiler(fields, params, prefix).node(parsed), params


class _Compiler:
    def __init__(self, fields: SqlFields, params: dict[str, Any], prefix: str) -> None:
        from psycopg import sql

        self.sql, self.fields, self.params, self.prefix = sql, fields, params, prefix

    def p(self, value: Any) -> Any:
        """A named placeholder for ``value`` (added to the parameters)."""
        name = f"{self.prefix}{len(self.params)}"
        self.params[name] = value
        return self.sql.Placeholder(name)

    def node(self, f: Filter) -> Any:
        s = self.sql
        if isinstance(f, And | Or):
            glue = s.SQL(" AND " if isinstance(f, And) else " OR ")
            return s.SQL("({})").format(glue.join(self.node(x) for x in f.parts))
        if isinstance(f, Not):
            return s.SQL("(NOT {})").format(self.node(f.part))
        if isinstance(f, In):
            if not f.values:
                return s.SQL("FALSE")
            return s.SQL("({})").format(s.SQL(" OR ").join(
                self.node(Compare(f.field, "=", v)) for v in f.values))
        if isinstance(f, Prefix):
            cond = s.SQL("jsonb_typeof(e.x) = 'string' AND starts_with(e.x #>> '{{}}', {})"
                         ).format(self.p(f.prefix))
            return s.SQL("COALESCE({}, FALSE)").format(self.exists(f.field, cond))
        if isinstance(f, Compare):
            cond = self.element(f.op if f.op != "!=" else "=", f.value)
            if f.op != "!=":
                return s.SQL("COALESCE({}, FALSE)").format(self.exists(f.field, cond))
            value = self.value(f.field)
            return s.SQL("COALESCE(({} IS NOT NULL AND jsonb_typeof({}) <> 'null' AND NOT {}),"
                         " FALSE)").format(value, self.value(f.field),
                                           self.exists(f.field, cond))
        raise TypeError(f"not a filter node: {f!r}")

    def value(self, name: str) -> Any:
        """The field's JSONB value (SQL NULL or JSON null when missing)."""
        s, fl = self.sql, self.fields
        if name == "id":
            return s.SQL("to_jsonb({}::text)").format(s.Identifier(fl.id))
        if name == "parent_id":
            return s.SQL("to_jsonb({})").format(s.Identifier(fl.parent)) if fl.parent \
                else s.SQL("NULL::jsonb")
        if name in fl.columns:
            return s.SQL("to_jsonb({})").format(s.Identifier(fl.columns[name]))
        if fl.metadata is None:
            return s.SQL("NULL::jsonb")
        col = s.Identifier(fl.metadata)
        if "." not in name:
            return s.SQL("({} -> {}::text)").format(col, self.p(name))
        # the record's own dotted key first, else the path through nested objects
        return s.SQL("(CASE WHEN {} ? {}::text THEN {} -> {}::text ELSE {} #> {}::text[] END)"
                     ).format(col, self.p(name), col, self.p(name), col,
                              self.p(name.split(".")))

    def exists(self, name: str, cond: Any) -> Any:
        """Whether an element of the field's value (a JSON array's items, else the value)
        meets ``cond`` (over ``e.x``)."""
        s = self.sql
        return s.SQL("EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof({v}) "
                     "= 'array' THEN {v2} ELSE jsonb_build_array({v3}) END) AS e(x) WHERE {c})"
                     ).format(v=self.value(name), v2=self.value(name), v3=self.value(name),
                              c=cond)

    def element(self, op: str, value: Any) -> Any:
        """``e.x op value`` for an element ``e.x`` of the value's kind."""
        s = self.sql
        sop = s.SQL("=" if op == "=" else _RANGE[op])
        text = s.SQL("(e.x #>> '{}')")
        kind = kind_of(value)
        if kind == BOOL:
            return s.SQL("(CASE WHEN jsonb_typeof(e.x) = 'boolean' THEN (e.x)::boolean END) = {}"
                         ).format(self.p(value))
        if kind == STRING:
            return s.SQL("jsonb_typeof(e.x) = 'string' AND {} COLLATE \"C\" {} {}").format(
                text, sop, self.p(value))
        if kind == NUMBER:
            return s.SQL(
                "(CASE WHEN jsonb_typeof(e.x) = 'number' THEN {t}::numeric "
                "WHEN jsonb_typeof(e.x) = 'string' AND {t} ~ {pat} AND "
                "pg_input_is_valid({t}, 'numeric') THEN {t}::numeric END) {op} {v}::numeric"
            ).format(t=text, pat=self.p(SQL_NUMBER), op=sop, v=self.p(value))
        assert kind == DATE
        return s.SQL(
            "(CASE WHEN jsonb_typeof(e.x) = 'string' AND {t} ~ {pat} AND "
            "pg_input_is_valid({t}, 'timestamptz') THEN {t}::timestamptz END) {op} "
            "{v}::timestamptz").format(t=text, pat=self.p(SQL_DATE), op=sop, v=self.p(value))
