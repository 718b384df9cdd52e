"""The sections of docs/benchmarks.md as stored results: every published number of a section
lives in ``bench/results/<section>.json``, its prose in ``bench/sections/<section>.md``, and
:func:`render` joins them into the section's text, byte for byte what docs/benchmarks.md holds
between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` (tests/test_bench_sections.py).

A stored result is JSON::

    {"section": "retrieval",
     "provenance": null,                      # or where the numbers come from when the raw
                                              #   run was not kept (shown in the section)
     "meta": [["command", "`python ...`"], ["machine", "..."], ["date", "..."]],
     "tables": [{"header": [...], "rule": "|---|---|", "rows": [[...], ...]}, ...]}

and its template is the section's Markdown with ``{{meta N}}`` for the value of the N-th
``- key: value`` header line (command, machine, date), ``{{table N}}`` for the N-th table,
``{{value NAME}}`` for a number the prose reads (the result's ``"values": {NAME: text}``, which
a script hands to :func:`store_tables`) and a ``{{provenance}}`` line (left out with the blank
line after it when the result has none).
The prose that reads the numbers is written by hand after a ``<!-- reading -->`` line of the
template: a script's rerun replaces the text before it and keeps it.

:func:`split` is the other direction: a section as a script writes it -> (stored result,
template); :func:`store` (``bench/lib/results.py``'s ``write_section``) stores both and renders the
section, :func:`store_tables` only the tables and values of a script whose prose lives in the
template.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RESULTS_DIR = "bench/results"
TEMPLATES_DIR = "bench/sections"
DOCS_FILE = "docs/benchmarks.md"
READING = "<!-- reading -->"  # in a template: the hand-written prose after it survives a rerun

_META = re.compile(r"^- (command|machine|date): (.+)$")
_PLACEHOLDER = re.compile(r"\{\{(meta|table) (\d+)\}\}|\{\{value ([\w.@-]+)\}\}")
_RULE = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+$")


class SectionError(ValueError):
    """A stored result and its template do not fit (a placeholder with no value, ...)."""


# -- tables -------------------------------------------------------------------------------------

def _cells(line: str) -> list[str]:
    """The cells of a table row ``| a | b |`` (escaped ``\\|`` kept inside a cell)."""
    inner = line[2:-2]
    return [c.replace("\0", "\\|") for c in inner.replace("\\|", "\0").split(" | ")]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table_markdown(table: dict[str, Any]) -> str:
    """A stored table as Markdown: header, rule, rows."""
    return "\n".join([_row(table["header"]), table["rule"],
                      *(_row(r) for r in table["rows"])])


def _table(lines: list[str]) -> dict[str, Any] | None:
    """A table from its lines, or None when storing it would not give the same text back."""
    if len(lines) < 2 or not _RULE.match(lines[1]) or not all(
            ln.startswith("| ") and ln.endswith(" |") for ln in (lines[0], *lines[2:])):
        return None
    table = {"header": _cells(lines[0]), "rule": lines[1], "rows": [_cells(r) for r in lines[2:]]}
    return table if table_markdown(table) == "\n".join(lines) else None


# -- splitting and rendering ------------------------------------------------------------------

def split(text: str, section: str = "", provenance: str | None = None
          ) -> tuple[dict[str, Any], str]:
    """A section's Markdown -> (stored result, template). Tables outside code fences become
    ``{{table N}}``, header lines ``- command|machine|date: value`` become ``{{meta N}}``;
    the rest is the template's text. ``render(*split(text)) == text``."""
    if "{{" in text:
        raise SectionError(f"section {section!r}: '{{{{' is kept for the template's "
                           f"placeholders; write it another way")
    lines = text.split("\n")
    out: list[str] = []
    meta: list[list[str]] = []
    tables: list[dict[str, Any]] = []
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            table = _table(lines[i:j])
            if table is not None:
                tables.append(table)
                out.append(f"{{{{table {len(tables)}}}}}")
            else:
                out.extend(lines[i:j])
            i = j
            continue
        found = None if fenced else _META.match(line)
        if found:
            meta.append([found.group(1), found.group(2)])
            out.append(f"- {found.group(1)}: {{{{meta {len(meta)}}}}}")
        else:
            out.append(line)
        i += 1
    result = {"section": section, "provenance": provenance, "meta": meta, "tables": tables}
    return result, "\n".join(out)


def provenance_line(provenance: str) -> str:
    return f"> **Provenance:** {provenance}"


def render(result: dict[str, Any], template: str) -> str:
    """The section's Markdown: the template with the stored values in place."""
    meta, tables = result.get("meta") or [], result.get("tables") or []
    named = result.get("values") or {}
    used_meta: set[int] = set()
    used_tables: set[int] = set()

    def value(match: re.Match[str]) -> str:
        if match.group(3):
            if match.group(3) not in named:
                raise SectionError(f"section {result.get('section')!r}: the template asks for "
                                   f"value {match.group(3)!r}, the stored result has none")
            return named[match.group(3)]
        kind, n = match.group(1), int(match.group(2))
        values = meta if kind == "meta" else tables
        if not 1 <= n <= len(values):
            raise SectionError(f"section {result.get('section')!r}: the template asks for "
                               f"{kind} {n}, the stored result has {len(values)}")
        (used_meta if kind == "meta" else used_tables).add(n)
        return values[n - 1][1] if kind == "meta" else table_markdown(values[n - 1])

    out: list[str] = []
    skip_blank = False
    for line in template.split("\n"):
        if skip_blank:
            skip_blank = False
            if not line:
                continue
        if line == "{{provenance}}":
            if result.get("provenance"):
                out.append(provenance_line(result["provenance"]))
            else:
                skip_blank = True
            continue
        out.append(_PLACEHOLDER.sub(value, line))
    if len(used_tables) != len(tables) or len(used_meta) != len(meta):
        raise SectionError(f"section {result.get('section')!r}: the template places "
                           f"{len(used_tables)} of {len(tables)} stored tables and "
                           f"{len(used_meta)} of {len(meta)} header values")
    return "\n".join(out)


# -- files --------------------------------------------------------------------------------------

def result_path(root: Path, section: str) -> Path:
    return root / RESULTS_DIR / f"{section}.json"


def template_path(root: Path, section: str) -> Path:
    return root / TEMPLATES_DIR / f"{section}.md"


def stored_sections(root: Path) -> list[str]:
    """The sections with stored results, sorted."""
    return sorted(p.stem for p in (root / RESULTS_DIR).glob("*.json"))


def load(root: Path, section: str) -> tuple[dict[str, Any], str]:
    result = json.loads(result_path(root, section).read_text(encoding="utf-8"))
    return result, template_path(root, section).read_text(encoding="utf-8")


def rendered(root: Path, section: str) -> str:
    """The section as its stored result and template render it."""
    return render(*load(root, section))


def save(root: Path, section: str, result: dict[str, Any], template: str) -> None:
    for path, text in ((result_path(root, section),
                        json.dumps(result, indent=1, ensure_ascii=False) + "\n"),
                       (template_path(root, section), template)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def markers(section: str) -> tuple[str, str]:
    return f"<!-- {section}:start -->", f"<!-- {section}:end -->"


def docs_sections(text: str) -> dict[str, str]:
    """Every ``<!-- NAME:start -->`` ... ``<!-- NAME:end -->`` section of a document: name ->
    the text between the marker lines (without the newline before the end marker)."""
    found = {}
    for m in re.finditer(r"^<!-- ([A-Za-z0-9][A-Za-z0-9._-]*):start -->\n(.*?)\n"
                         r"<!-- \1:end -->$", text, re.S | re.M):
        found[m.group(1)] = m.group(2)
    return found


def write_docs_section(path: Path, section: str, body: str) -> None:
    """Replace (or append) ``section`` of the document at ``path`` with ``body``."""
    start, end = markers(section)
    block = f"{start}\n{body}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else \
        text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def store(root: Path, section: str, markdown: str, docs: Path | None = None) -> str:
    """Store what a benchmark script measured (its section's Markdown): the numbers in
    ``bench/results/<section>.json``, the text in ``bench/sections/<section>.md``; then
    render the section into ``docs`` (default docs/benchmarks.md). Returns a warning when the
    text of the template changed (prose that reads the numbers may need a look), else ""."""
    result, template = split(markdown.strip(), section)
    old = template_path(root, section)
    before = old.read_text(encoding="utf-8") if old.exists() else None
    if before is not None and READING in before and READING not in template:
        template = template.rstrip("\n") + "\n\n" + before[before.index(READING):]
    changed = before is not None and before != template
    save(root, section, result, template)
    write_docs_section(docs or root / DOCS_FILE, section, render(result, template))
    return (f"{old.relative_to(root)} changed: check its prose against the new numbers "
            f"(git diff)") if changed else ""


def store_tables(root: Path, section: str, markdown: str, values: dict[str, str] | None = None,
                 docs: Path | None = None) -> str:
    """Store what a script measured when the section's prose lives in its template: the
    header lines and tables of ``markdown`` (any text between them is dropped) and ``values``
    go to ``bench/results/<section>.json``; the template ``bench/sections/<section>.md`` is
    kept (written from ``markdown`` only when there is none) and the section rendered into
    ``docs``. Returns the rendered section; a template that places other tables or values
    than were measured raises :class:`SectionError` (edit the template)."""
    result, template = split(markdown.strip(), section)
    if values:
        result["values"] = values
    path = template_path(root, section)
    if path.exists():
        template = path.read_text(encoding="utf-8")
    body = render(result, template)
    save(root, section, result, template)
    write_docs_section(docs or root / DOCS_FILE, section, body)
    return body


def render_into_docs(root: Path, section: str, docs: Path | None = None) -> bool:
    """Re-render one section from what is stored; True when the document changed."""
    path = docs or root / DOCS_FILE
    body = rendered(root, section)
    if docs_sections(path.read_text(encoding="utf-8")).get(section) == body:
        return False
    write_docs_section(path, section, body)
    return True


__all__ = ["RESULTS_DIR", "TEMPLATES_DIR", "SectionError", "docs_sections", "load", "render",
           "render_into_docs", "rendered", "split", "store", "store_tables", "stored_sections",
           "table_markdown", "write_docs_section"]
