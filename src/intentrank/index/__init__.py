"""On-disk hybrid index: build once, reopen with checked settings."""

from intentrank.errors import IndexMismatchError
from intentrank.index.build import build_index, corpus_sha256, open_or_build
from intentrank.index.errors import (
    IndexBuildInterrupted,
    IndexBusyError,
    IndexCorruptError,
    IndexFormatError,
    IndexNotFoundError,
    IndexSettingsError,
)
from intentrank.index.settings import IndexSettings
from intentrank.index.store import Index

__all__ = [
    "Index",
    "IndexBuildInterrupted",
    "IndexBusyError",
    "IndexCorruptError",
    "IndexFormatError",
    "IndexMismatchError",
    "IndexNotFoundError",
    "IndexSettings",
    "IndexSettingsError",
    "build_index",
    "corpus_sha256",
    "open_or_build",
]
