"""One self-contained HTML page for an ablation report: its tables and three plots
(nDCG per configuration, latency breakdown per stage, swap rates per reranking stage).

Figures are drawn with matplotlib's Agg canvas (no pyplot state, no display) and embedded as
base64 PNG data URIs; the styles are inline, so the page needs no other file or network.
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from intentrank.eval.ablation import AblationReport, Table

STATIC_COLOUR, DYNAMIC_COLOUR = "#4C72B0", "#DD8452"
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
    from matplotlib.figure import Figure

    return Figure(figsize=(9, 4.2), dpi=100, layout="constrained")


def figure_png(fig: Figure) -> str:
    """A ``data:image/png;base64,...`` URI of a figure (Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def ndcg_figure(report: AblationReport) -> Figure:
    """Bars of the error metric (nDCG@10) per configuration, static and dynamic coloured."""
    m = report.error_metric
    fig = _figure()
    ax = fig.add_subplot()
    names = report.names
    values = [report.result(n).scores.aggregate[m] for n in names]
    colours = [DYNAMIC_COLOUR if report.result(n).weights == "dynamic" else STATIC_COLOUR
               for n in names]
    bars = ax.bar(range(len(names)), values, color=colours)
    ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(m)
    ax.set_title(f"{m} per configuration (blue: static weights, orange: dynamic)")
    ax.set_ylim(0, max(values + [0.01]) * 1.15)
    return fig


def latency_figure(report: AblationReport) -> Figure:
    """Stacked bars of mean ms/query per stage group for every configuration."""
    fig = _figure()
    ax = fig.add_subplot()
    names = report.names
    groups = [g for g in report.results[0].latency
              if any(r.latency.get(g, 0) > 0 for r in report.results)]
    groups += [g for r in report.results for g in r.latency
               if g not in groups and r.latency[g] > 0]
    bottom = [0.0] * len(names)
    for g in groups:
        vals = [report.result(n).latency.get(g, 0.0) for n in names]
        ax.bar(range(len(names)), vals, bottom=bottom, label=g)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("ms per query")
    ax.set_title("Latency breakdown per stage")
    ax.legend(fontsize=8)
    return fig


def swap_figure(report: AblationReport) -> Figure:
    """Mean position swaps and the share of queries whose top-1 changed, per reranking stage."""
    fig = _figure()
    left, right = fig.subplots(1, 2)
    names = list(report.swaps)
    labels = [f"{report.result(n).stage}\n{report.result(n).weights}" for n in names]
    colours = [DYNAMIC_COLOUR if report.result(n).weights == "dynamic" else STATIC_COLOUR
               for n in names]
    swaps = [report.swaps[n].mean_swaps for n in names]
    top1 = [100 * report.swaps[n].top1_changed for n in names]
    for ax, vals, title in ((left, swaps, f"mean swaps@{report.swap_depth} per query"),
                            (right, top1, "% queries whose top-1 changed")):
        bars = ax.bar(range(len(names)), vals, color=colours)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.set_xticks(range(len(names)), labels, fontsize=7)
        ax.set_title(title)
    if not names:
        left.text(0.5, 0.5, "no reranking stage ran", ha="center")
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


def render_html(report: AblationReport) -> str:
    """The whole page: summary, three plots and every table of the Markdown report."""
    figures = [("per-configuration quality", ndcg_figure(report)),
               ("latency breakdown", latency_figure(report)),
               ("swap rates", swap_figure(report))]
    imgs = "\n".join(f'<img alt="{html.escape(alt)}" src="{figure_png(fig)}">'
                     for alt, fig in figures)
    facts = [f"queries: {report.n_queries}; seed: {report.seed}; baseline: {report.baseline}",
             *report.notes]
    items = "\n".join(f"<li>{html.escape(f)}</li>" for f in facts)
    tables = "\n".join(table_html(t) for t in report.tables())
    title = html.escape(report.title)
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{title}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            f"<h1>{title}</h1>\n<ul>\n{items}\n</ul>\n<div class=\"figures\">\n{imgs}\n</div>\n"
            f"{tables}\n</body>\n</html>\n")


__all__ = ["figure_png", "latency_figure", "ndcg_figure", "render_html", "swap_figure",
           "table_html"]
