"""How a passage is cited for display: ``file › section (page N)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SEP = " › "


def source_label(metadata: Mapping[str, Any] | None, fallback: str = "") -> str:
    """``file › section (page N)`` from a passage's metadata (keys ``path``, ``headings``,
    ``page`` as :func:`~intentrank.data.ingest.read_folder` writes them): the file's name,
    the innermost heading and the PDF page, each left out where unknown. Documents without
    a ``path`` (a JSONL corpus) get ``fallback`` (e.g. their id)."""
    metadata = metadata or {}
    path = metadata.get("path")
    if not isinstance(path, str) or not path:
        return fallback
    label = path.rsplit("/", 1)[-1]
    headings = metadata.get("headings")
    if isinstance(headings, list | tuple) and headings and isinstance(headings[-1], str):
        label += SEP + headings[-1]
    page = metadata.get("page")
    if isinstance(page, int) and not isinstance(page, bool):
        end = metadata.get("page_end")
        pages = f"pages {page}-{end}" if isinstance(end, int) and end != page else f"page {page}"
        label += f" ({pages})"
    return label
