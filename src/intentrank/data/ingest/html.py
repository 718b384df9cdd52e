"""HTML (.html/.htm) by selectolax (the Lexbor parser): the body walked once into heading,
paragraph, list, code (``pre``) and table blocks; scripts, styles and navigation dropped;
the title from ``<title>``; the encoding from a ``<meta>`` charset, else UTF-8, else
windows-1252 as browsers do. Chosen over trafilatura by docs/ingestion.md's measurements."""

from __future__ import annotations

import re
from typing import Any

from intentrank.data.ingest.blocks import Block, Extracted, SkipFile, clean
from intentrank.data.ingest.text import decode
from intentrank.extras import require

_DROP = frozenset(("script", "style", "noscript", "template", "svg", "head", "nav", "iframe",
                   "button", "select", "textarea", "-comment"))
_NAV_CLASSES = frozenset(("navheader", "navfooter", "navigation", "nav", "breadcrumb",
                          "breadcrumbs", "sidebar", "toc-sidebar"))
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_LISTS = frozenset(("ul", "ol", "dl"))
_BLOCKS = frozenset(("p", "div", "section", "article", "main", "blockquote", "li", "dd", "dt",
                     "figure", "figcaption", "address", "header", "footer", "aside", "form",
                     "hr", "br", "body", "html", "center", "fieldset", "details", "summary",
                     "tbody", "thead", "tr", "td", "th", "caption", "pre", "table", *_LISTS,
                     *_HEADINGS))
_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.I)


def _charset(data: bytes) -> str | None:
    m = _CHARSET.search(data[:4096])
    return m.group(1).decode("ascii").lower() if m else None


def _cp1252(data: bytes) -> bool:
    """Whether windows-1252 decodes ``data`` (none of its five unassigned bytes occurs)."""
    return not any(b in data for b in (b"\x81", b"\x8d", b"\x8f", b"\x90", b"\x9d"))


def _dropped(node: Any) -> bool:
    if node.tag in _DROP:
        return True
    attrs = node.attributes
    if attrs.get("role") == "navigation" or "hidden" in attrs:
        return True
    return bool(_NAV_CLASSES.intersection((attrs.get("class") or "").lower().split()))


class _Walker:
    """Collects blocks in document order; inline text accumulates until a block ends."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.inline: list[str] = []

    def flush(self) -> None:
        text = clean(" ".join(self.inline))
        self.inline = []
        if text:
            self.blocks.append(Block("paragraph", text))

    def walk(self, node: Any) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag
            if tag == "-text":
                self.inline.append(child.text(deep=False))
            elif _dropped(child):
                continue
            elif tag in _HEADINGS:
                self.flush()
                text = clean(child.text(deep=True, separator=" "))
                if text:
                    self.blocks.append(Block("heading", text, level=_HEADINGS[tag]))
            elif tag == "pre":
                self.flush()
                text = child.text(deep=True, separator="").strip("\n")
                if text.strip():
                    self.blocks.append(Block("code", text))
            elif tag == "table" and len(child.css("table")) == 1:  # css() includes itself
                self.flush()
                self._table(child)
            elif tag in _LISTS and not child.css_first("pre, table"):
                self.flush()
                self._list(child)
            elif tag in _BLOCKS:
                self.flush()
                self.walk(child)
                self.flush()
            else:
                self.walk(child)  # inline element: its text joins the paragraph

    def _table(self, table: Any) -> None:
        rows = []
        for tr in table.css("tr"):
            cells = [clean(c.text(deep=True, separator=" ")) for c in tr.iter()
                     if c.tag in ("td", "th")]
            if any(cells):
                rows.append(" | ".join(cells))
        if rows:
            self.blocks.append(Block("table", "\n".join(rows)))

    def _list(self, node: Any) -> None:
        items = [clean(c.text(deep=True, separator=" ")) for c in node.iter()
                 if c.tag in ("li", "dt", "dd")]
        lines = [("- " if node.tag != "ol" else f"{n}. ") + t
                 for n, t in enumerate((t for t in items if t), 1)]
        if lines:
            self.blocks.append(Block("list", "\n".join(lines)))


def parse_html(data: bytes) -> Extracted:
    """An .html/.htm file: its body's blocks; the title from ``<title>``."""
    lexbor = require("selectolax.lexbor", "ingest", "reading HTML files")

    charset = _charset(data)
    try:
        text = decode(data, charset)
    except SkipFile:
        if charset or b"\x00" in data:
            raise
        # no charset declared and not UTF-8: windows-1252, what browsers fall back to
        # (latin-1 where a byte windows-1252 leaves unassigned occurs)
        text = data.decode("cp1252" if _cp1252(data) else "latin-1")
    tree = lexbor.LexborHTMLParser(text)
    title_node = tree.css_first("title")
    title = clean(title_node.text()) if title_node else ""
    body = tree.body
    if body is None:
        raise SkipFile("no HTML body")
    walker = _Walker()
    walker.walk(body)
    walker.flush()
    meta: dict[str, Any] = {}
    for m in tree.css("meta[name][content]"):
        name = (m.attributes.get("name") or "").lower()
        if name in ("author", "description", "keywords", "date"):
            meta[name] = clean(m.attributes.get("content") or "")
    return Extracted(walker.blocks, title=title, metadata=meta)
