"""Word documents (.docx) by python-docx: paragraphs and tables in body order, heading
levels from the ``Heading N``/``Title`` styles, list paragraphs grouped, and the core
properties (title, author, dates, ...) as metadata; the title from them, else from the
first paragraph in the ``Title`` style."""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from intentrank.data.ingest.blocks import Block, Extracted, SkipFile, clean
from intentrank.extras import require

_HEADING = re.compile(r"^(?:heading\s*(\d)|title)$", re.I)
_CORE = ("title", "author", "subject", "keywords", "category", "created", "modified")


def _table(table: Any) -> Block | None:
    rows = []
    for row in table.rows:
        cells = [clean(c.text) for c in row.cells]
        if any(cells):
            rows.append(" | ".join(cells))
    return Block("table", "\n".join(rows)) if rows else None


def parse_docx(data: bytes) -> Extracted:
    """A .docx file: its body's blocks in order and its core properties."""
    docx = require("docx", "ingest", "reading DOCX files")
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise SkipFile(f"corrupt DOCX ({type(exc).__name__}: {exc})") from None
    blocks: list[Block] = []
    items: list[str] = []

    def flush() -> None:
        if items:
            blocks.append(Block("list", "\n".join(f"- {t}" for t in items)))
            items.clear()

    for part in document.iter_inner_content():
        if isinstance(part, Table):
            flush()
            block = _table(part)
            if block:
                blocks.append(block)
            continue
        text = clean(part.text)
        if not text:
            continue
        style = part.style.name if part.style is not None else ""
        m = _HEADING.match(style or "")
        if style.lower().startswith("list"):
            items.append(text)
            continue
        flush()
        if m:
            blocks.append(Block("heading", text, level=int(m.group(1) or 1)))
        else:
            blocks.append(Block("paragraph", text))
    flush()
    props = document.core_properties
    meta: dict[str, Any] = {}
    for name in _CORE:
        value = getattr(props, name, None)
        if value:
            meta[name] = value.isoformat() if hasattr(value, "isoformat") else clean(str(value))
    # no title in the core properties: the first paragraph in Word's Title style
    title = meta.get("title") or next((p.text for p in document.paragraphs if p.text.strip()
                                       and p.style is not None
                                       and (p.style.name or "").lower() == "title"), "")
    return Extracted(blocks, title=clean(title), metadata=meta)
