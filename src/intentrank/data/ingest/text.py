"""Plain text (.txt): decoded strictly, split into paragraphs at blank lines; and the
decoding every text format shares (binary content and undecodable bytes are skipped)."""

from __future__ import annotations

import codecs

from intentrank.data.ingest.blocks import Extracted, SkipFile, paragraphs

_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


def decode(data: bytes, encoding: str | None = None) -> str:
    """``data`` as text: UTF-16 with a BOM, else ``encoding`` (default UTF-8), strictly.

    Raises :class:`SkipFile` for binary content (NUL bytes in a file that is not UTF-16) or
    bytes the encoding cannot decode (naming the byte offset)."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            encoding = name
            break
    else:
        nul = data.find(b"\x00")
        if nul >= 0:
            raise SkipFile(f"binary content (a NUL byte at offset {nul})")
    encoding = encoding or "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise SkipFile(f"undecodable text: not {exc.encoding} at byte {exc.start}") from None
    except LookupError:
        raise SkipFile(f"unknown text encoding {encoding!r}") from None


def parse_text(data: bytes) -> Extracted:
    """A .txt file: paragraphs at blank lines; no title of its own."""
    return Extracted(paragraphs(decode(data)))
