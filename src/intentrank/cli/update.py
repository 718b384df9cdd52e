"""``intentrank add``, ``delete`` and ``sync``: change an index in place, without a rebuild
(:mod:`intentrank.index.update`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from intentrank.cli.common import app, cli_errors, console, corpus, log
from intentrank.cli.options import CorpusArg
from intentrank.errors import ConfigError

IndexArg = Annotated[Path, typer.Argument(help="Index directory (built by `intentrank index`).")]
EncodingOption = Annotated[str, typer.Option(help="Text encoding of the corpus file.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print what changed as JSON.")]


def _report(stats: object, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(stats.to_dict(), indent=1))  # type: ignore[attr-defined]
    else:
        console.print(f"[green]updated[/] {stats.summary()}")  # type: ignore[attr-defined]


@app.command()
@cli_errors
def add(index_dir: IndexArg, source: CorpusArg, encoding: EncodingOption = "utf-8",
        as_json: JsonOption = False) -> None:
    """Add or update documents (an upsert): new ids are added, changed ones replaced in
    place, unchanged ones skipped; only new and changed passages are encoded."""
    from intentrank.index.update import upsert

    _report(upsert(index_dir, corpus(source, encoding), log=log, progress=True), as_json)


@app.command()
@cli_errors
def delete(
    index_dir: IndexArg,
    ids: Annotated[list[str] | None, typer.Argument(help="Document ids (a parent id deletes "
                                                    "all its passages).")] = None,
    filter: Annotated[str | None, typer.Option("--filter", help="Also delete every passage "
                                               "this metadata filter matches (docs/filters.md"
                                               ").")] = None,
    missing_ok: Annotated[bool, typer.Option(help="Ignore ids the index does not hold.")] =
        False,
    as_json: JsonOption = False,
) -> None:
    """Delete documents by id and/or by filter."""
    from intentrank.index.update import delete as delete_docs

    if not ids and not filter:
        raise ConfigError("name document ids to delete, or --filter")
    _report(delete_docs(index_dir, ids or [], filter, log=log, missing_ok=missing_ok),
            as_json)


@app.command()
@cli_errors
def sync(index_dir: IndexArg, source: CorpusArg, encoding: EncodingOption = "utf-8",
         as_json: JsonOption = False) -> None:
    """Make an index hold exactly a source's documents, in its order: new and changed ones
    in (only they are encoded), removed ones out. The result equals a fresh build."""
    from intentrank.index.update import sync as sync_docs

    _report(sync_docs(index_dir, corpus(source, encoding), log=log, progress=True), as_json)
