"""The shipped experiments re-run by the harness, cold and again from the reply cache (issue 12).

    intentrank experiment fuq --out runs/issue12/fuq-cold
    intentrank experiment fuq --out runs/issue12/fuq-replay
    intentrank experiment cascade-ablation --out runs/issue12/ablation-cold
    intentrank experiment cascade-ablation --out runs/issue12/ablation-replay
    .venv/bin/python bench/bench_replay.py runs/issue12

Reads the four JSON reports and writes docs/benchmarks.md's ``harness-replay`` section: for
each pipeline the numbers published before the redesign (docs/benchmarks.md, issues 4 and
5), the cold run and the replay; whether every query's every metric is identical between cold
and replay; and the cold seconds per query each run reports (a replayed reply is charged the
seconds it took when generated, so both should agree).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import ROOT, header, publish  # noqa: E402

# The follow-up table of docs/benchmarks.md before the redesign, "Follow-up-aware reranking /
# scifact (100 test queries)" (bench_fuq.py, 2026-11-23 07:19; no per-query report was kept).
FUQ_TABLE: dict[str, dict[str, float]] = {
    "FUQ (NF)": {"MRR": 0.6854, "nDCG@3": 0.6716, "MAP": 0.6728},
    "FUQ (F)": {"MRR": 0.6876, "nDCG@3": 0.6728, "MAP": 0.6723},
    "bm25": {"MRR": 0.7248, "nDCG@3": 0.7139, "MAP": 0.7087},
    "dense": {"MRR": 0.6979, "nDCG@3": 0.6802, "MAP": 0.6826},
    "cross-encoder": {"MRR": 0.6437, "nDCG@3": 0.6231, "MAP": 0.6320},
    "LLM listwise": {"MRR": 0.7000, "nDCG@3": 0.6871, "MAP": 0.6835},
    "multi-query": {"MRR": 0.7007, "nDCG@3": 0.6808, "MAP": 0.6840},
    "ensemble (RRF)": {"MRR": 0.7687, "nDCG@3": 0.7461, "MAP": 0.7462},
    "compression": {"MRR": 0.3167, "nDCG@3": 0.3089, "MAP": 0.2925},
    "parent document": {"MRR": 0.6913, "nDCG@3": 0.6850, "MAP": 0.6800},
}
# The published ablation's own report ("Cascade ablation: scifact, a seed-0 sample of 100 test
# queries, CE over top-30 fused with the first stage by RRF", bench_ablation.py --tag fast,
# 2026-11-23 10:04): Tables I and II come from its aggregates, per-query results too.
ABLATION_REPORT = ROOT / "docs" / "ablation" / "scifact-sample100-fast.json"
ABLATION_METRICS = ("nDCG@10", "MRR@10", "Recall@10")
WHY_DIFFERENT = (  # what changed in a pipeline's parts since the published run
    "Rows through the cross-encoder differ by construction: the published rows used a "
    "cross-encoder trained on SciFact train for 15 minutes (issue 3), which is gone; every "
    "`cross_encoder` step now defaults to the bundled general-purpose int8 reranker (issue "
    "13), scored one pair at a time (the batch-dependence fix). Rows after it (the listwise "
    "LLM sees the cross-encoder's top 5) differ with it. Bi-modal, Tri-modal and Tri-modal "
    "(dynamic) differ in the fourth decimal, on one query each: as the section on the "
    "LLM-free rows above explains, the dense scores of the index built since then move the "
    "min-max normalised fusion (the old engine gives the harness's numbers on the same "
    "index).")
COMMANDS = {"fuq": "intentrank experiment fuq", "ablation":
            "intentrank experiment cascade-ablation"}


def load(path: Path) -> dict[str, dict[str, Any]]:
    """Pipeline name -> its entry of an experiment's JSON report."""
    report = json.loads(path.read_text())
    return {c["name"]: c for c in report["configs"]}


def identical_queries(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int]:
    """Queries whose every metric is equal in both runs (to 1e-12), and all queries."""
    qa, qb = a["per_query"], b["per_query"]
    same = sum(1 for q in qa if q in qb and all(
        abs(v - qb[q].get(m, float("nan"))) <= 1e-12 for m, v in qa[q].items()))
    return same, len(set(qa) | set(qb))


def seconds_per_query(config: dict[str, Any]) -> float:
    """The run's cold seconds per query: the sum of its stages' ms/query."""
    return sum(config["latency_ms"].values()) / 1000


def published_numbers(report: dict[str, dict[str, Any]], metrics: tuple[str, ...]
                      ) -> dict[str, dict[str, float]]:
    """Pipeline -> ``metrics`` of a published run's report (as :func:`load` reads it)."""
    return {pipe: {m: c["aggregate"][m] for m in metrics} for pipe, c in report.items()}


def compare(published: dict[str, dict[str, float]], cold: dict[str, dict[str, Any]],
            replay: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """One Markdown table and its data: published / cold / replay per pipeline and metric."""
    metrics = list(next(iter(published.values())))
    head = (["pipeline"] + [f"{m} (published / cold / replay)" for m in metrics]
            + ["queries identical cold vs replay", "s/query cold / replay"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    data: dict[str, Any] = {}
    for pipe, old in published.items():
        if pipe not in cold or pipe not in replay:
            lines.append(f"| {pipe} | " + " | ".join("-" for _ in head[1:]) + " |")
            continue
        c, r = cold[pipe]["aggregate"], replay[pipe]["aggregate"]
        same, total = identical_queries(cold[pipe], replay[pipe])
        s_cold, s_replay = seconds_per_query(cold[pipe]), seconds_per_query(replay[pipe])
        cells = [f"{old[m]:.4f} / {c[m]:.4f} / {r[m]:.4f}" for m in metrics]
        lines.append(f"| {pipe} | " + " | ".join(cells)
                     + f" | {same}/{total} | {s_cold:.2f} / {s_replay:.2f} |")
        data[pipe] = {"published": old, "cold": {m: c[m] for m in metrics},
                      "replay": {m: r[m] for m in metrics}, "identical": [same, total],
                      "s_per_query": [s_cold, s_replay]}
    return "\n".join(lines), data


def summary(data: dict[str, Any]) -> str:
    """One paragraph: which pipelines reproduce the published numbers, and the replay."""
    same = [p for p, d in data.items()
            if all(abs(d["cold"][m] - v) < 5e-5 for m, v in d["published"].items())]
    other = [p for p in data if p not in same]
    replayed = [p for p, d in data.items() if d["identical"][0] == d["identical"][1]
                and all(d["cold"][m] == d["replay"][m] for m in d["cold"])]
    return (f"Cold run against the published table: {len(same)} of {len(data)} pipelines "
            f"reproduce the published numbers to 4 decimals"
            + (f"; different: {', '.join(other)}" if other else "") + ". Replay against "
            f"the cold run: {len(replayed)} of {len(data)} pipelines identical on every "
            f"query and metric"
            + (f"; not: {', '.join(p for p in data if p not in replayed)}"
               if len(replayed) < len(data) else "") + ".\n")


def moved_queries(published: dict[str, dict[str, Any]], cold: dict[str, dict[str, Any]],
                  source: Path, metric: str = "nDCG@10") -> str:
    """Per pipeline, the queries whose ``metric`` differs from the published run's report."""
    cells = []
    for pipe, old in published.items():
        if pipe in cold and old.get("per_query"):
            new = cold[pipe]["per_query"]
            moved = sorted(q for q in new if q in old["per_query"]
                           and abs(new[q][metric] - old["per_query"][q][metric]) > 1e-9)
            cells.append(f"{pipe} {len(moved)}" + (f" ({', '.join(moved)})"
                                                    if 0 < len(moved) <= 3 else ""))
    return (f"Queries whose {metric} differs from the published run's per-query report "
            f"(`{source.relative_to(ROOT)}`): " + "; ".join(cells) + ".\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, help="folder with <name>-cold.json and <name>-replay.json")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    parts = ["## The shipped experiments re-run by the harness, cold and from the reply cache "
             "(issue 12)\n", header(),
             "- experiments: " + "; ".join(f"`{c} --out {args.runs}/{n}-cold` then `... "
                                           f"--out {args.runs}/{n}-replay`"
                                           for n, c in COMMANDS.items()) + "\n",
             "Each experiment ran twice with the same reply cache: first cold (replies "
             "generated), then again (every reply replayed). *published*: the numbers in the "
             "sections of issues 4 and 5 above, measured by the engines the redesign "
             "replaced. s/query: the harness's cold latency (a replayed reply counts the "
             "seconds it took when generated).\n"]
    ablation = load(ABLATION_REPORT)
    published = {"fuq": (FUQ_TABLE, None),
                 "ablation": (published_numbers(ablation, ABLATION_METRICS), ablation)}
    for name, (numbers, report) in published.items():
        cold_path, replay_path = args.runs / f"{name}-cold.json", args.runs / f"{name}-replay.json"
        if not (cold_path.exists() and replay_path.exists()):
            parts.append(f"`{name}`: not run ({cold_path} or {replay_path} missing).\n")
            continue
        cold = load(cold_path)
        table, data = compare(numbers, cold, load(replay_path))
        parts.append(f"### `{COMMANDS[name]}` (run twice)\n\n{table}\n")
        parts.append(summary(data))
        if report is not None:
            parts.append(moved_queries(report, cold, ABLATION_REPORT))
    parts.append(WHY_DIFFERENT + "\n")
    publish("harness-replay", "\n".join(parts), write=not args.no_write)


if __name__ == "__main__":
    main()
