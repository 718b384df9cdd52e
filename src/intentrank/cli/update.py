"""``intentrank add``, ``delete`` and ``sync``: change an index in place, without a rebuild
(:mod:`intentrank.index.update`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from intentrank.cli.common import app, cli_errors, console, corpus, log, settings_of
from intentrank.cli.ingest import (
    folder_options,
    is_document_folder,
    print_skipped,
    read_documents,
    record_options,
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


@app.command()
@cli_errors
def add(ctx: typer.Context, index_dir: TableOrIndexArg, source: CorpusArg,
        encoding: EncodingOption = "utf-8", include: IncludeOption = None,
        exclude: ExcludeOption = None, chunk_tokens: ChunkTokensOption = 0,
        chunk_overlap: OverlapOption = None, strict: StrictOption = False,
        as_json: JsonOption = False) -> None:
    """Add or update documents (an upsert) from a corpus file, a BEIR directory, a folder of
    documents or one document file: new ids are added, changed ones replaced in place (a
    file's passages together), unchanged ones skipped; only new and changed passages are
    encoded."""
    from intentrank.index.postgres import is_postgres_uri
    from intentrank.index.update import upsert

    if is_postgres_uri(index_dir):  # SQL upserts (INSERT ... ON CONFLICT), no generations
        from intentrank.index.postgres_write import write_corpus

        src = Source(ctx, Path("."), source, encoding, include, exclude, chunk_tokens,
                     chunk_overlap, strict)
        with write_corpus(src.docs, index_dir, progress=True, say=log) as table:
            console.print(f"[green]updated[/] {len(src.docs)} documents upserted into "
                          f"{table.table.table} ({len(table)} rows)")
        src.done()
        return
    src = Source(ctx, Path(index_dir), source, encoding, include, exclude, chunk_tokens,
                 chunk_overlap, strict)
    stats = upsert(Path(index_dir), src.docs, log=log, progress=True)
    src.done()
    _report(stats, as_json)


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
def merge(index_dir: IndexArg, as_json: JsonOption = False) -> None:
    """Write an index with deleted rows as a compact one (deletes do this by themselves
    when a fifth of the rows are dead)."""
    from intentrank.index.update import merge as merge_index

    _report(merge_index(index_dir, log=log), as_json)


@app.command()
@cli_errors
def sync(ctx: typer.Context, index_dir: IndexArg, source: CorpusArg,
         encoding: EncodingOption = "utf-8", include: IncludeOption = None,
         exclude: ExcludeOption = None, chunk_tokens: ChunkTokensOption = 0,
         chunk_overlap: OverlapOption = None, strict: StrictOption = False,
         as_json: JsonOption = False) -> None:
    """Make an index hold exactly a source's documents (a folder: its files now), in its
    order: new and changed ones in (only they are encoded), removed ones out; the result
    equals a fresh build of the source. A file that cannot be read now keeps the passages
    it had."""
    from intentrank.index.update import sync as sync_docs

    src = Source(ctx, index_dir, source, encoding, include, exclude, chunk_tokens,
                 chunk_overlap, strict)
    stats = sync_docs(index_dir, src.docs, log=log, progress=True, keep=src.skipped_units)
    if src.options is not None and source.is_dir():  # the index is now this folder, so read
        record_options(index_dir, src.options)  # as it was this time
    src.done()
    _report(stats, as_json)
