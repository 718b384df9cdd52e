"""``intentrank add``, ``delete`` and ``sync``: change an index in place, without a rebuild
(:mod:`intentrank.index.update`)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from intentrank.cli.common import app, cli_errors, console, corpus, log, settings_of
from intentrank.cli.ingest import (
    folder_options,
    is_document_folder,
    options_record,
    print_skipped,
    read_documents,
    recorded_options,
)
from intentrank.cli.options import CorpusArg, panel
from intentrank.errors import ConfigError

IndexArg = Annotated[Path, typer.Argument(help="Index directory (built by `intentrank index`).")]
TableOrIndexArg = Annotated[str, typer.Argument(help="Index directory (built by `intentrank "
                                                "index`), or a Postgres table: "
                                                "postgresql://...?table=NAME (docs/postgres.md).")]
EncodingOption = Annotated[str, typer.Option(help="Text encoding of the corpus file.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print what changed as JSON.")]
FolderPanel = panel("A folder of documents (each option not given: as the index "
                    "recorded it when `intentrank index` or the last `sync` read its folder)")
IncludeOption = Annotated[list[str] | None, FolderPanel(help="Glob of the files to read "
                                                        "(repeatable).")]
ExcludeOption = Annotated[list[str] | None, FolderPanel(help="Glob of files or folders to "
                                                        "leave out (repeatable).")]
ChunkTokensOption = Annotated[int, FolderPanel(help="Passages of at most this many MiniLM "
                                               "tokens (0 = as recorded, else the "
                                               "default).")]
OverlapOption = Annotated[int | None, FolderPanel(help="Tokens shared by consecutive "
                                                  "passages (as recorded, else 32).")]
StrictOption = Annotated[bool, FolderPanel("--strict", help="Fail on the first file that "
                                           "cannot be read.")]


class Source:
    """The documents of a corpus file, a BEIR directory or a folder of documents (then
    also the files it skipped). A folder is read with the options given, each one not
    given as the index recorded it (:func:`~intentrank.cli.ingest.recorded_options`)."""

    def __init__(self, ctx: typer.Context, index_dir: Path, source: Path, encoding: str,
                 include: list[str] | None, exclude: list[str] | None, chunk_tokens: int,
                 overlap: int | None, strict: bool) -> None:
        self.folder, self.options = None, None
        if is_document_folder(source):
            given = folder_options(include, exclude, chunk_tokens, overlap)
            self.options = given.over(recorded_options(index_dir))
            read_as = self.options if source.is_dir() else self.options.chunking_only()
            self.folder = read_documents(source, read_as, strict or settings_of(ctx).strict)
            self.docs = list(self.folder.documents)
        else:
            if include or exclude or chunk_tokens:
                raise ConfigError(f"--include, --exclude and --chunk-tokens are for a folder "
                                  f"of documents; {source} is a corpus")
            self.docs = list(corpus(source, encoding))

    @property
    def skipped_units(self) -> set[str]:
        """Files that could not be read: their passages already in the index stay."""
        return {s.path for s in self.folder.skipped} if self.folder is not None else set()

    def done(self) -> None:
        if self.folder is not None:
            print_skipped(self.folder)


def _report(stats: object, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(stats.to_dict(), indent=1))  # type: ignore[attr-defined]
    else:
        console.print(f"[green]updated[/] {stats.summary()}")  # type: ignore[attr-defined]


def source_command(write: Callable[[str, Path, Source], object], *, tables: bool = False
                   ) -> Callable[..., None]:
    """Register ``write`` as the command of its name with the options of a source read into
    an index (``add`` and ``sync``; with ``tables``, a Postgres table too): the command
    reads the source as :class:`Source` does, ``write(index_dir, source, documents)``
    changes the index and returns its stats, which are printed (None: it printed its own);
    ``--help`` is ``write``'s docstring."""

    @app.command(write.__name__, help=inspect.getdoc(write))
    @cli_errors
    def command(ctx: typer.Context, index_dir: TableOrIndexArg, source: CorpusArg,
                encoding: EncodingOption = "utf-8", include: IncludeOption = None,
                exclude: ExcludeOption = None, chunk_tokens: ChunkTokensOption = 0,
                chunk_overlap: OverlapOption = None, strict: StrictOption = False,
                as_json: JsonOption = False) -> None:
        from intentrank.index.postgres import is_postgres_uri

        table = is_postgres_uri(index_dir)
        if table and not tables:
            raise ConfigError(f"`intentrank {write.__name__}` needs an index directory; a "
                              f"Postgres table takes `intentrank add` and `delete`")
        src = Source(ctx, Path("." if table else index_dir), source, encoding, include,
                     exclude, chunk_tokens, chunk_overlap, strict)
        stats = write(index_dir, source, src)
        src.done()
        if stats is not None:
            _report(stats, as_json)

    return command


@partial(source_command, tables=True)
def add(index_dir: str, source: Path, src: Source) -> object:
    """Add or update documents (an upsert) from a corpus file, a BEIR directory, a folder of
    documents or one document file: new ids are added, changed ones replaced in place (a
    file's passages together), unchanged ones skipped; only new and changed passages are
    encoded."""
    from intentrank.index.postgres import is_postgres_uri
    from intentrank.index.update import upsert

    if is_postgres_uri(index_dir):  # SQL upserts (INSERT ... ON CONFLICT), no generations
        from intentrank.index.postgres_write import write_corpus

        with write_corpus(src.docs, index_dir, progress=True, say=log) as table:
            console.print(f"[green]updated[/] {len(src.docs)} documents upserted into "
                          f"{table.table.table} ({len(table)} rows)")
        return None
    return upsert(Path(index_dir), src.docs, log=log, progress=True)


@app.command()
@cli_errors
def delete(
    index_dir: TableOrIndexArg,
    ids: Annotated[list[str] | None, typer.Argument(help="Document ids (a parent id deletes "
                                                    "all its passages).")] = None,
    filter: Annotated[str | None, typer.Option("--filter", help="Also delete every passage "
                                               "this metadata filter matches (docs/filters.md"
                                               ").")] = None,
    missing_ok: Annotated[bool, typer.Option(help="Ignore ids the index does not hold.")] =
        False,
    as_json: JsonOption = False,
) -> None:
    """Delete documents by id and/or by filter. The rows are tombstoned (the index's files
    are kept, the rows marked gone) until more than a fifth of them are, when the delete
    writes a compact index instead (or run `intentrank merge`)."""
    from intentrank.index.update import delete as delete_docs

    if not ids and not filter:
        raise ConfigError("name document ids to delete, or --filter")
    from intentrank.index.postgres import is_postgres_uri

    if is_postgres_uri(index_dir):  # SQL deletes
        from intentrank.index.postgres import PgIndex
        from intentrank.index.postgres_write import delete as delete_rows
        from intentrank.index.postgres_write import delete_where

        with PgIndex.open(index_dir) as table:
            gone = delete_rows(table, ids or []) if ids else 0
            if ids and gone < len(ids) and not missing_ok:
                console.print(f"[yellow]warning:[/] {len(ids) - gone} of the ids were not in "
                              f"{table.table.table}")
            gone += delete_where(table, filter) if filter else 0
            console.print(f"[green]updated[/] {gone} rows deleted from {table.table.table}")
        return
    _report(delete_docs(Path(index_dir), ids or [], filter, log=log, missing_ok=missing_ok),
            as_json)


@app.command()
@cli_errors
def merge(index_dir: IndexArg, as_json: JsonOption = False,
          policy: Annotated[bool, typer.Option("--policy", help="Only the merges the tiered "
                                               "merge policy asks for now.")] = False) -> None:
    """Rewrite an index of several segments or with deleted rows as one segment (adds
    merge small segments by the tiered policy, deletes merge when a fifth of the rows are
    dead)."""
    from intentrank.index.update import merge as merge_index
    from intentrank.index.update import merge_tiers

    _report((merge_tiers if policy else merge_index)(index_dir, log=log), as_json)


@app.command()
@cli_errors
def segments(index_dir: IndexArg, as_json: JsonOption = False) -> None:
    """List the segments of an index's live commit: rows, deleted rows, live rows, bytes
    on disk and size tier."""
    from intentrank.index.segments import describe
    from intentrank.index.store import Index

    with Index(index_dir) as index:
        rows = describe(index.manifest)
        generation = index.generation
    if as_json:
        typer.echo(json.dumps({"generation": generation, "segments": rows}, indent=1))
        return
    console.print(f"{index_dir} ({generation}): {len(rows)} segment(s)")
    console.print(f"  {'segment':<17}{'rows':>9}{'deleted':>9}{'live':>9}{'MB':>9}{'tier':>6}")
    for r in rows:
        console.print(f"  {r['segment']:<17}{r['rows']:>9}{r['deleted']:>9}{r['live']:>9}"
                      f"{r['bytes'] / 1e6:>9.2f}{r['tier']:>6}")


@source_command
def sync(index_dir: str, source: Path, src: Source) -> object:
    """Make an index hold exactly a source's documents (a folder: its files now): new and
    changed ones in, as one new segment (only they are encoded), removed ones out; every leg
    then answers as a fresh build of those documents in the index's row order. A file that
    cannot be read now keeps the passages it had."""
    from intentrank.index.update import sync as sync_docs

    folder = options_record(src.options) if src.options is not None and source.is_dir() \
        else None  # the index is now this folder: read it as this time (in the commit)
    return sync_docs(Path(index_dir), src.docs, log=log, progress=True, keep=src.skipped_units,
                     folder=folder)
