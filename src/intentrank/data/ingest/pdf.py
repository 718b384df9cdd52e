"""PDF by pypdfium2 (PDFium, the engine of Chrome's viewer): text per page, split into
paragraphs; headings from the PDF's outline (bookmarks); metadata from the info dictionary;
the title from it, else from the title page (the text that opens page 1 in a larger type
than the page's body). Chosen over pypdf and pdfminer.six by docs/ingestion.md's
measurements."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from intentrank.data.ingest.blocks import Block, Extracted, SkipFile, clean
from intentrank.extras import require

_META = {"Title": "title", "Author": "author", "Subject": "subject", "Keywords": "keywords",
         "Creator": "creator", "Producer": "producer", "CreationDate": "created",
         "ModDate": "modified"}
_PDF_DATE = re.compile(r"D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?")
_NORM = re.compile(r"[\W\d_]+")
TITLE_SIZE = 1.2  # a title page's title: type at least this many times the body's size
TITLE_CHARS = 200  # longer: not a title
TITLE_PAGES = 3  # the body's type size: the median over the first pages' characters


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


def _chars(textpage: Any) -> tuple[str, list[float]]:
    """A page's text and each character's font size (0 for whitespace); empty where the
    text does not map one character to one index."""
    raw = require("pypdfium2.raw", "ingest", "reading PDF files")

    n = textpage.count_chars()
    text = textpage.get_text_range(0, n) if n else ""
    if len(text) != n:
        return "", []
    return text, [raw.FPDFText_GetFontSize(textpage.raw, i) if not c.isspace() else 0.0
                  for i, c in enumerate(text)]


def title_page(textpages: Sequence[Any], outline: Sequence[tuple[int, str]]) -> str:
    """The title a title page shows: the run of text that opens the first of ``textpages``
    in one type (lines joined) when that type is at least :data:`TITLE_SIZE` times the
    body's (the median size of the characters of ``textpages``: the first pages); empty
    where the page opens in body type, with a bookmark's title, or with more than
    :data:`TITLE_CHARS` characters."""
    pages = [_chars(t) for t in textpages]
    if not pages or not pages[0][0]:
        return ""
    body = statistics.median([sz for _, sizes in pages for sz in sizes if sz > 0] or [0.0])
    text, sizes = pages[0]
    first = next((sz for sz in sizes if sz > 0), 0.0)
    if first < TITLE_SIZE * body:
        return ""
    end = 0
    for i, sz in enumerate(sizes):
        if sz == 0.0:
            continue
        if abs(sz - first) > 0.05 * first:
            break
        end = i + 1
    title = clean(text[:end])
    if not _norm(title) or len(title) > TITLE_CHARS or _norm(title) in {
            _norm(t) for _, t in outline}:
        return ""
    return title


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
        opening = []  # the first pages' text, for the title page
        for i in range(len(pdf)):
            page = pdf[i]
            try:
                textpage = page.get_textpage()
                text = textpage.get_text_range()
                if i < TITLE_PAGES:
                    opening.append(textpage)
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
        cover = title_page(opening, [m for ms in marks.values() for m in ms])
        meta: dict[str, Any] = {"pages": len(pdf)}
    finally:
        pdf.close()
    for key, name in _META.items():
        value = clean(str(raw.get(key, "")))
        if value:
            meta[name] = pdf_date(value) if key.endswith("Date") else value
    return Extracted(blocks, title=meta.get("title", "") or cover, metadata=meta)
