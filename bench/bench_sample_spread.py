"""How far a 100-query sample's mean nDCG@10 can fall from the full split's (issue 5): 10,000
samples without replacement (seed 0) of the per-query scores of the full-split SciFact
ablation report; the ``sample-spread`` section (its prose: bench/sections/sample-spread.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import ROOT, header, publish_tables, table

REPORT, SIZE, DRAWS, METRIC = ROOT / "docs/ablation/scifact-full-fast.json", 100, 10_000, "nDCG@10"


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    report = json.loads(REPORT.read_text())
    rows = []
    for cfg in report["configs"]:
        values = np.array([q[METRIC] for q in cfg["per_query"].values()])
        rng = np.random.default_rng(0)
        means = np.array([rng.choice(values, SIZE, replace=False).mean() for _ in range(DRAWS)])
        lo, hi = np.percentile(means, [2.5, 97.5])
        paper = report.get("references", {}).get(cfg["name"], {}).get(METRIC)
        rows.append([cfg["name"], f"{values.mean():.4f}", f"{means.std():.4f}",
                     f"{lo:.4f}-{hi:.4f}", "-" if paper is None else paper,
                     "-" if paper is None else f"{(means > paper).mean():.1%}"])
    publish_tables("sample-spread", header() + "\n" + table(
        ["configuration", f"all {report['n_queries']} queries", f"sd of {SIZE}-query means",
         "95% of samples", "paper", "samples above paper"], rows))


if __name__ == "__main__":
    main()
