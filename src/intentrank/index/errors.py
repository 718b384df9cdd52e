"""Errors of the on-disk index (all :class:`~intentrank.errors.IntentrankError` subclasses),
exported by ``intentrank.index`` too."""

from __future__ import annotations

from pathlib import Path

from intentrank.errors import ConfigError, IndexMismatchError, IntentrankError


def rebuild_hint(index_dir: str | Path) -> str:
    """What to run to replace a damaged or outdated index at ``index_dir``."""
    return f"rebuild with `intentrank index SRC {index_dir} --overwrite`"


class IndexBusyError(IntentrankError):
    """Another process (or thread) is building into the same index directory."""


class IndexCorruptError(IntentrankError):
    """A file of an index is missing, truncated, unparseable or fails its checksum."""


class IndexNotFoundError(IntentrankError):
    """No index at the given directory."""


class IndexFormatError(IndexMismatchError):
    """The index was written by another (older) on-disk format."""


class IndexBuildInterrupted(IntentrankError):
    """A build was stopped by SIGTERM; its temporary files were removed."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


class IndexSettingsError(ConfigError, ValueError):
    """Invalid index settings (also a ``ValueError``, so callers catching that still work)."""

