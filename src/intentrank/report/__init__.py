"""Reports of experiments: Markdown tables (:mod:`.markdown`), a self-contained HTML page
with plots (:mod:`.html`) and JSON (:mod:`.json`), all renderings of one
:class:`~intentrank.eval.harness.ExperimentResult`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from intentrank.eval.harness import ExperimentResult

SUFFIXES = (".md", ".html", ".json")


def report_paths(out: str | Path) -> list[Path]:
    """``<out>.md``, ``<out>.html`` and ``<out>.json`` (``out`` with or without a suffix)."""
    out = Path(out)
    base = out.with_suffix("") if out.suffix in SUFFIXES else out
    return [base.with_name(base.name + ext) for ext in SUFFIXES]


def write_report(result: ExperimentResult, out: str | Path) -> list[Path]:
    """Write the Markdown, HTML and JSON reports next to each other; returns their paths."""
    from intentrank.report import html, json, markdown

    paths = report_paths(out)
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    for path, module in zip(paths, (markdown, html, json), strict=True):
        path.write_text(module.render(result), encoding="utf-8")
    return paths


__all__ = ["SUFFIXES", "report_paths", "write_report"]
