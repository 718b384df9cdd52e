"""Streaming readers for plain, .gz and .zip text files, JSONL and CSV, with exact error places."""

from __future__ import annotations

import csv
import gzip
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from intentrank.errors import DataError


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a plain, gzip or zip file (a zip must hold exactly one member) for reading."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", path)
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".zip":
        zf = zipfile.ZipFile(path)
        members = [n for n in zf.namelist() if not n.endswith("/")]
        if len(members) != 1:
            raise DataError(f"zip must hold exactly one file, found {len(members)}", path)
        return zf.open(members[0])
    return open(path, "rb")


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` (1-based, newline stripped), decoding line by line.

    A line that is not valid in ``encoding`` raises a :class:`DataError` naming the line and
    byte offset instead of a bare ``UnicodeDecodeError``.
    """
    with open_binary(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"not valid {encoding} at byte {exc.start} of the line "
                    f"({raw[exc.start:exc.start + 4]!r}); re-encode the file as UTF-8 "
                    f"or pass its encoding",
                    path,
                    lineno,
                ) from None
            if lineno == 1:
                text = text.removeprefix("\ufeff")
            yield lineno, text.rstrip("\r\n")


def iter_jsonl(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank JSON line."""
    for lineno, line in iter_lines(path, encoding):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"malformed JSON ({exc.msg} at column {exc.colno})", path, lineno) \
                from None
        if not isinstance(obj, dict):
            raise DataError(f"expected a JSON object, got {type(obj).__name__}", path, lineno)
        yield lineno, obj


def iter_csv(
    path: str | Path, encoding: str = "utf-8", delimiter: str | None = None
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line_number, row)`` from a CSV/TSV file with a header line."""
    path = Path(path)
    base = path.name.removesuffix(".gz").removesuffix(".zip")
    delim = delimiter or ("\t" if base.endswith(".tsv") else ",")
    lines = (text for _, text in iter_lines(path, encoding))
    reader = csv.DictReader(lines, delimiter=delim)
    for row in reader:
        lineno = reader.line_num
        if None in row:
            raise DataError(f"more fields than the header names ({reader.fieldnames})", path,
                            lineno)
        yield lineno, row


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """The whole file as text (plain, .gz or .zip)."""
    return "\n".join(text for _, text in iter_lines(path, encoding))


def open_text_writer(path: str | Path) -> IO[str]:
    """Open for writing text; gzip when the name ends in .gz."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "wb"), encoding="utf-8")
    return open(path, "w", encoding="utf-8")
