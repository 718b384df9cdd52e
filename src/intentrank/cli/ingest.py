"""A folder of documents for ``intentrank index``: telling it from a BEIR directory,
reading it with the index options, and printing what was skipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from intentrank.cli.common import console, warn
from intentrank.core.params import ParameterError
from intentrank.errors import DataError

SHOWN = 20  # skipped files listed by name; the rest are counted


def is_document_folder(source: Path) -> bool:
    """A folder that is not a BEIR directory (no corpus file), or one document file."""
    from intentrank.data.dataset import CORPUS_NAMES
    from intentrank.data.ingest import PARSERS

    if source.is_dir():
        return not any((source / name).exists() for name in CORPUS_NAMES)
    return source.suffix.lower() in PARSERS


def read_documents(source: Path, include: list[str] | None, exclude: list[str] | None,
                   chunk_tokens: int, overlap: int | None, strict: bool, chunk_size: int
                   ) -> Any:
    """:func:`~intentrank.data.ingest.read_folder` of ``source`` with the command's
    options; its documents raise a DataError, with the summary, if there are none."""
    from intentrank.data.ingest import DEFAULT_INCLUDE, ChunkSettings, read_folder

    if chunk_size:
        raise ParameterError(f"--chunk-size counts words in a corpus file's documents; "
                             f"{source} is a folder of documents: use --chunk-tokens")
    chunking = ChunkSettings(max_tokens=chunk_tokens or None,
                             **({} if overlap is None else {"overlap_tokens": overlap}))
    read = read_folder(source, include=tuple(include or DEFAULT_INCLUDE),
                       exclude=tuple(exclude or ()), chunking=chunking, strict=strict,
                       progress=True)
    if not read.files:
        raise DataError("no documents to read (the folder has no file the --include globs "
                        "select)", source)
    read.documents = _nonempty(read.documents, read, source)
    return read


def _nonempty(docs: Iterator[Any], read: Any, source: Path) -> Iterator[Any]:
    n = 0
    for n, doc in enumerate(docs, 1):  # noqa: B007 - n counts what was yielded
        yield doc
    if n == 0:
        print_skipped(read)
        raise DataError(f"no text in any file ({read.summary()})", source)


def print_skipped(read: Any) -> None:
    """The summary line, and each skipped file with its reason (the first :data:`SHOWN`)."""
    for s in read.skipped[:SHOWN]:
        warn(f"skipped {s.path}: {s.reason}")
    if len(read.skipped) > SHOWN:
        warn(f"... and {len(read.skipped) - SHOWN} more skipped")
    console.print(f"[cyan]folder[/] {read.summary()}")
