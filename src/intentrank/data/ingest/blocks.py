"""What every format's parser returns: a document as a title, metadata and a list of
structural blocks (headings, paragraphs, lists, code, tables), and the skip a bad file
raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

BlockKind = Literal["heading", "paragraph", "list", "code", "table"]
SEPARATOR = "\n\n"
"""Between two blocks in a file's extracted text (what ``char_start``/``char_end`` index)."""


@dataclass(frozen=True)
class Block:
    """One structural unit of a document: ``level`` is a heading's (1 = H1), ``page`` the
    1-based PDF page it is on."""

    kind: BlockKind
    text: str
    level: int = 0
    page: int | None = None


@dataclass
class Extracted:
    """A parsed file: its own title (metadata, a PDF's title page, ...; else empty, and
    :func:`~intentrank.data.ingest.folder.document_title` falls back to a heading or the
    file name), its blocks in reading order and its own metadata (front matter, PDF/DOCX
    fields)."""

    blocks: list[Block]
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


class SkipFile(Exception):  # noqa: N818 - a signal, caught by folder.py, not an error type
    """A file that cannot be read as a document; ``reason`` names why (counted in the
    summary; ``strict=True`` turns it into a DataError)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def clean(text: str) -> str:
    """Whitespace runs inside a paragraph folded to one space."""
    return " ".join(text.split())


def paragraphs(text: str, page: int | None = None) -> list[Block]:
    """Plain text split into paragraph blocks at blank lines."""
    out = []
    for part in text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        part = part.strip()
        if part:
            out.append(Block("paragraph", part, page=page))
    return out
