"""Streaming readers for plain, .gz and .zip text files, JSONL and CSV, with exact error places.

Every failure a bad file can cause (a directory where a file is expected, a fake or truncated
archive, bytes that are not valid in the encoding, malformed JSON or CSV, an unknown encoding
name) comes out as a :class:`~intentrank.errors.DataError` naming the file and, where known,
the line; never as a bare library exception.

Lines are split like Python's universal newlines (``\\n``, ``\\r\\n`` and a lone ``\\r``) and
decoded incrementally, so a decoding error names the physical line it is on, for any encoding
(UTF-16 included).
"""

from __future__ import annotations

import codecs
import csv
import filecmp
import gzip
import io
import json
import lzma
import os
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from intentrank.errors import DataError

_BLOCK = 1 << 16
_BREAK = re.compile(r"\r\n|\r|\n")
# What reading a corrupt or truncated archive raises (gzip.BadGzipFile is an OSError).
_READ_ERRORS = (OSError, EOFError, zlib.error, zipfile.BadZipFile, lzma.LZMAError,
                NotImplementedError)
_MAGIC = {b"\x1f\x8b": ("gzip", ".gz"), b"PK\x03\x04": ("zip", ".zip")}


def check_encoding(encoding: str) -> str:
    """Return ``encoding`` if Python can decode text with it, else raise a DataError.

    Called before a file is opened, so ``--encoding utf-9`` fails at once, not mid-file.
    """
    try:
        info = codecs.lookup(encoding)
    except (LookupError, TypeError, ValueError):
        info = None
    # bytes-to-bytes codecs such as 'hex' or 'zlib' are not text encodings
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise DataError(f"unknown encoding {encoding!r} (use a Python text codec name such as "
                        f"'utf-8', 'latin-1', 'cp1252' or 'utf-16')")
    return encoding


def _exc_name(exc: BaseException) -> str:
    module = type(exc).__module__
    return type(exc).__name__ if module == "builtins" else f"{module}.{type(exc).__name__}"


def check_file(path: str | Path) -> Path:
    """The path, if it names something readable as a file; a DataError otherwise."""
    path = Path(path)
    if path.is_dir():
        raise DataError("is a directory, expected a file", path)
    if not path.exists():
        raise DataError("file not found", path)
    return path


class _ZipMember(io.RawIOBase):
    """The one member of a zip archive; closing it closes the archive too."""

    def __init__(self, archive: zipfile.ZipFile, member: IO[bytes]) -> None:
        super().__init__()
        self._archive = archive
        self._member = member

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._member.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._member.close()
            finally:
                self._archive.close()
        super().close()


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a plain, gzip or zip file (a zip must hold exactly one member) for reading.

    Errors in the archive's own structure (not a zip, an encrypted member) raise a DataError
    here; a corrupt or truncated compressed stream is only found while reading (see
    :func:`iter_lines`).
    """
    path = check_file(path)
    try:
        if path.suffix == ".gz":
            if path.is_file() and path.stat().st_size == 0:
                raise DataError("the gzip file is empty (0 bytes; even an empty gzip stream "
                                "has a header)", path)
            return gzip.open(path, "rb")
        if path.suffix != ".zip":
            return open(path, "rb")
    except OSError as exc:
        raise DataError(f"cannot open the file ({exc.strerror or exc})", path) from None
    try:
        archive = zipfile.ZipFile(path)
    except OSError as exc:
        raise DataError(f"cannot open the file ({exc.strerror or exc})", path) from None
    except Exception as exc:  # noqa: BLE001 (zipfile raises many types on garbage)
        raise DataError(f"not a readable zip archive ({_exc_name(exc)}: {exc})",
                        path) from None
    try:
        members = [i for i in archive.infolist() if not i.is_dir()]
        if len(members) != 1:
            raise DataError(f"zip must hold exactly one file, found {len(members)}", path)
        if members[0].flag_bits & 0x1:
            raise DataError(f"the zip member {members[0].filename!r} is encrypted; unzip it "
                            f"with its password first", path)
        member = archive.open(members[0])
    except DataError:
        archive.close()
        raise
    except Exception as exc:  # noqa: BLE001 (encrypted, unsupported method, bad header...)
        archive.close()
        raise DataError(f"cannot read the zip member ({_exc_name(exc)}: {exc})",
                        path) from None
    return io.BufferedReader(_ZipMember(archive, member))


def _read_blocks(fh: IO[bytes], path: Path, line: list[int]) -> Iterator[bytes]:
    """Raw blocks of ``fh``; a read error becomes a DataError at line ``line[0]``."""
    while True:
        try:
            # read1: one decompression step at a time, so a corrupt or truncated stream is
            # reported near the line where it breaks, not a block earlier
            block = fh.read1(_BLOCK) if hasattr(fh, "read1") else fh.read(_BLOCK)
        except _READ_ERRORS as exc:
            if isinstance(exc, gzip.BadGzipFile) and "Not a gzipped file" in str(exc):
                raise DataError(f"not gzip data ({exc}); if the file is plain text, remove "
                                f"the .gz suffix", path, line[0]) from None
            kind = {".gz": "gzip", ".zip": "zip"}.get(path.suffix)
            what = f"the {kind} data is corrupt or truncated" if kind else "read error"
            raise DataError(f"{what} ({_exc_name(exc)}: {exc}); reading stopped in this "
                            f"line", path, line[0]) from None
        if not block:
            return
        yield block


def _decode_error(exc: UnicodeDecodeError, raw: bytes, pending: str, encoding: str,
                  path: Path, lineno: int, first_bytes: bytes) -> DataError:
    prefix = raw[: exc.start].decode(encoding, errors="replace")
    text = pending + prefix
    breaks = _BREAK.findall(text)
    line_text = _BREAK.split(text)[-1]
    try:
        offset = len(line_text.encode(encoding))
    except (UnicodeError, LookupError):
        offset = exc.start
    hint = "re-encode the file as UTF-8 or pass its encoding"
    for magic, (kind, suffix) in _MAGIC.items():
        if first_bytes.startswith(magic) and path.suffix != suffix:
            hint = f"the file looks like {kind} data: name it with a {suffix} suffix"
    return DataError(
        f"not valid {encoding} at byte {offset} of the line "
        f"({raw[exc.start:exc.start + 4]!r}); {hint}",
        path,
        lineno + len(breaks),
    )


class _LineSplitter:
    """Splits decoded text, chunk by chunk, into lines with their endings (``\n``, ``\r\n`` or
    a lone ``\r``), in time linear in the text however long a line is."""

    def __init__(self) -> None:
        self.parts: list[str] = []  # the line being assembled
        self.held: str | None = None  # a line ending in "\r": is "\n" next?

    def pending(self) -> str:
        return (self.held or "") + "".join(self.parts)

    def feed(self, text: str) -> Iterator[str]:
        if not text:
            return
        if self.held is not None:
            if text.startswith("\n"):
                yield self.held + "\n"
                text = text[1:]
            else:
                yield self.held
            self.held = None
        start = 0
        for m in _BREAK.finditer(text):
            piece = "".join(self.parts) + text[start:m.end()]
            self.parts.clear()
            start = m.end()
            if m.group() == "\r" and m.end() == len(text):
                self.held = piece
                return
            yield piece
        if start < len(text):
            self.parts.append(text[start:])

    def close(self) -> Iterator[str]:
        if self.held is not None:
            yield self.held
            self.held = None
        if self.parts:
            yield "".join(self.parts)
            self.parts.clear()


def iter_physical_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for every physical line, line ending kept (1-based).

    This is what ``io.TextIOWrapper(binary, encoding, newline="")`` gives, but a decoding error
    names its line and byte. A byte-order mark at the start is dropped.
    """
    check_encoding(encoding)
    path = Path(path)
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    splitter = _LineSplitter()
    line = [1]  # the number of the line being assembled, shared with _read_blocks
    first = b""
    bom_checked = False
    with open_binary(path) as fh:
        for raw in _read_blocks(fh, path, line):
            if not first:
                first = raw[:4]
            state = decoder.getstate()
            buffered = state[0] if isinstance(state[0], bytes) else b""
            try:
                text = decoder.decode(raw)
            except UnicodeDecodeError as exc:
                raise _decode_error(exc, buffered + raw, splitter.pending(), encoding, path,
                                    line[0], first) from None
            except UnicodeError as exc:  # e.g. "UTF-16 stream does not start with BOM"
                raise DataError(f"not valid {encoding} ({exc}); re-encode the file as UTF-8 "
                                f"or pass its encoding", path, line[0]) from None
            if not bom_checked and text:
                text = text.removeprefix("\ufeff")
                bom_checked = True
            for piece in splitter.feed(text):
                yield line[0], piece
                line[0] += 1
        try:
            text = decoder.decode(b"", final=True)
        except UnicodeError as exc:
            reason = exc.reason if isinstance(exc, UnicodeDecodeError) else str(exc)
            raise DataError(f"the file ends inside a {encoding} character ({reason})",
                            path, line[0]) from None
    if not bom_checked:
        text = text.removeprefix("\ufeff")
    for piece in (*splitter.feed(text), *splitter.close()):
        yield line[0], piece
        line[0] += 1


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` (1-based, line ending stripped).

    A line that is not valid in ``encoding`` raises a :class:`DataError` naming the line and
    byte offset instead of a bare ``UnicodeDecodeError``; a corrupt or truncated .gz/.zip
    raises one naming the line where reading stopped.
    """
    for lineno, text in iter_physical_lines(path, encoding):
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
        except RecursionError:
            raise DataError("malformed JSON (nested too deeply)", path, lineno) from None
        except ValueError as exc:  # e.g. an integer over Python's 4300-digit limit
            raise DataError(f"malformed JSON ({exc})", path, lineno) from None
        if not isinstance(obj, dict):
            raise DataError(f"expected a JSON object, got {type(obj).__name__}", path, lineno)
        yield lineno, obj


def _csv_message(exc: csv.Error) -> str:
    text = str(exc)
    if "unexpected end of data" in text:
        return ("malformed CSV: a quoted field opened in this record is never closed "
                "(the file ends inside quotes)")
    if "field larger than field limit" in text:
        return (f"malformed CSV: {text}; a field this long is usually an unclosed quote")
    return f"malformed CSV: {text}"


def iter_csv(
    path: str | Path, encoding: str = "utf-8", delimiter: str | None = None
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line_number, row)`` from a CSV/TSV file with a header line.

    Parsed by the :mod:`csv` module in strict mode (``","``, or ``"\\t"`` for .tsv), from a
    stream that keeps line endings, so quoted fields may span lines and keep their newlines.
    ``line_number`` is the physical line where the record starts. Malformed quoting, a record
    with more or fewer fields than the header, a duplicated column name and a quote left open
    at the end of the file raise a :class:`DataError` naming the file and that line. Blank
    lines are skipped.
    """
    path = Path(path)
    check_encoding(encoding)
    base = path.name.removesuffix(".gz").removesuffix(".zip")
    delim = delimiter or ("\t" if base.endswith(".tsv") else ",")
    consumed = [0]  # physical lines handed to the csv reader so far

    def lines() -> Iterator[str]:
        for lineno, text in iter_physical_lines(path, encoding):
            consumed[0] = lineno
            yield text

    reader = csv.reader(lines(), delimiter=delim, strict=True)
    header: list[str] | None = None
    while True:
        start = consumed[0] + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise DataError(_csv_message(exc), path, start) from None
        if not row or (len(row) == 1 and not row[0].strip()):
            continue  # blank line
        if header is None:
            header = row
            named = [h for h in header if h]
            dup = sorted({h for h in named if named.count(h) > 1})
            if dup:
                raise DataError(f"the header names column(s) {dup} more than once", path, start)
            continue
        if len(row) != len(header):
            more = "more" if len(row) > len(header) else "fewer"
            raise DataError(f"{len(row)} fields, {more} than the {len(header)} the header "
                            f"names ({header})", path, start)
        yield start, dict(zip(header, row, strict=True))


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """The whole file as text (plain, .gz or .zip), line endings normalised to ``\\n``."""
    return "\n".join(text for _, text in iter_lines(path, encoding))


def open_text_writer(path: str | Path) -> IO[str]:
    """Open for writing text; gzip when the name ends in .gz."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "wb"), encoding="utf-8")
    return open(path, "w", encoding="utf-8")


def atomic_write(path: Path, text: str, *, keep_unchanged: bool = False) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``; with
    ``keep_unchanged``, a ``path`` that already holds exactly ``text`` is left untouched (its
    mtime too, so a rerun does not make what reads it look stale)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    if keep_unchanged and path.is_file() and filecmp.cmp(tmp, path, shallow=False):
        tmp.unlink()
        return
    os.replace(tmp, path)


def write_jsonl(path: Path, records: Iterable[Any], *, keep_unchanged: bool = False) -> None:
    """``records`` one JSON object a line (non-ASCII kept), written by :func:`atomic_write`."""
    atomic_write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                 keep_unchanged=keep_unchanged)
