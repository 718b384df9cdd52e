"""Markdown (.md) by markdown-it-py (CommonMark + tables): headings, paragraphs, lists,
fenced/indented code and tables as blocks, the YAML front matter as metadata."""

from __future__ import annotations

import re
from typing import Any

import yaml

from intentrank.data.ingest.blocks import Block, Extracted, SkipFile, clean
from intentrank.data.ingest.text import decode
from intentrank.extras import require

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


def front_matter(text: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter of ``text`` (a mapping between ``---`` lines at the very start)
    and the text after it. Front matter that is not a YAML mapping is skipped with a
    reason."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        raise SkipFile(f"bad YAML front matter: {str(exc).splitlines()[0]}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise SkipFile(f"front matter is a {type(meta).__name__}, not a mapping")
    return {str(k): _jsonable(v) for k, v in meta.items()}, text[m.end():]


def _jsonable(value: Any) -> Any:
    """YAML values as JSON-able ones (dates as ISO strings)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _parser() -> Any:
    markdown_it = require("markdown_it", "ingest", "reading Markdown files")
    return markdown_it.MarkdownIt("commonmark").enable("table")


def markdown_blocks(text: str) -> list[Block]:
    """The blocks of Markdown ``text``: each top-level token run becomes one block (a list or
    a table whole, code verbatim)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    tokens = _parser().parse(text)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "heading_open":
            blocks.append(Block("heading", clean(tokens[i + 1].content), level=int(tok.tag[1])))
            i += 3
        elif tok.type in ("fence", "code_block"):
            if tok.content.strip():
                blocks.append(Block("code", tok.content.rstrip("\n")))
            i += 1
        elif tok.type in ("bullet_list_open", "ordered_list_open", "table_open",
                          "blockquote_open", "paragraph_open", "html_block"):
            end = _close(tokens, i)
            start_line, end_line = tok.map or (0, 0)
            source = "\n".join(lines[start_line:end_line]).strip()
            kind = {"bullet_list_open": "list", "ordered_list_open": "list",
                    "table_open": "table"}.get(tok.type, "paragraph")
            if tok.type == "paragraph_open":
                source = clean(tokens[i + 1].content)
            if source:
                blocks.append(Block(kind, source))  # type: ignore[arg-type]
            i = end + 1
        else:
            i += 1
    return blocks


def _close(tokens: list, i: int) -> int:
    """Index of the token closing ``tokens[i]`` (itself for a self-contained token)."""
    if tokens[i].nesting == 0:
        return i
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1


def parse_markdown(data: bytes) -> Extracted:
    """A .md file: front matter (``title`` from it when present) and its blocks."""
    meta, body = front_matter(decode(data))
    title = meta.get("title")
    return Extracted(markdown_blocks(body), title=title if isinstance(title, str) else "",
                     metadata=meta)
