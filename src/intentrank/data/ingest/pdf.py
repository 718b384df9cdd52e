"""PDF by pypdfium2 (PDFium, the engine of Chrome's viewer): text per page, split into
paragraphs; headings from the PDF's outline (bookmarks); metadata from the info dictionary.
Chosen over pypdf and pdfminer.six by docs/ingestion.md's measurements."""

from __future__ import annotations

import re
import statistics
from datetime import UTC, datetime
from typing import Any

from intentrank.data.ingest.blocks import Block, Extracted, SkipFile, clean
from intentrank.extras import require

_META = {"Title": "title", "Author": "author", "Subject": "subject", "Keywords": "keywords",
         "Creator": "creator", "Producer": "producer", "CreationDate": "created",
         "ModDate": "modified"}
_PDF_DATE = re.compile(r"D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?")
_NORM = re.compile(r"[\W\d_]+")


def pdf_date(value: str) -> str:
    """A PDF date (``D:YYYYMMDDHHmmSS...``) as an ISO datetime (UTC where no zone is
    given); other text is returned unchanged."""
    m = _PDF_DATE.match(value)
    if not m:
        return value
    parts = [int(p) if p else d for p, d in zip(m.groups(), (0, 1, 1, 0, 0, 0), strict=True)]
    try:
        return datetime(*parts, tzinfo=UTC).isoformat()  # type: ignore[misc]
    except ValueError:
        return value


def _norm(text: str) -> str:
    return _NORM.sub(" ", text).strip().lower()


def _outline(pdf: Any) -> dict[int, list[tuple[int, str]]]:
    """0-based page -> [(level, title)] of the bookmarks that point at it (level 1 = top)."""
    marks: dict[int, list[tuple[int, str]]] = {}
    try:
        for mark in pdf.get_toc(max_depth=6):
            dest = mark.get_dest()
            index = dest.get_index() if dest is not None else None
            title = clean(mark.get_title() or "")
            if index is not None and title:
                marks.setdefault(index, []).append((mark.level + 1, title))
    except Exception:  # noqa: BLE001 - a broken outline only loses the headings
        return {}
    return marks


def _page_blocks(text: str, page: int, marks: list[tuple[int, str]]) -> list[Block]:
    """One page's lines as paragraphs (a break after a short line ending a sentence, or at
    a blank line) with the page's bookmarks as headings, on the line that bears their title
    where there is one, else at the top of the page."""
    lines = [ln.strip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    width = statistics.median([len(ln) for ln in lines if ln] or [0])
    heads = {_norm(t): (lvl, t) for lvl, t in marks}
    blocks: list[Block] = []
    top = [Block("heading", t, level=lvl, page=page) for lvl, t in marks]
    para: list[str] = []

    def flush() -> None:
        if para:
            blocks.append(Block("paragraph", clean(" ".join(para)), page=page))
            para.clear()

    for ln in lines:
        key = _norm(ln)
        hit = next((h for k, h in heads.items() if k and (key == k or key.endswith(" " + k))),
                   None)
        if hit is not None:
            flush()
            blocks.append(Block("heading", ln, level=hit[0], page=page))
            top = [b for b in top if _norm(b.text) != _norm(hit[1])]
            heads.pop(_norm(hit[1]), None)
        elif not ln:
            flush()
        else:
            para.append(ln)
            if ln[-1] in ".:!?" and len(ln) < 0.8 * width:
                flush()
    flush()
    return top + blocks


def parse_pdf(data: bytes) -> Extracted:
    """A .pdf file: page by page (every block knows its 1-based page). Encrypted, corrupt
    and text-less PDFs are skipped, each with its reason."""
    pdfium = require("pypdfium2", "ingest", "reading PDF files")

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        message = str(exc)
        if "password" in message.lower():
            raise SkipFile("encrypted PDF (needs a password)") from None
        raise SkipFile(f"corrupt PDF ({message})") from None
    try:
        marks = _outline(pdf)
        blocks: list[Block] = []
        chars = 0
        for i in range(len(pdf)):
            page = pdf[i]
            try:
                text = page.get_textpage().get_text_range()
            except pdfium.PdfiumError as exc:
                raise SkipFile(f"corrupt PDF (page {i + 1}: {exc})") from None
            chars += len(text.strip())
            blocks.extend(_page_blocks(text, i + 1, marks.get(i, [])))
        if len(pdf) == 0:
            raise SkipFile("corrupt PDF (no pages)")
        if chars == 0:
            raise SkipFile(f"PDF has no text layer ({len(pdf)} page(s) of images only: "
                           f"needs OCR)")
        raw = pdf.get_metadata_dict(skip_empty=True)
        meta: dict[str, Any] = {"pages": len(pdf)}
    finally:
        pdf.close()
    for key, name in _META.items():
        value = clean(str(raw.get(key, "")))
        if value:
            meta[name] = pdf_date(value) if key.endswith("Date") else value
    return Extracted(blocks, title=meta.get("title", ""), metadata=meta)
