"""Writing passages, metadata and vectors into a Postgres table (pgvector) that then is the
store: ``intentrank index SOURCE postgresql://...?table=NAME``. Updates are SQL upserts
(``INSERT ... ON CONFLICT (id) DO UPDATE``) and deletes, with no generations."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from intentrank.index.postgres import DISTANCES, PgIndex, PgTable, PostgresError, parse_uri
from intentrank.types import Document

OPCLASS = {"cosine": "vector_cosine_ops", "ip": "vector_ip_ops", "l2": "vector_l2_ops"}
assert set(OPCLASS) == set(DISTANCES)


def create_table(conninfo: str, table: PgTable, dim: int) -> None:
    """The ``vector`` extension and the table (if missing): ``id text`` primary key, text,
    title, metadata ``jsonb``, parent id, ``vector(dim)``, and a generated ``tsvector``
    (``table.fts``, in ``table.language``) with a GIN index."""
    import psycopg
    from psycopg import sql

    t = table
    cols = [sql.SQL("{} text PRIMARY KEY").format(sql.Identifier(t.id)),
            sql.SQL("{} text NOT NULL").format(sql.Identifier(t.text))]
    if t.title:
        cols.append(sql.SQL("{} text NOT NULL DEFAULT ''").format(sql.Identifier(t.title)))
    if t.metadata:
        cols.append(sql.SQL("{} jsonb NOT NULL DEFAULT '{{}}'").format(
            sql.Identifier(t.metadata)))
    if t.parent:
        cols.append(sql.SQL("{} text").format(sql.Identifier(t.parent)))
    if t.vector:
        cols.append(sql.SQL("{} vector({})").format(sql.Identifier(t.vector),
                                                    sql.Literal(int(dim))))
    if t.fts:
        title = sql.SQL("coalesce({}, '') || ' ' || ").format(
            sql.Identifier(t.title)) if t.title else sql.SQL("")
        cols.append(sql.SQL("{} tsvector GENERATED ALWAYS AS (to_tsvector({}::regconfig, "
                            "{}coalesce({}, ''))) STORED").format(
            sql.Identifier(t.fts), sql.Literal(t.language), title, sql.Identifier(t.text)))
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            if t.vector:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                t.ident, sql.SQL(", ").join(cols)))
            if t.fts:
                conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin ({})").format(
                    sql.Identifier(_index_name(t, "fts")), t.ident, sql.Identifier(t.fts)))
    except psycopg.Error as exc:
        raise PostgresError(f"creating postgres table {t.table}: {exc}") from exc


def create_hnsw(index: PgIndex, m: int = 16, ef_construction: int = 64) -> str:
    """An HNSW index on the vector column (pgvector; the opclass of the table's distance);
    its name."""
    from psycopg import sql

    t = index.table
    name = _index_name(t, "hnsw")
    index.timeout_ms, before = 0, index.timeout_ms  # building it may take a while
    try:
        index.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ({} {}) WITH "
                              "(m = {}, ef_construction = {})").format(
            sql.Identifier(name), t.ident, sql.Identifier(t.vector), sql.SQL(OPCLASS[t.distance]),
            sql.Literal(int(m)), sql.Literal(int(ef_construction))), what="creating the HNSW index")
    finally:
        index.timeout_ms = before
    return name


def drop_index(index: PgIndex, name: str) -> None:
    from psycopg import sql

    index.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)),
                  what=f"dropping index {name}")


def upsert(index: PgIndex, docs: Sequence[Document], vectors: np.ndarray | None) -> int:
    """Insert or replace ``docs`` (with their ``vectors``, row i for docs[i]) by id; how many
    rows were written."""
    import psycopg
    from psycopg import sql
    from psycopg.types.json import Jsonb

    from intentrank.index.postgres import vector_text

    t = index.table
    if t.vector and (vectors is None or len(vectors) != len(docs)):
        raise ValueError(f"{len(docs)} documents need as many vectors")
    cols: list[tuple[str, Callable[[int, Document], Any]]] = [
        (t.id, lambda i, d: d.id), (t.text, lambda i, d: d.text)]
    if t.title:
        cols.append((t.title, lambda i, d: d.title or ""))
    if t.metadata:
        cols.append((t.metadata, lambda i, d: Jsonb(_json_safe(d.metadata))))
    if t.parent:
        cols.append((t.parent, lambda i, d: d.parent_id))
    if t.vector:
        cols.append((t.vector, lambda i, d: vector_text(vectors[i])))  # type: ignore[index]
    names = [sql.Identifier(c) for c, _ in cols]
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}").format(
        t.ident, sql.SQL(", ").join(names), sql.SQL(", ").join(sql.Placeholder() * len(cols)),
        sql.Identifier(t.id), sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(n, n) for n in names[1:]))
    rows = [tuple(f(i, d) for _, f in cols) for i, d in enumerate(docs)]
    try:
        with index.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(query, rows)
    except psycopg.Error as exc:
        raise PostgresError(f"{index.path}: writing {len(docs)} documents failed: {exc}") from exc
    index.forget([d.id for d in docs])
    return len(rows)


def delete(index: PgIndex, ids: Iterable[str]) -> int:
    """Delete the rows of ``ids``; how many there were."""
    from psycopg import sql

    ids = list(ids)
    rows = index.execute(sql.SQL("DELETE FROM {} WHERE {}::text = ANY(%s) RETURNING 1").format(
        index.table.ident, sql.Identifier(index.table.id)), (ids,), f"deleting {len(ids)} rows")
    index.forget(ids)
    return len(rows)


def delete_where(index: PgIndex, flt: Any) -> int:
    """Delete every row the filter (text or Filter) lets through; how many there were."""
    from psycopg import sql

    from intentrank.filters import Filter
    from intentrank.filters.sql import compile_filter

    parsed = Filter.from_value(flt)
    if parsed is None:
        raise ValueError("delete_where needs a filter (it would delete every row)")
    where, params = compile_filter(parsed, index.table.sql_fields)
    rows = index.execute(sql.SQL("DELETE FROM {} WHERE {} RETURNING {}::text").format(
        index.table.ident, where, sql.Identifier(index.table.id)), params,
        f"deleting the rows of filter {str(parsed)!r}")
    index.forget([r[0] for r in rows])
    return len(rows)


def write_corpus(docs: Iterable[Document], uri: str, model: str = "minilm",
                 batch: int = 512, progress: bool = False, embedder: Any = None,
                 say: Callable[[str], None] = lambda m: None) -> PgIndex:
    """Every document of ``docs`` encoded (intentrank's dense leg's passages: title + text,
    through the embedding cache) and upserted into the table ``uri`` names (created with the
    extension if missing; a missing ``fts`` column name defaults to ``fts``); the table
    opened."""
    from dataclasses import replace

    from intentrank.index.build import embedding_cache_for
    from intentrank.index.legs import encode_passages
    from intentrank.index.settings import DenseSettings, IndexSettings

    conninfo, table, opts = parse_uri(uri)
    if table.fts is None and "fts=" not in uri:
        table = replace(table, fts="fts")
    model = opts.get("model", model)
    settings = IndexSettings(legs=("dense",), dense=DenseSettings(model=model))
    emb = embedder or settings.dense.load_embedder()
    cache = embedding_cache_for(say)
    create_table(conninfo, table, emb.dim)
    index = PgIndex(conninfo, table, emb, model=model)
    buf: list[Document] = []
    total = 0

    def flush() -> None:
        nonlocal total
        texts = [d.full_text(settings.dense.title_sep) for d in buf]
        vecs = encode_passages(texts, settings, progress, cache,
                               lambda ts: emb.encode_passages(ts, batch_size=64))[0] \
            if table.vector else None
        total += upsert(index, buf, vecs)
        say(f"{total} documents written to {table.table}")
        buf.clear()

    for d in docs:
        buf.append(d)
        if len(buf) >= batch:
            flush()
    if buf:
        flush()
    return index


def _index_name(t: PgTable, what: str) -> str:
    return f"{t.table.split('.')[-1]}_{t.vector if what == 'hnsw' else t.fts}_{what}"[:63]


def _json_safe(value: Any) -> Any:
    """Metadata as JSON (dates as ISO strings, other objects as text)."""
    return json.loads(json.dumps(value, default=lambda o: getattr(o, "isoformat", o.__str__)()))
