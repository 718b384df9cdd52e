"""The "Defaults" section of docs/benchmarks.md (issue 34): the numbers every default is
chosen by, rendered from stored results; the prose that reads them is bench/defaults.md.

    .venv/bin/python bench/bench_defaults.py render

Its inputs and the commands that make them: `intentrank bench defaults --dry-run`
(src/intentrank/benchmarks.yaml).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import ROOT, machine, p_value, write_section

DEFAULTS = ROOT / "runs" / "defaults"
REFORMULATION = ROOT / "runs" / "reformulation"
READING = Path(__file__).with_name("defaults.md")
# every labelled conversational set with a corpus: (name in the table, result JSON)
SETS = [("CAsT 2021", "cast2021--qwen2.5-coder-1.5b--n60.json"),
        ("SciFact, generated (neighbour history)",
         "runs_conversations_scifact-3t-nb-scifact--qwen2.5-coder-1.5b--n60.json"),
        ("Cranfield, generated (neighbour history)",
         "runs_conversations_cranfield-3t-nb-cranfield--qwen2.5-coder-1.5b--n60.json")]
DEFAULT = "fused(raw+history_terms+rewrite_full)"  # configs/conversation.yaml


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run the command in bench/bench_defaults.py's "
                         f"docstring first")
    return json.loads(path.read_text())


def pipelines_table(name: str, command: str, metrics: list[str] | None = None) -> list[str]:
    """One experiment's systems: quality, p against its baseline on its primary metric, mean
    latency (``metrics``: the columns, default its first three but Recall@100)."""
    r = _load(DEFAULTS / f"{name}.json")
    primary = r.get("primary_metric", "nDCG@10")
    metrics = metrics or [m for m in r["metrics"] if m != "Recall@100"][:3]
    base = next(c for c in r["configs"] if c["name"] == r["baseline"])
    lines = [f"`{command}` ({r['dataset']} {r['split']}, {r['n_queries']} queries; p: paired "
             f"randomization test on {primary} against {r['baseline']})\n",
             "| pipeline | " + " | ".join(metrics) + " | p | ms/query |",
             "|---|" + "---|" * (len(metrics) + 2)]
    for c in r["configs"]:
        p = "-" if c is base else p_value(_column(base, primary), _column(c, primary))
        lines.append(f"| {c['name']} | " + " | ".join(f"{c['aggregate'][m]:.4f}"
                                                      for m in metrics)
                     + f" | {p} | {sum(c['latency_ms'].values()):.0f} |")
    return lines


def _column(config: dict[str, Any], metric: str) -> dict[str, float]:
    return {q: scores[metric] for q, scores in config["per_query"].items()}


def reformulation_table() -> list[str]:
    """CAsT 2021 contextual turns: nDCG@10 of each method and LLM, the share of the raw-to-
    manual-rewrite gap it closes, p against the raw turn, LLM seconds per turn."""
    runs = [_load(p) for p in sorted(REFORMULATION.glob("cast2021--*--n60.json"))]
    if not runs:
        raise SystemExit(f"no cast2021 n60 results in {REFORMULATION}")
    lines = ["| LLM | method | nDCG@10 | gap closed | p vs raw | s/turn | unchanged |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lab, pq = r["labelled"], r["per_query"]
        raw, gold = lab["raw"]["nDCG@10"], lab["gold"]["nDCG@10"]
        rows = {**{m: a for m, a in lab.items()}, **r.get("fused", {})}
        for m, a in rows.items():
            v = a["nDCG@10"]
            p = "-" if m == "raw" else p_value(pq["raw"], pq[m])
            info = r["info"].get(m) or r["info"].get(f"fused:{m[6:-1]}", {})
            llm = r["llm"] if m.startswith(("rewrite", "hyde", "fused")) else "-"
            cost = "-" if m.startswith("fused") else f"{info.get('s_per_turn', 0.0):.1f}"
            lines.append(f"| {llm} | {m} | {v:.3f} | {100 * (v - raw) / (gold - raw):.0f}% | "
                         f"{p} | {cost} | {info.get('unchanged', '-')} |")
    first = runs[0]
    lines.append(f"\n{first['n_turns']} contextual turns of CAsT 2021 (seed {first['seed']}), "
                 f"BM25 depth 100 over its 235 canonical passages; gap closed = (method - raw "
                 f"turn) / (manual rewrite - raw turn); s/turn = LLM seconds per turn (cached "
                 f"replies at the time they took when generated); a fused row costs its "
                 f"rewrite's LLM time plus one BM25 search per method.")
    return lines


def every_set_table() -> list[str]:
    """The conversation default and its parts on every labelled set with a corpus: nDCG@10,
    gap closed, p against the raw turn, LLM s/turn, turns; then each run's command."""
    lines = ["| set | turns | method | LLM | nDCG@10 | gap closed | p vs raw | s/turn | "
             "unchanged |", "|---|---|---|---|---|---|---|---|---|"]
    commands = []
    for name, file in SETS:
        r = _load(REFORMULATION / file)
        lab, pq, info = r["labelled"], r["per_query"], r["info"]
        raw, gold = lab["raw"]["nDCG@10"], lab["gold"]["nDCG@10"]
        for m, a in {**lab, **r.get("fused", {})}.items():
            v = a["nDCG@10"]
            p = "-" if m == "raw" else p_value(pq["raw"], pq[m])
            if m.startswith("fused"):  # its LLM methods' time + the stage's own (cached)
                parts = m[6:-1].split("+")
                cost = info[f"fused:{m[6:-1]}"]["s_per_turn"] + sum(
                    info[x]["s_per_turn"] for x in parts if x.startswith(("rewrite", "hyde")))
                unchanged = "-"
            else:
                cost, unchanged = info[m]["s_per_turn"], info[m]["unchanged"]
            llm = r["llm"] if m.startswith(("rewrite", "hyde", "fused")) else "-"
            label = f"**{m} (default)**" if m == DEFAULT else m
            lines.append(f"| {name} | {r['n_turns']} | {label} | {llm} | {v:.3f} | "
                         f"{100 * (v - raw) / (gold - raw):.0f}% | {p} | {cost:.1f} | "
                         f"{unchanged} |")
        meta = r["command"].strip().removeprefix("- ").replace("\n- ", "; ")
        commands.append(f"- {name}: {meta}")
    return [*lines, "", "Runs (command; machine; date):", "", *commands]


def render() -> None:
    import bench_answers

    reading = READING.read_text()
    parts = ["## Defaults (issue 34)\n",
             "What each default rests on. Machine: " + machine() + "; the machine was shared "
             "with other jobs during these runs (load average 3-6 on 2 cores), so latencies "
             "are upper bounds; the cascade's was also measured alone (see the reading).\n",
             "### Shipped retrieval pipelines (SciFact)\n",
             *pipelines_table("shipped-pipelines", "intentrank experiment shipped-pipelines "
                              "--out runs/defaults/shipped-pipelines"),
             "\n### Which cascade (SciFact)\n",
             *pipelines_table("cascade-variants", "intentrank experiment cascade-variants "
                              "--out runs/defaults/cascade-variants"),
             "\n### Single-token listwise after the cascade (SciFact)\n",
             *pipelines_table("listwise-first", "intentrank experiment listwise-first "
                              "--out runs/defaults/listwise-first"),
             "\n### Follow-ups and multi-query with each embedded model (SciFact)\n",
             *[line for model in ("0.5b", "1.5b") for line in [
                 f"\nWith the {model.upper()}:\n",
                 *pipelines_table(f"fuq-{model}", f"intentrank --llm llamacpp:qwen2.5-coder-"
                                  f"{model} experiment fuq --sample 50 --without compression "
                                  f"--without listwise --without parents --out "
                                  f"runs/defaults/fuq-{model}", ["MRR", "nDCG@3"])]],
             "\n### Answers: abstention and citations\n",
             *bench_answers.table(),
             "\n### Conversational reformulation (CAsT 2021)\n",
             "`python bench/bench_reformulation.py measure cast2021 --n 60 --llm <LLM> "
             "--methods ... --fused ...` (the methods and fusions in the rows)\n",
             *reformulation_table(),
             "\n### Conversational reformulation: the default on every labelled set\n",
             "Contextual turns (seed 0, at most 60), BM25 depth 100; gold = the manual "
             "rewrite (CAsT) or the original query (generated sets, whose earlier turns are "
             "written from a related document that is not the gold one); gap closed = "
             "(method - raw turn) / (gold - raw turn); p: paired randomization test against "
             "the raw turn; s/turn: LLM seconds per turn (cached replies at the time they "
             "took when generated; a fused row adds its own BM25 searches).\n",
             *every_set_table(),
             "\n" + reading]
    write_section("defaults", "\n".join(parts) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["render"]:
        raise SystemExit("usage: bench_defaults.py render")
    render()
