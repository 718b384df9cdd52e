"""A PostgreSQL table of passages (pgvector + full-text search) as an index: :class:`PgIndex`.

A team that keeps its passages and embeddings in Postgres names its table and columns
(:class:`PgTable`); the ``pgvector`` and ``postgres_fts`` stages (``retrieve/postgres.py``)
search it there, with every filter (and a scoped key's forced filter) compiled to a
parameterised ``WHERE`` (``filters/sql.py``) that runs before ``ORDER BY ... LIMIT``
(pre-filtering). Passages read by later stages (the cross-encoder, answers) come from the
rows the search returned (kept in a bounded cache) or one ``SELECT`` by id.

A Postgres "index" is named by a URI, ``postgresql://user@host/db?table=passages&...``:
intentrank's own query parameters (:data:`TABLE_KEYS`: the table and its columns, the
distance, the query embedder) are taken out and the rest goes to libpq. Connections come
from a pool (psycopg_pool); every statement runs with ``statement_timeout`` and a timeout
names the query; the session's ``TimeZone`` is UTC (filters compare dates as UTC).
``pip install 'intentrank[postgres]'`` (psycopg 3, psycopg_pool). docs/postgres.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from intentrank.core.closing import Closing
from intentrank.errors import ConfigError, IntentrankError
from intentrank.filters import Filter
from intentrank.filters.sql import SqlFields, compile_filter
from intentrank.types import Document

SCHEMES = ("postgresql", "postgres")
TABLE_KEYS = ("table", "id", "text", "title", "vector", "metadata", "parent", "fts",
              "language", "distance", "model", "fields", "timeout_ms", "pool")
DISTANCES = {"cosine": ("<=>", "1 - "), "ip": ("<#>", "-"), "l2": ("<->", "-")}
ITERATIVE = ("off", "relaxed_order", "strict_order")
CACHE_DOCS = 50_000


class PostgresError(IntentrankError):
    """A Postgres table or server that cannot serve as asked (names the table, column or
    query)."""


def is_postgres_uri(value: Any) -> bool:
    """Whether ``value`` names a Postgres table (``postgresql://...`` or ``postgres://...``;
    also after :class:`pathlib.Path` folded its ``//``)."""
    text = str(value)
    return any(text.startswith(f"{s}:") for s in SCHEMES)


def vector_text(v: np.ndarray) -> str:
    """A float32 vector as pgvector's text form (each float32 exactly)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(v, dtype=np.float32)) + "]"


@dataclass(frozen=True)
class PgTable:
    """A table's name (``schema.table`` or ``table``) and columns: ``id`` (any type, read as
    text), ``text``, ``title`` (None: none), ``vector`` (pgvector ``vector(dim)``; None: no
    dense search), ``metadata`` (JSONB, None: none), ``parent`` (the parent document id, None:
    none), ``fts`` (a ``tsvector`` column; None: ``to_tsvector(language, title || ' ' ||
    text)`` computed per row), ``fields`` (filter field -> plain column), the text search
    ``language`` (a regconfig) and the vector ``distance`` (``cosine`` (``<=>``, score 1 -
    distance), ``ip`` (``<#>``, inner product) or ``l2`` (``<->``, minus the distance))."""

    table: str
    id: str = "id"
    text: str = "text"
    title: str | None = "title"
    vector: str | None = "embedding"
    metadata: str | None = "metadata"
    parent: str | None = None
    fts: str | None = None
    language: str = "english"
    distance: str = "cosine"
    fields: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.table or not isinstance(self.table, str):
            raise ConfigError("postgres: table must be a table name")
        if self.distance not in DISTANCES:
            raise ConfigError(f"postgres: distance {self.distance!r} is not one of "
                              f"{', '.join(DISTANCES)}")

    @property
    def ident(self) -> Any:
        from psycopg import sql

        return sql.Identifier(*self.table.split(".", 1))

    @property
    def sql_fields(self) -> SqlFields:
        return SqlFields(self.id, self.parent, self.metadata, dict(self.fields))

    def columns(self) -> list[str]:
        """The columns this table must have."""
        named = [self.id, self.text, self.title, self.vector, self.metadata, self.parent,
                 self.fts, *self.fields.values()]
        return list(dict.fromkeys(c for c in named if c))


def parse_uri(uri: str) -> tuple[str, PgTable, dict[str, str]]:
    """A Postgres URI as (libpq conninfo without intentrank's keys, the table, the other
    settings: ``model``, ``timeout_ms``, ``pool``). ``fields=a:col_a,b:col_b`` maps filter
    fields to plain columns; ``title=none`` (and so on) says a column does not exist."""
    if not is_postgres_uri(uri):
        raise ConfigError(f"not a Postgres URI (postgresql://...): {uri!r}")
    parts = urlsplit(uri)
    ours: dict[str, str] = {}
    rest = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        (ours.__setitem__(key, value) if key in TABLE_KEYS else rest.append((key, value)))
    if "table" not in ours:
        raise ConfigError(f"a Postgres index needs ?table=NAME in its URI ({_redact(uri)}); "
                          f"intentrank's keys: {', '.join(TABLE_KEYS)}")
    fields = {}
    for pair in filter(None, ours.pop("fields", "").split(",")):
        name, sep, col = pair.partition(":")
        if not sep or not name or not col:
            raise ConfigError(f"fields={pair!r}: expected field:column pairs")
        fields[name] = col
    columns = {k: (None if k in ("title", "vector", "metadata", "parent", "fts")
                   and v.lower() in ("", "none", "null") else v)
               for k, v in ours.items() if k in ("table", "id", "text", "title", "vector",
                                                  "metadata", "parent", "fts", "language",
                                                  "distance")}
    settings = {k: ours[k] for k in ("model", "timeout_ms", "pool") if k in ours}
    conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    return conninfo, PgTable(**columns, fields=fields), settings


def _redact(uri: str) -> str:
    """``uri`` without its password."""
    parts = urlsplit(uri)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return uri


class PgIndex(Closing):
    """The passages of a Postgres table, searched in Postgres (see the module). ``conninfo``:
    a libpq URI or DSN; ``embedder`` encodes queries (default: intentrank's dense leg's,
    ``model``); ``timeout_ms``: each statement's ``statement_timeout``; ``pool``: the most
    connections held."""

    generation = None  # no generations: writes are SQL upserts and deletes

    def __init__(self, conninfo: str, table: PgTable, embedder: Any = None,
                 model: str = "minilm", timeout_ms: int = 30_000, pool: int = 4,
                 check: bool = True) -> None:
        try:
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise IntentrankError("a Postgres index needs psycopg 3 and psycopg_pool: pip "
                                  "install 'intentrank[postgres]'") from exc
        self.conninfo, self.table = conninfo, table
        self.timeout_ms, self.model = int(timeout_ms), model
        self._embedder = embedder
        self.path = f"postgres table {table.table}"  # what messages call it
        self._pool = ConnectionPool(conninfo, min_size=1, max_size=int(pool), open=False,
                                    kwargs={"autocommit": True}, configure=_configure,
                                    name=f"intentrank:{table.table}")
        try:
            self._pool.open(wait=True, timeout=30)
        except Exception as exc:  # PoolTimeout: the server cannot be reached
            self._pool.close()
            raise PostgresError(f"cannot connect to Postgres for {self.path}: {exc}") from exc
        self._docs: OrderedDict[str, Document] = OrderedDict()
        self._lock = threading.Lock()
        self.dim: int | None = None
        if check:
            self.check()

    @classmethod
    def open(cls, uri: str, embedder: Any = None) -> PgIndex:
        """The table a URI names (:func:`parse_uri`)."""
        conninfo, table, opts = parse_uri(str(uri))
        return cls(conninfo, table, embedder, model=opts.get("model", "minilm"),
                   timeout_ms=int(opts.get("timeout_ms", 30_000)), pool=int(opts.get("pool", 4)))

    # -- connections -----------------------------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[Any]:
        with self._pool.connection() as conn:
            yield conn

    def execute(self, query: Any, params: Any = None, what: str = "query",
                settings: Mapping[str, str] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement in a transaction with ``settings`` (``set_config(..., true)``:
        this transaction only) and the statement timeout; its rows. A timeout or a server
        error is a :class:`PostgresError` naming ``what``."""
        import psycopg

        local = {"statement_timeout": str(self.timeout_ms), **(settings or {})}
        try:
            with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
                for key, value in local.items():
                    cur.execute("SELECT set_config(%s, %s, true)", (key, value))
                cur.execute(query, params)
                return cur.fetchall() if cur.description else []
        except psycopg.errors.QueryCanceled as exc:
            raise PostgresError(f"{self.path}: {what} ran past statement_timeout "
                                f"({self.timeout_ms} ms): {exc}".strip()) from exc
        except psycopg.Error as exc:
            raise PostgresError(f"{self.path}: {what} failed: {exc}".strip()) from exc

    def close(self) -> None:
        self._pool.close()

    @property
    def closed(self) -> bool:
        return bool(self._pool.closed)

    # -- schema ----------------------------------------------------------------------------
    def check(self) -> None:
        """Raise a :class:`PostgresError` naming what is missing: the table, a column, the
        ``vector`` extension, a vector column that is not a ``vector``."""
        t = self.table
        rows = self.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypmod "
            "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 "
            "AND NOT a.attisdropped", (_quoted_name(t.table),), "reading the table's columns")
        if not rows:
            raise PostgresError(f"{self.path}: no such table (or it has no columns) in "
                                f"{_redact(self.conninfo)}")
        types = {name: (typ, mod) for name, typ, mod in rows}
        if t.fts is None and types.get("fts", ("",))[0] == "tsvector":  # as the writer makes it
            self.table = t = replace(t, fts="fts")
        missing = [c for c in t.columns() if c not in types]
        if missing:
            raise PostgresError(f"{self.path}: no column {', '.join(map(repr, missing))} "
                                f"(columns: {', '.join(types)}); name them in the URI "
                                f"(?text=..., ?vector=none, ...) or the stage's parameters")
        if t.vector:
            ext = self.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'",
                               what="checking the vector extension")
            if not ext:
                raise PostgresError(f"{self.path}: the pgvector extension is not installed "
                                    f"in this database (CREATE EXTENSION vector)")
            typ, mod = types[t.vector]
            if not typ.startswith("vector"):
                raise PostgresError(f"{self.path}: column {t.vector!r} is {typ}, not a "
                                    f"pgvector vector")
            self.dim = int(mod) if mod and mod > 0 else None
        if t.metadata and types[t.metadata][0] != "jsonb":
            raise PostgresError(f"{self.path}: column {t.metadata!r} is "
                                f"{types[t.metadata][0]}, not jsonb")
        if t.fts and types[t.fts][0] != "tsvector":
            raise PostgresError(f"{self.path}: column {t.fts!r} is {types[t.fts][0]}, "
                                f"not tsvector")

    # -- what stages use ------------------------------------------------------------------
    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from intentrank.index.settings import DenseSettings

            self._embedder = DenseSettings(model=self.model).load_embedder()
        return self._embedder

    def has(self, leg: str) -> bool:
        return (leg == "dense" and self.table.vector is not None) or leg == "fts"

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode_queries(texts)

    def __len__(self) -> int:
        return self.count()

    def __bool__(self) -> bool:  # not a count query
        return True

    def count(self, flt: Filter | str | None = None) -> int:
        """How many rows ``flt`` lets through."""
        from psycopg import sql

        where, params = compile_filter(flt, self.table.sql_fields)
        return int(self.execute(sql.SQL("SELECT count(*) FROM {} WHERE {}").format(
            self.table.ident, where), params, "counting rows")[0][0])

    @cached_property
    def ids(self) -> list[str]:
        """Every id, in id order (read once; a whole-table read: avoid on big tables)."""
        return self.ids_where(None)

    def ids_where(self, flt: Filter | str | None) -> list[str]:
        """The ids of the rows ``flt`` lets through, in id order."""
        from psycopg import sql

        where, params = compile_filter(flt, self.table.sql_fields)
        col = sql.Identifier(self.table.id)
        return [r[0] for r in self.execute(sql.SQL("SELECT {}::text FROM {} WHERE {} ORDER BY "
                                                   "{}").format(col, self.table.ident, where,
                                                                col), params,
                                           what="reading the ids")]

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.ids)}

    @property
    def parent_of(self) -> dict[str, str]:
        return {}

    @property
    def doc_and_parent_ids(self) -> set[str]:
        return set(self.ids)

    def _select_doc(self) -> Any:
        """The columns a :class:`Document` is made of (id, text, title, parent, metadata,
        plain fields), in that order."""
        from psycopg import sql

        t = self.table
        cols = [sql.SQL("{}::text").format(sql.Identifier(t.id)), sql.Identifier(t.text)]
        for c in (t.title, t.parent, t.metadata):
            cols.append(sql.Identifier(c) if c else sql.SQL("NULL"))
        cols += [sql.Identifier(c) for c in t.fields.values()]
        return sql.SQL(", ").join(cols)

    def _document(self, row: tuple[Any, ...]) -> Document:
        doc_id, text, title, parent, meta, *plain = row
        metadata = dict(meta or {})
        metadata.update({f: _plain(v) for f, v in zip(self.table.fields, plain, strict=True)})
        doc = Document(id=doc_id, text=text or "", title=title or "",
                       parent_id=None if parent is None else str(parent), metadata=metadata)
        with self._lock:
            self._docs[doc_id] = doc
            self._docs.move_to_end(doc_id)
            while len(self._docs) > CACHE_DOCS:
                self._docs.popitem(last=False)
        return doc

    def doc(self, doc_id: str) -> Document:
        """One row as a Document (from the search's cache, else one SELECT)."""
        with self._lock:
            found = self._docs.get(doc_id)
        if found is not None:
            return found
        from psycopg import sql

        rows = self.execute(sql.SQL("SELECT {} FROM {} WHERE {}::text = %s").format(
            self._select_doc(), self.table.ident, sql.Identifier(self.table.id)),
            (doc_id,), f"reading document {doc_id!r}")
        if not rows:
            raise KeyError(f"unknown document id {doc_id!r} in {self.path}")
        return self._document(rows[0])

    def doc_text(self, doc_id: str) -> str:
        """Title and text as the dense leg encodes them."""
        return self.doc(doc_id).full_text(" ")

    def forget(self, ids: list[str]) -> None:
        """Drop what is cached of rows ``ids`` (after they were written or deleted)."""
        with self._lock:
            for d in ids:
                self._docs.pop(d, None)
            self.__dict__.pop("ids", None)
            self.__dict__.pop("row_of", None)

    def allows(self, doc_id: str, flt: Filter | str | None) -> bool:
        """Whether row ``doc_id`` exists and ``flt`` lets it through."""
        from psycopg import sql

        where, params = compile_filter(flt, self.table.sql_fields)
        return bool(self.execute(sql.SQL("SELECT 1 FROM {} WHERE {}::text = %(doc_id)s "
                                         "AND {}").format(self.table.ident,
                                                          sql.Identifier(self.table.id), where),
                                 {**params, "doc_id": doc_id},
                                 f"checking document {doc_id!r}"))

    # -- search ----------------------------------------------------------------------------
    def search_vector(self, texts: list[str], k: int, flt: Filter | str | None = None,
                      query_vectors: np.ndarray | None = None, exact: bool | None = None,
                      ef_search: int | None = None, iterative: str = "relaxed_order",
                      query_ids: list[str] | None = None) -> list[list[tuple[str, float]]]:
        """Each query's top ``k`` rows (id, score) by the table's distance among the rows
        ``flt`` lets through (pre-filter: the ``WHERE`` runs before ``ORDER BY ... LIMIT``).
        ``exact``: True turns index scans off (a scan of every matching row); False turns
        sequential scans off, so the table's HNSW or IVFFlat index is used (approximate);
        None leaves the choice to the planner (which scans a small table). An index search
        runs with ``hnsw.ef_search`` = ``ef_search`` and, when filtered, pgvector's
        ``iterative`` index scans (more of the graph is searched until ``k`` matching rows
        are found)."""
        from psycopg import sql

        t = self.table
        if t.vector is None:
            raise PostgresError(f"{self.path}: no vector column (vector=none)")
        if iterative not in ITERATIVE:
            raise ConfigError(f"iterative: {iterative!r} is not one of {', '.join(ITERATIVE)}")
        q = self.encode_queries(texts) if query_vectors is None else query_vectors
        if self.dim is not None and q.shape[1] != self.dim:
            raise PostgresError(f"{self.path}: the query embedder gives {q.shape[1]}-"
                                f"dimensional vectors; column {t.vector!r} holds {self.dim}")
        parsed = Filter.from_value(flt)
        where, params = compile_filter(parsed, t.sql_fields)
        op, to_score = DISTANCES[t.distance]
        vec = sql.Identifier(t.vector)
        dist = sql.SQL("({} {} %(q)s::vector)").format(vec, sql.SQL(op))
        # the top k by id and distance alone, then their passages: a passage's columns are
        # read (and detoasted) for k rows, not for every row the search scores
        query = sql.SQL(
            "SELECT {doc}, s._ir_score FROM (SELECT {id} AS _ir_id, {to_score}{dist} AS "
            "_ir_score FROM {tbl} WHERE {vec} IS NOT NULL AND {where} ORDER BY {dist} LIMIT "
            "%(k)s) s JOIN {tbl} AS _ir_d ON _ir_d.{id} = s._ir_id ORDER BY s._ir_score DESC, 1"
        ).format(doc=self._select_doc(), id=sql.Identifier(t.id), to_score=sql.SQL(to_score),
                 dist=dist, tbl=t.ident, vec=vec, where=where)
        settings = {} if exact is None else {"enable_indexscan" if exact else "enable_seqscan":
                                             "off"}
        if ef_search is not None:
            settings["hnsw.ef_search"] = str(int(ef_search))
        if parsed is not None and exact is not True:
            settings["hnsw.iterative_scan"] = iterative
        return [self._run(query, {**params, "q": vector_text(v), "k": int(k)},
                          f"pgvector search of query {_name(texts, query_ids, j)}", settings)
                for j, v in enumerate(q)]

    def search_fts(self, texts: list[str], k: int, flt: Filter | str | None = None,
                   match: str = "any", rank: str = "ts_rank", normalization: int = 0,
                   query_ids: list[str] | None = None) -> list[list[tuple[str, float]]]:
        """Each query's top ``k`` rows (id, ``rank`` score) by Postgres full-text search
        among the rows ``flt`` lets through. ``match``: ``any`` (a row with any of the
        query's words: its ``plainto_tsquery`` with OR), ``all`` (``plainto_tsquery``) or
        ``websearch`` (``websearch_to_tsquery``: quotes, ``or``, ``-``)."""
        from psycopg import sql

        t = self.table
        if match not in ("any", "all", "websearch"):
            raise ConfigError(f"match: {match!r} is not one of any, all, websearch")
        if rank not in ("ts_rank", "ts_rank_cd"):
            raise ConfigError(f"rank: {rank!r} is not one of ts_rank, ts_rank_cd")
        where, params = compile_filter(flt, t.sql_fields)
        if t.fts:
            tsv = sql.Identifier(t.fts)
        else:
            title = sql.SQL("coalesce({}, '') || ' ' || ").format(
                sql.Identifier(t.title)) if t.title else sql.SQL("")
            tsv = sql.SQL("to_tsvector(%(lang)s::regconfig, {}coalesce({}, ''))").format(
                title, sql.Identifier(t.text))
        tsq = {"any": "replace(plainto_tsquery(%(lang)s::regconfig, %(text)s)::text, ' & ', "
                      "' | ')::tsquery",
               "all": "plainto_tsquery(%(lang)s::regconfig, %(text)s)",
               "websearch": "websearch_to_tsquery(%(lang)s::regconfig, %(text)s)"}[match]
        query = sql.SQL(
            "SELECT {doc}, s._ir_score FROM (SELECT {id} AS _ir_id, {rank}({tsv}, _ir_q._ir_q, "
            "%(norm)s) AS _ir_score FROM {tbl}, (SELECT {tsq} AS _ir_q) _ir_q WHERE {tsv} @@ "
            "_ir_q._ir_q AND {where} ORDER BY _ir_score DESC, {id}::text LIMIT %(k)s) s JOIN "
            "{tbl} AS _ir_d ON _ir_d.{id} = s._ir_id ORDER BY s._ir_score DESC, 1"
        ).format(doc=self._select_doc(), id=sql.Identifier(t.id), rank=sql.Identifier(rank),
                 tsv=tsv, tbl=t.ident, tsq=sql.SQL(tsq), where=where)
        return [self._run(query, {**params, "text": text, "lang": t.language, "k": int(k),
                                  "norm": int(normalization)},
                          f"full-text search of query {_name(texts, query_ids, j)}")
                for j, text in enumerate(texts)]

    def _run(self, query: Any, params: dict[str, Any], what: str,
             settings: Mapping[str, str] | None = None) -> list[tuple[str, float]]:
        rows = self.execute(query, params, what, settings)
        return [(self._document(r[:-1]).id, float(r[-1])) for r in rows]


def _configure(conn: Any) -> None:
    """Each pooled connection: UTC (filters compare dates as UTC), named in pg_stat_activity."""
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("SET application_name = 'intentrank'")


def _quoted_name(table: str) -> str:
    """``schema.table`` or ``table`` as to_regclass reads it (each part quoted)."""
    return ".".join('"' + p.replace('"', '""') + '"' for p in table.split(".", 1))


def _name(texts: list[str], ids: list[str] | None, j: int) -> str:
    """A query as an error names it: its id, else its first words."""
    if ids is not None:
        return repr(ids[j])
    text = texts[j] if j < len(texts) else ""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _plain(value: Any) -> Any:
    """A plain column's value as Document metadata (dates as ISO strings)."""
    iso = getattr(value, "isoformat", None)
    return iso() if iso is not None else value


