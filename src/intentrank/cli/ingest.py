"""A folder of documents for ``intentrank index``: telling it from a BEIR directory,
reading it with the index options, and printing what was skipped."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from intentrank.cli.common import console, warn
from intentrank.core.params import ParameterError
from intentrank.errors import ConfigError, DataError, IntentrankError

SHOWN = 20  # skipped files listed by name; the rest are counted
FOLDER_OPTIONS = "folder.json"  # in an index directory built from a folder of documents


@dataclass(frozen=True)
class FolderOptions:
    """How a folder of documents is read: ``--include``/``--exclude`` globs (None: the
    defaults), ``--chunk-tokens`` (0: the default) and ``--chunk-overlap`` (None: the
    default). ``intentrank index`` records them in the index (:data:`FOLDER_OPTIONS`);
    ``add`` and ``sync`` of a folder read it the same way unless told otherwise."""

    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    chunk_tokens: int = 0
    overlap: int | None = None

    def over(self, recorded: FolderOptions) -> FolderOptions:
        """These options, each one not given taken from ``recorded``."""
        return FolderOptions(self.include if self.include is not None else recorded.include,
                             self.exclude if self.exclude is not None else recorded.exclude,
                             self.chunk_tokens or recorded.chunk_tokens,
                             self.overlap if self.overlap is not None else recorded.overlap)

    def chunking_only(self) -> FolderOptions:
        """Without the globs (for one document file)."""
        return replace(self, include=None, exclude=None)


def folder_options(include: list[str] | None, exclude: list[str] | None, chunk_tokens: int,
                   overlap: int | None) -> FolderOptions:
    """The options as a command was given them."""
    return FolderOptions(tuple(include) if include else None,
                         tuple(exclude) if exclude else None, chunk_tokens, overlap)


def recorded_options(index_dir: Path) -> FolderOptions:
    """The folder options recorded in the live commit of ``index_dir`` (its manifest's
    ``folder``; an index from before they were kept there: ``folder.json``; none recorded:
    the defaults)."""
    path = index_dir / FOLDER_OPTIONS
    try:
        raw = _committed_options(index_dir)
        if raw is None:
            raw = json.loads(path.read_text(encoding="utf-8"))
        return FolderOptions(
            tuple(raw["include"]) if raw.get("include") is not None else None,
            tuple(raw["exclude"]) if raw.get("exclude") is not None else None,
            int(raw.get("chunk_tokens") or 0),
            int(raw["overlap"]) if raw.get("overlap") is not None else None)
    except FileNotFoundError:
        return FolderOptions()
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"{path}: cannot read the folder options recorded there ({exc}); "
                          f"delete the file and give --include/--exclude/--chunk-tokens/"
                          f"--chunk-overlap again") from exc


def _committed_options(index_dir: Path) -> dict | None:
    """The ``folder`` entry of the live commit's manifest (None: none, or no index)."""
    from intentrank.index import layout

    try:
        name = layout.read_current(index_dir)
        manifest = layout.load_manifest(index_dir / name) if name else {}
    except IntentrankError:
        return None
    return manifest.get("folder")


def options_record(options: FolderOptions | None) -> dict | None:
    """How a commit records folder options (None: not a folder)."""
    return None if options is None else asdict(options)


def record_options(index_dir: Path, options: FolderOptions | None) -> None:
    """Record how the index's folder was read (None: it was not a folder; forget them)."""
    path = index_dir / FOLDER_OPTIONS
    if options is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".{FOLDER_OPTIONS}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(asdict(options), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def is_document_folder(source: Path) -> bool:
    """A folder that is not a BEIR directory (no corpus file), or one document file."""
    from intentrank.data.dataset import CORPUS_NAMES
    from intentrank.data.ingest import PARSERS

    if source.is_dir():
        return not any((source / name).exists() for name in CORPUS_NAMES)
    return source.suffix.lower() in PARSERS


def read_documents(source: Path, options: FolderOptions, strict: bool, chunk_size: int = 0
                   ) -> Any:
    """:func:`~intentrank.data.ingest.read_folder` of ``source`` with the command's
    options; its documents raise a DataError, with the summary, if there are none."""
    from intentrank.data.ingest import DEFAULT_INCLUDE, ChunkSettings, read_folder

    if chunk_size:
        raise ParameterError(f"--chunk-size counts words in a corpus file's documents; "
                             f"{source} is a folder of documents: use --chunk-tokens")
    chunking = ChunkSettings(max_tokens=options.chunk_tokens or None,
                             **({} if options.overlap is None
                                else {"overlap_tokens": options.overlap}))
    read = read_folder(source, include=options.include or DEFAULT_INCLUDE,
                       exclude=options.exclude or (), chunking=chunking, strict=strict,
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
