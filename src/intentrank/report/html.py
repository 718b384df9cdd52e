"""One self-contained HTML page for an experiment result: its tables and up to three plots
(the primary metric per pipeline, latency breakdown per stage, swap rates per added step).

Figures are drawn with matplotlib's Agg canvas (no pyplot state, no display) and embedded as
base64 PNG data URIs; the styles are inline, so the page needs no other file or network.
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import TYPE_CHECKING

from intentrank.extras import require
from intentrank.report.markdown import Table, header_lines, tables

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from intentrank.eval.harness import ExperimentResult

BASE_COLOUR, VARIANT_COLOUR = "#4C72B0", "#DD8452"
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_STRONG = r"<strong>\1</strong>"
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; line-height: 1.4; }
table { border-collapse: collapse; margin: 0.5rem 0 0.3rem; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f2f2f2; }
td:first-child, th:first-child { text-align: left; }
.note { color: #555; font-size: 0.85rem; margin-bottom: 1.5rem; }
.figures img { max-width: 100%; margin: 0.5rem 0 1.5rem; }
.scroll { overflow-x: auto; }
"""


def _figure() -> Figure:
    figure = require("matplotlib.figure", "report", "plots in HTML reports")
    return figure.Figure(figsize=(9, 4.2), dpi=100, layout="constrained")


def figure_png(fig: Figure) -> str:
    """A ``data:image/png;base64,...`` URI of a figure (Agg canvas)."""
    agg = require("matplotlib.backends.backend_agg", "report", "plots in HTML reports")
    agg.FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _colours(res: ExperimentResult, names: list[str]) -> list[str]:
    return [VARIANT_COLOUR if res.result(n).spec.variant_of else BASE_COLOUR for n in names]


def metric_figure(res: ExperimentResult) -> Figure:
    """Bars of the primary metric per pipeline (variants in orange)."""
    m = res.spec.primary_metric
    fig = _figure()
    ax = fig.add_subplot()
    names = res.names
    values = [res.result(n).scores.aggregate[m] for n in names]
    bars = ax.bar(range(len(names)), values, color=_colours(res, names))
    ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(m)
    ax.set_title(f"{m} per configuration (orange: variants)")
    ax.set_ylim(0, max(values + [0.01]) * 1.15)
    return fig


def latency_figure(res: ExperimentResult) -> Figure:
    """Stacked bars of mean ms/query per latency column for every pipeline."""
    fig = _figure()
    ax = fig.add_subplot()
    names = res.names
    groups = [g for g in dict.fromkeys(g for r in res.pipelines for g in r.latency)
              if any(r.latency.get(g, 0) > 0 for r in res.pipelines)]
    bottom = [0.0] * len(names)
    for g in groups:
        vals = [res.result(n).latency.get(g, 0.0) for n in names]
        ax.bar(range(len(names)), vals, bottom=bottom, label=g)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("ms per query")
    ax.set_title("Latency breakdown per stage")
    if groups:
        ax.legend(fontsize=8)
    return fig


def swap_figure(res: ExperimentResult) -> Figure:
    """Mean position swaps and the share of queries whose top-1 changed, per added step."""
    fig = _figure()
    left, right = fig.subplots(1, 2)
    names = list(res.swaps)
    labels = [f"{res.result(n).spec.adds or n}\n{res.result(n).spec.label}" for n in names]
    swaps = [res.swaps[n].mean_swaps for n in names]
    top1 = [100 * res.swaps[n].top1_changed for n in names]
    for ax, vals, title in ((left, swaps, f"mean swaps@{res.spec.swap_depth} per query"),
                            (right, top1, "% queries whose top-1 changed")):
        bars = ax.bar(range(len(names)), vals, color=_colours(res, names))
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.set_xticks(range(len(names)), labels, fontsize=7)
        ax.set_title(title)
    return fig


def table_html(table: Table) -> str:
    """A table as HTML; cells are escaped and ``**x**`` becomes bold."""
    def cell(text: str, tag: str) -> str:
        return f"<{tag}>{_BOLD.sub(_STRONG, html.escape(text))}</{tag}>"

    head = "".join(cell(h, "th") for h in table.header)
    body = "\n".join("<tr>" + "".join(cell(c, "td") for c in row) + "</tr>"
                     for row in table.rows)
    note = f'<p class="note">{html.escape(table.note)}</p>' if table.note else ""
    return (f"<h3>{html.escape(table.title)}</h3>\n<div class=\"scroll\"><table>\n"
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>\n{note}")


def render(res: ExperimentResult) -> str:
    """The whole page: facts, three plots and every table of the Markdown report."""
    figures = [("per-configuration quality", metric_figure(res)),
               ("latency breakdown", latency_figure(res))]
    if res.swaps:
        figures.append(("swap rates", swap_figure(res)))
    imgs = "\n".join(f'<img alt="{html.escape(alt)}" src="{figure_png(fig)}">'
                     for alt, fig in figures)
    items = "\n".join(f"<li>{html.escape(f)}</li>" for f in header_lines(res))
    body = "\n".join(table_html(t) for t in tables(res))
    title = html.escape(res.title)
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{title}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            f"<h1>{title}</h1>\n<ul>\n{items}\n</ul>\n<div class=\"figures\">\n{imgs}\n</div>\n"
            f"{body}\n</body>\n</html>\n")


__all__ = ["figure_png", "latency_figure", "metric_figure", "render", "swap_figure",
           "table_html"]
