"""Options and arguments that commands of several modules share, one help text each."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer


def panel(title: str) -> Callable[..., Any]:
    """``typer.Option`` for options that ``--help`` shows together under ``title`` (the
    many options of one concern, e.g. Ray, kept apart from a command's main ones)."""
    return functools.partial(typer.Option, rich_help_panel=title)


RayPanel = panel("Ray")

IndexOption = Annotated[Path | None, typer.Option(
    "--index", help="Index directory (default indexes/<dataset>, built if missing).")]
SampleOption = Annotated[int, typer.Option(
    help="Fixed-seed sample of this many queries (0 = the whole split).")]
RayAddressOption = Annotated[str, RayPanel(
    help="Address of a running Ray cluster (implies --ray).")]
SearchBm25Option = Annotated[str, typer.Option(
    help="Search BM25 with numpy or numba (default: the index's setting).")]
CorpusArg = Annotated[Path, typer.Argument(help="Corpus: a BEIR directory, or a .jsonl/.csv "
                                           "file (plain, .gz or .zip).")]
FilterOption = Annotated[str, typer.Option(
    "--filter", help='Only documents whose metadata pass this filter, e.g. \'source = '
    '"handbook" AND year >= 2020 AND path PREFIX "docs/"\' (docs/filters.md).')]
