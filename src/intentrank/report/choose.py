"""The report of ``intentrank choose``: Markdown, and one HTML page with the candidates'
bootstrap intervals as a plot (matplotlib's Agg canvas, :func:`~.html.figure_png`)."""

from __future__ import annotations

import html
from typing import Any

from intentrank.extras import require
from intentrank.report.html import figure_png

# an intentrank.eval.choose.Recommendation (not imported: eval.choose imports this module)
Recommendation = Any


def _rows(rec: Recommendation) -> list[list[str]]:
    s = rec.selection
    rows = []
    for e in s.estimates:
        mark = " (chosen)" if e.name == s.chosen else "" if e.eligible else \
            " (not beyond noise of its base: not eligible)"
        params = rec.scored.params[e.name]
        rows.append([f"{e.name}{mark}", f"{e.mean:.4f}", f"[{e.low:.4f}, {e.high:.4f}]",
                     f"{e.p_best:.2f}", f"{e.cost:.1f}",
                     ", ".join(f"{k}={v}" for k, v in params.items()) or "-"])
    return rows


HEADER = ["candidate", "nDCG@10", "95% interval", "P(best)", "ms/query", "setting"]


def render_markdown(rec: Recommendation) -> str:
    s = rec.selection
    d = rec.to_dict()
    lines = [f"# Pipeline choice: {s.chosen}", "",
             f"- chosen: **{s.chosen}** ({s.reason}); P(chosen is best) {s.p_chosen_best:.2f}"
             f" ({'confident' if s.confident else 'not confident'})",
             f"- best vs runner-up: {s.best} vs {s.runner_up}, paired randomization test "
             f"p = {s.p_value:.4f}",
             f"- questions: {s.n_queries} ({', '.join(f'{k} {v}' for k, v in d['kinds'].items())}"
             f"); {d['copied_share']:.0%} of question words occur in the source",
             "- run with: `-p pipeline.yaml`", ""]
    if s.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in s.warnings), ""]
    lines += ["## Candidates", "", "| " + " | ".join(HEADER) + " |",
              "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(rec)]
    kinds = sorted(d["kinds"])
    lines += ["", "## nDCG@10 per question kind", "",
              "Each kind's own mean; the estimate above weighs the kinds by their counts.", "",
              "| candidate | " + " | ".join(f"{k} ({d['kinds'][k]})" for k in kinds) + " |",
              "|---|" + "---|" * len(kinds)]
    for e in s.estimates:
        lines.append(f"| {e.name} | " + " | ".join(f"{rec.by_kind[e.name][k]:.4f}"
                                                  for k in kinds) + " |")
    return "\n".join(lines) + "\n"


def interval_figure(rec: Recommendation) -> Any:
    """Each candidate's mean and 95% bootstrap interval (the chosen one in orange)."""
    figure = require("matplotlib.figure", "report", "plots in HTML reports")
    s = rec.selection
    ests = list(reversed(s.estimates))
    fig = figure.Figure(figsize=(8, 0.45 * len(ests) + 1.2), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for i, e in enumerate(ests):
        colour = "#dd8452" if e.name == s.chosen else "#4c72b0"
        ax.plot([e.low, e.high], [i, i], color=colour, lw=2)
        ax.plot([e.mean], [i], "o", color=colour)
    ax.set_yticks(range(len(ests)), [e.name for e in ests], fontsize=8)
    ax.set_xlabel("nDCG@10 on generated questions (95% bootstrap interval)")
    ax.set_title(f"{s.n_queries} questions; chosen: {s.chosen}")
    return fig


def render_html(rec: Recommendation) -> str:
    md = render_markdown(rec)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in _rows(rec))
    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in rec.selection.warnings)
    intro = html.escape(md.split("## ")[0]).replace("\n", "<br>\n")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Pipeline choice"
            f"</title></head><body><div>{intro}</div>"
            + (f"<h2>Warnings</h2><ul>{warnings}</ul>" if warnings else "")
            + f"<img src='{figure_png(interval_figure(rec))}' alt='intervals'>"
            f"<table border='1'><tr>{head}</tr>{body}</table></body></html>\n")


__all__ = ["interval_figure", "render_html", "render_markdown"]
