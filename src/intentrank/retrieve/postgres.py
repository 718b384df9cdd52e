"""First stages over a Postgres table: ``pgvector`` (vector search) and ``postgres_fts``
(full-text search), searched in Postgres (``index/postgres.py``, docs/postgres.md).

The table is the stage's ``index:`` (a ``postgresql://...?table=...`` URI: the stage opens
it, one connection pool per URI in this process) or, without one, the pipeline's index when
that is a Postgres table (``--index postgresql://...``, ``serve --index name=postgresql://...``).
A stage's own ``filter`` is ANDed with each query's ``Query.filter`` (a scoped key's forced
filter travels there too) and compiled into the ``WHERE`` of the search: the top ``depth``
among the matching rows. Queries are grouped by filter, as the index retrievers do."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from intentrank.core.params import ParameterError, check_int, check_optional_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.filters import Filter
from intentrank.index.postgres import PgIndex, is_postgres_uri
from intentrank.retrieve.retrievers import FilteredRetriever

_OPEN: dict[str, PgIndex] = {}  # URI -> the table opened once per process (its pool)
_OPEN_LOCK = threading.Lock()


def open_table(uri: str) -> PgIndex:
    """The Postgres table ``uri`` names, opened once per process (shared pool)."""
    with _OPEN_LOCK:
        found = _OPEN.get(uri)
        if found is None or found.closed:
            found = _OPEN[uri] = PgIndex.open(uri)
        return found


def _table(ctx: BuildContext, stage: str, params: dict[str, Any]) -> Any:
    """The stage's table: its ``index:`` URI (or a PgIndex), else the pipeline's index."""
    given = params.pop("index", None)
    if given is None:
        idx = ctx.require_index(stage)
        if not hasattr(idx, "search_vector"):
            raise ParameterError(f"stage {stage!r} needs a Postgres table: index: "
                                 f"postgresql://...?table=NAME, or a Postgres index as the "
                                 f"pipeline's (--index postgresql://...)")
        return idx
    if isinstance(given, str):
        if not is_postgres_uri(given):
            raise ParameterError(f"stage {stage!r}: index: expected a postgresql:// URI, "
                                 f"got {given!r}")
        return open_table(given)
    return given


class PostgresRetriever(FilteredRetriever):
    """Base of the two stages: the top ``depth`` rows of each query among those its filter
    (``filter`` AND the query's) lets through, the filter compiled into the search's
    ``WHERE`` (:meth:`search_table`)."""

    def search_table(self, texts: list[str], flt: Filter | None, ids: list[str]
               ) -> list[list[tuple[str, float]]]:
        raise NotImplementedError

    def search_group(self, texts: list[str], filter: Filter | None,  # noqa: A002
                     query_ids: list[str]) -> list[tuple[Sequence[str], Sequence[float]]]:
        return [([d for d, _ in hits], [s for _, s in hits])
                for hits in self.search_table(texts, filter, query_ids)]


class PgVectorRetriever(PostgresRetriever):
    """pgvector search: ``exact: true`` scans every matching row; ``exact: false`` searches
    the table's HNSW or IVFFlat index (``ef_search``; ``iterative`` index scans when
    filtered); unset, the planner chooses (a small table is scanned)."""

    stage = "pgvector"

    def __init__(self, index: Any, depth: int = 100, filter: Filter | str | None = None,  # noqa: A002
                 exact: bool | None = None, ef_search: int | None = None,
                 iterative: str = "relaxed_order") -> None:
        super().__init__(index, depth, filter)
        if exact is not None and not isinstance(exact, bool):
            raise ParameterError(f"exact must be true or false, got {exact!r}")
        self.exact, self.ef_search = exact, check_optional_int("ef_search", ef_search)
        self.iterative = iterative

    def search_table(self, texts: list[str], flt: Filter | None, ids: list[str]
               ) -> list[list[tuple[str, float]]]:
        return self.index.search_vector(texts, self.depth, flt, exact=self.exact,
                                        ef_search=self.ef_search, iterative=self.iterative,
                                        query_ids=ids)

    def describe(self) -> str:
        return self.described(table=self.index.table.table, depth=self.depth,
                              exact=self.exact, ef_search=self.ef_search,
                              filter=None if self.filter is None else repr(str(self.filter)))


class PgFtsRetriever(PostgresRetriever):
    """Postgres full-text search (``match``: any, all or websearch; ``rank``: ts_rank or
    ts_rank_cd with ``normalization``)."""

    stage = "postgres_fts"

    def __init__(self, index: Any, depth: int = 100, filter: Filter | str | None = None,  # noqa: A002
                 match: str = "any", rank: str = "ts_rank", normalization: int = 0) -> None:
        super().__init__(index, depth, filter)
        self.match, self.rank = match, rank
        self.normalization = check_int("normalization", normalization, minimum=0)

    def search_table(self, texts: list[str], flt: Filter | None, ids: list[str]
               ) -> list[list[tuple[str, float]]]:
        return self.index.search_fts(texts, self.depth, flt, match=self.match, rank=self.rank,
                                     normalization=self.normalization, query_ids=ids)

    def describe(self) -> str:
        return self.described(table=self.index.table.table, depth=self.depth,
                              match=self.match, rank=self.rank,
                              filter=None if self.filter is None else repr(str(self.filter)))


@register_stage("pgvector")
def _pgvector(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    return PgVectorRetriever(_table(ctx, "pgvector", params), **params)


@register_stage("postgres_fts")
def _fts(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    return PgFtsRetriever(_table(ctx, "postgres_fts", params), **params)
