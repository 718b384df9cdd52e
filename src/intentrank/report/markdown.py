"""Markdown tables of an experiment result: the one table renderer of intentrank.

:func:`tables` turns an :class:`~intentrank.eval.harness.ExperimentResult` into the tables its
experiment file asks for (``report:``), numbered I, II, ... in that order:

* ``quality``: one row per pipeline (variants aside), best per column in bold, ``†`` marks a
  significant difference from the baseline;
* ``variants``: each ``variant_of`` pair (e.g. static against dynamic weights), with Δ and p
  on the first variant metric, fallbacks, and the per-query LLM weights when a stage logged
  them;
* ``swaps`` / ``degradations`` / ``worst``: what each child's added step changed: position
  swaps and top-1 changes, the queries it degraded on the primary metric, the worst ones;
* ``latency``: ms/query per latency column (cold: cached LLM replies at their original cost);
* ``significance``: Δ and p of every pipeline against the baseline;
* ``references``: published numbers beside ours;
* ``metrics``: any metrics for any pipelines (e.g. a k-sweep).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from intentrank.eval.harness import ExperimentResult
    from intentrank.eval.spec import TableSpec

ROMAN = ("I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII")


@dataclass
class Table:
    """A titled table of strings (``**x**`` marks bold) with an optional note below."""

    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""

    def to_markdown(self, heading: str = "###") -> str:
        lines = [f"{heading} {self.title}", ""] if self.title else []
        lines += ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
                  for row in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


def signed(x: float) -> str:
    """``+0.0123`` / ``-0.0123``, with no negative zero."""
    return f"{round(x, 4) + 0.0:+.4f}"


def _short(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def quality(res: ExperimentResult, t: TableSpec) -> Table:
    spec = res.spec
    metrics = t.metrics or spec.metrics
    rows_of = ([r for n in t.pipelines if (r := res.get(n)) is not None] if t.pipelines
               else [r for r in res.pipelines if r.spec.variant_of is None])
    best = {m: max(r.scores.aggregate[m] for r in rows_of) for m in metrics}
    rows = []
    for r in rows_of:
        cells = [r.name + (" (baseline)" if r.name == spec.baseline else "")]
        for m in metrics:
            v = r.scores.aggregate[m]
            test = res.tests.get(r.name, {}).get(m)
            cell = f"{v:.4f}" + ("†" if test is not None and test.significant(spec.alpha) else "")
            cells.append(f"**{cell}**" if abs(v - best[m]) < 1e-12 else cell)
        rows.append([*cells, f"{r.total_ms:.1f}"])
    tested = (f" † p < {spec.alpha} against {spec.baseline} (paired randomization test, "
              f"seed {res.seed});" if spec.baseline else "")
    return Table(t.title or "Retrieval quality", ["system", *metrics, "ms/query"], rows,
                 f"Best per column in bold;{tested} n = {res.n_queries} queries.")


def variants(res: ExperimentResult, t: TableSpec) -> Table | None:
    pairs = [r for r in res.pipelines if r.name in res.variant_tests]
    if not pairs:
        return None
    spec = res.spec
    m, cols = spec.variant_metrics[0], spec.variant_metrics
    rows = []
    for r in pairs:
        test = res.variant_tests[r.name][m]
        other = res.result(str(r.spec.variant_of))
        for x, mine in ((other, False), (r, True)):
            rows.append([other.name, x.spec.label, *(f"{x.scores.aggregate[c]:.4f}" for c in cols),
                         signed(test.delta) if mine else "",
                         f"{test.p_randomization:.4f}" if mine else "",
                         f"{x.counters.get('fallbacks', 0):.0f}" if mine else ""])
    notes = []
    for stage, s in res.llm_weights.items():
        fb = ", ".join(f"{k}: {v}" for k, v in sorted(s["fallbacks"].items())) or "none"
        notes.append(f"LLM weights ({stage}) over {s['queries']} queries: mean "
                     + "/".join(f"{w:.2f}" for w in s["mean_weights"])
                     + f"; {100 * s['llm_share']:.0f}% from the LLM, the rest from the rule "
                     f"fallback ({fb}).")
    notes.append(f"Δ and p: each variant against the configuration it varies, on {m}.")
    return Table(t.title or "Variants against the configuration they vary",
                 ["system", "variant", *cols, f"Δ {m}", "p", "fallbacks"], rows,
                 " ".join(notes))


def swaps(res: ExperimentResult, t: TableSpec) -> Table | None:
    if not res.swaps:
        return None
    m, depth = res.spec.primary_metric, res.spec.swap_depth
    rows = []
    for name, st in res.swaps.items():
        r = res.result(name)
        test = res.parent_tests[name][m] if m in res.parent_tests.get(name, {}) else None
        delta = r.scores.aggregate[m] - res.result(str(r.spec.parent)).scores.aggregate[m]
        rows.append([r.spec.adds or "-", name, str(r.spec.parent), f"{st.mean_swaps:.2f}",
                     f"{100 * st.top1_changed:.1f}%", str(st.queries), signed(delta),
                     f"{test.p_randomization:.3f}" if test else "-"])
    return Table(t.title or "Swap metrics per added step",
                 ["stage", "system", "input", f"mean swaps@{depth}", "top-1 changed",
                  "queries", f"Δ {m}", "p"], rows,
                 f"Mean swaps: adjacent swaps (Kendall inversions) turning the input order of "
                 f"the output's top {depth} into the output order, per query; Δ and p "
                 f"against the input.")


def degradations(res: ExperimentResult, t: TableSpec) -> Table | None:
    if not res.degradations:
        return None
    rows = [[res.result(n).spec.adds or "-", n, str(d.count), f"{100 * d.share:.1f}%",
             f"{100 * d.share_with_numbers:.1f}%", f"{100 * d.overall_share_with_numbers:.1f}%",
             f"{d.mean_length:.1f}", f"{d.overall_mean_length:.1f}"]
            for n, d in res.degradations.items()]
    return Table(t.title or f"Queries each added step degraded ({res.spec.primary_metric})",
                 ["stage", "system", "degraded", "share", "with numbers",
                  "with numbers (all)", "mean words", "mean words (all)"], rows,
                 "A query is degraded when its score after the stage is lower than before.")


def worst(res: ExperimentResult, t: TableSpec) -> Table | None:
    rows = [[name, str(w["query_id"]), _short(str(w["query"])), f"{w['before']:.4f}",
             f"{w['after']:.4f}"] for name, d in res.degradations.items() for w in d.worst]
    if not rows:
        return None
    return Table(t.title or f"Worst degraded queries per added step ({res.spec.primary_metric})",
                 ["system", "query id", "query", "before", "after"], rows)


def latency(res: ExperimentResult, t: TableSpec) -> Table:
    columns = [c for c in dict.fromkeys(c for r in res.pipelines for c in r.latency)
               if any(r.latency.get(c, 0) > 0 for r in res.pipelines)]
    rows = [[r.name, *(f"{r.latency.get(c, 0.0):.1f}" for c in columns), f"{r.total_ms:.1f}",
             f"{r.counters.get('llm_calls', 0):.0f}", f"{r.counters.get('llm_cache_hits', 0):.0f}"]
            for r in res.pipelines]
    cold = (" and LLM replies replayed from the on-disk cache at the time they took when "
            "generated (cold-run latency)") if res.spec.latency.cold else ""
    return Table(t.title or "Mean latency per stage (ms/query)",
                 ["system", *columns, "total", "LLM calls", "LLM cache hits"], rows,
                 "Each configuration is charged the full cost of every stage it runs, "
                 f"including stage outputs replayed from another configuration's run{cold}.")


def significance(res: ExperimentResult, t: TableSpec) -> Table | None:
    if not res.tests:
        return None
    spec = res.spec
    metrics = t.metrics or spec.test_metrics
    rows = []
    for name, tests in res.tests.items():
        if t.pipelines and name not in t.pipelines:
            continue
        cells = [f"{signed(tests[m].delta)} (p={tests[m].p_randomization:.3f})"
                 + ("†" if tests[m].significant(spec.alpha) else "") for m in metrics]
        rows.append([name, *cells])
    return Table(t.title or f"Paired significance against {spec.baseline}",
                 ["system", *(f"Δ {m}" for m in metrics)], rows,
                 f"Δ = system - baseline; p from a paired randomization test "
                 f"(sign flips, seed {res.seed}); † p < {spec.alpha}.")


def references(res: ExperimentResult, t: TableSpec) -> Table | None:
    refs = res.spec.references
    if not refs:
        return None
    keys = sorted({k for v in refs.values() for k in v})
    rows = []
    for name, ref in refs.items():
        ours = res.get(name)
        row = [name]
        for k in keys:
            mine = (ours.total_ms / 1000 if k == "s/query" else ours.scores.aggregate.get(k)
                    ) if ours else None
            row += [f"{mine:.4f}" if mine is not None else "-",
                    f"{ref[k]:.4f}" if k in ref else "-"]
        rows.append(row)
    header = ["system"] + [c for k in keys for c in (f"{k} (ours)", f"{k} (paper)")]
    return Table(t.title or "Reference: published numbers beside ours", header, rows,
                 res.spec.reference_source)


def metrics(res: ExperimentResult, t: TableSpec) -> Table:
    names = t.pipelines or res.names
    cols = t.metrics or res.spec.metrics
    rows = [[n, *(f"{res.result(n).scores.aggregate[m]:.4f}" for m in cols)]
            for n in names if res.get(n) is not None]
    return Table(t.title or "Metrics", ["system", *cols], rows)


RENDERERS = {"quality": quality, "variants": variants, "swaps": swaps,
             "degradations": degradations, "worst": worst, "latency": latency,
             "significance": significance, "references": references, "metrics": metrics}


def tables(res: ExperimentResult) -> list[Table]:
    """The tables the experiment's ``report`` names (those with nothing to show are left
    out), titled ``Table I. ...``, ``Table II. ...`` in order."""
    out = [t for spec in res.spec.report if (t := RENDERERS[spec.kind](res, spec)) is not None]
    for i, t in enumerate(out):
        t.title = f"Table {ROMAN[i] if i < len(ROMAN) else i + 1}. {t.title}"
    return out


def header_lines(res: ExperimentResult) -> list[str]:
    """The facts above the tables: queries, seed, baseline, pipelines and notes."""
    base = f"; baseline: {res.baseline}" if res.baseline else ""
    return [f"queries: {res.n_queries}; seed: {res.seed}{base}",
            f"configurations: {', '.join(res.names)}", *res.notes]


def render(res: ExperimentResult) -> str:
    """The whole report: title, facts and every table."""
    head = [f"# {res.title}", "", *(f"- {line}" for line in header_lines(res))]
    return "\n".join(head) + "\n\n" + "\n\n".join(t.to_markdown() for t in tables(res)) + "\n"


__all__ = ["RENDERERS", "Table", "header_lines", "render", "signed", "tables"]
