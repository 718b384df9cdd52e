"""The "Defaults" section of docs/benchmarks.md (issue 34), its text in
bench/sections/defaults.md, its inputs made by `intentrank bench defaults`:

    .venv/bin/python bench/bench_defaults.py render
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lib.results import ROOT, machine, p_value, publish_tables, table

DEFAULTS = ROOT / "runs" / "defaults"
REFORMULATION = ROOT / "runs" / "reformulation"
# every labelled conversational set with a corpus: (name in the table, result JSON)
SETS = [("CAsT 2021", "cast2021--qwen2.5-coder-1.5b--n60.json"),
        ("SciFact, generated (neighbour history)",
         "runs_conversations_scifact-3t-nb-scifact--qwen2.5-coder-1.5b--n60.json"),
        ("Cranfield, generated (neighbour history)",
         "runs_conversations_cranfield-3t-nb-cranfield--qwen2.5-coder-1.5b--n60.json")]
DEFAULT = "fused(raw+first_turn+history_terms+rewrite_full)"  # configs/conversation.yaml


def experiments() -> list[tuple[str, str]]:
    """(name, command) of each experiment run in runs/defaults, in benchmarks.yaml's order."""
    from intentrank.eval.benchmarks import load_spec

    return [(Path(s.outputs[0]).stem, s.command) for s in load_spec().steps()
            if s.outputs and s.outputs[0].startswith("runs/defaults/")]


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SystemExit(f"{path} is missing: `intentrank bench defaults` makes it")
    return json.loads(path.read_text())


def pipelines_table(name: str, command: str) -> tuple[str, str]:
    """One experiment's caption and systems: quality (its first three metrics but Recall@100;
    fuq's MRR and nDCG@3), p against its baseline on its primary metric, mean latency."""
    r = _load(DEFAULTS / f"{name}.json")
    primary = r["primary_metric"]
    metrics = ["MRR", "nDCG@3"] if name.startswith("fuq") else [
        m for m in r["metrics"] if m != "Recall@100"][:3]
    base = next(c for c in r["configs"] if c["name"] == r["baseline"])
    rows = [[c["name"], *(f"{c['aggregate'][m]:.4f}" for m in metrics),
             "-" if c is base else p_value(_column(base, primary), _column(c, primary)),
             f"{sum(c['latency_ms'].values()):.0f}"] for c in r["configs"]]
    return (f"`{command}` ({r['dataset']} {r['split']}, {r['n_queries']} queries; p: paired "
            f"randomization test on {primary} against {r['baseline']})",
            table(["pipeline", *metrics, "p", "ms/query"], rows))


def _column(config: dict[str, Any], metric: str) -> dict[str, float]:
    return {q: scores[metric] for q, scores in config["per_query"].items()}


def _methods(r: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Each method and fusion of a reformulation run: its name and [LLM, nDCG@10, the share
    of the raw-to-manual-rewrite gap it closes, p against the raw turn]."""
    lab, pq = r["labelled"], r["per_query"]
    raw, gold = lab["raw"]["nDCG@10"], lab["gold"]["nDCG@10"]
    return [(m, [r["llm"] if m.startswith(("rewrite", "hyde", "fused")) else "-",
                 f"{a['nDCG@10']:.3f}", f"{100 * (a['nDCG@10'] - raw) / (gold - raw):.0f}%",
                 "-" if m == "raw" else p_value(pq["raw"], pq[m])])
            for m, a in {**lab, **r.get("fused", {})}.items()]


def reformulation_table() -> tuple[str, dict[str, str]]:
    """CAsT 2021 contextual turns: each method and LLM (_methods), LLM seconds per turn."""
    runs = [_load(p) for p in sorted(REFORMULATION.glob("cast2021--*--n60.json"))]
    if not runs:
        raise SystemExit(f"no cast2021 n60 results in {REFORMULATION}")
    rows = []
    for r in runs:
        for m, (llm, *cells) in _methods(r):
            info = r["info"].get(m) or r["info"].get(f"fused:{m[6:-1]}", {})
            rows.append([llm, m, *cells, "-" if m.startswith("fused") else
                         f"{info.get('s_per_turn', 0.0):.1f}", info.get("unchanged", "-")])
    return (table(["LLM", "method", "nDCG@10", "gap closed", "p vs raw", "s/turn", "unchanged"],
                  rows), {"cast.turns": str(runs[0]["n_turns"]), "cast.seed": str(runs[0]["seed"])})


def every_set_table() -> tuple[str, str]:
    """The conversation default and its parts on every labelled set with a corpus (_methods),
    LLM s/turn, turns; and each run's command."""
    rows, commands = [], []
    for name, file in SETS:
        r = _load(REFORMULATION / file)
        info = r["info"]
        for m, cells in _methods(r):
            if m.startswith("fused"):  # its LLM methods' time + the stage's own (cached)
                cost = info[f"fused:{m[6:-1]}"]["s_per_turn"] + sum(
                    info[x]["s_per_turn"] for x in m[6:-1].split("+")
                    if x.startswith(("rewrite", "hyde")))
                unchanged = "-"
            else:
                cost, unchanged = info[m]["s_per_turn"], info[m]["unchanged"]
            rows.append([name, r["n_turns"], f"**{m} (default)**" if m == DEFAULT else m,
                         *cells, f"{cost:.1f}", unchanged])
        meta = r["command"].strip().removeprefix("- ").replace("\n- ", "; ")
        commands.append(f"- {name}: {meta}")
    return table(["set", "turns", "method", "LLM", "nDCG@10", "gap closed", "p vs raw",
                  "s/turn", "unchanged"], rows), "\n".join(commands)


def render() -> None:
    import bench_answers

    values, tables = {"machine": machine()}, []
    for name, command in experiments():
        values[name], text = pipelines_table(name, command)
        tables.append(text)
    answers, values["answers.commands"] = bench_answers.answers_table()
    cast, cast_values = reformulation_table()
    values |= cast_values
    sets, values["sets.runs"] = every_set_table()
    publish_tables("defaults", "\n\n".join([*tables, answers, cast, sets]), values)


if __name__ == "__main__":
    if sys.argv[1:] != ["render"]:
        raise SystemExit("usage: bench_defaults.py render")
    render()
