"""Errors that name what is wrong and where."""

from __future__ import annotations

from pathlib import Path


class IntentrankError(Exception):
    """Base class for every error this package raises on purpose."""


class DataError(IntentrankError):
    """Bad input data; names the file, line and field where known."""

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        where = ""
        if self.path:
            where = self.path + (f":{line}" if line is not None else "")
        if field:
            where += f" (field {field!r})" if where else f"field {field!r}"
        super().__init__(f"{where}: {message}" if where else message)


class IndexMismatchError(IntentrankError):
    """An index was reopened with other settings or another corpus."""


class ConfigError(IntentrankError):
    """A pipeline configuration that cannot be built."""


class FilterError(ConfigError, ValueError):
    """Malformed metadata-filter text or an unusable filter value; bad input, named with its
    position and token where it came from text."""


class ModelError(IntentrankError):
    """A model that cannot be found, verified or loaded."""
