"""How far a 100-query sample's mean nDCG@10 can fall from the full split's (issue 5).

Reads the per-query scores of a full-split ablation report (``docs/ablation/<name>.json``) and
draws ``--draws`` samples of ``--size`` queries without replacement (fixed seed). Writes the
``sample-spread`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import ROOT, header, write_section


def sample_means(values: np.ndarray, size: int, draws: int, seed: int) -> np.ndarray:
    """Means of ``draws`` samples of ``size`` values drawn without replacement."""
    rng = np.random.default_rng(seed)
    return np.array([rng.choice(values, size, replace=False).mean() for _ in range(draws)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--report", type=Path,
                    default=ROOT / "docs" / "ablation" / "scifact-full-fast.json",
                    help="a full-split ablation report (JSON with per-query scores)")
    ap.add_argument("--size", type=int, default=100, help="queries per sample (the paper: 100)")
    ap.add_argument("--draws", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--metric", default="nDCG@10")
    args = ap.parse_args()
    report = json.loads(args.report.read_text())
    refs = report.get("references", {})
    rows = [f"| configuration | all {report['n_queries']} queries | sd of {args.size}-query means "
            f"| 95% of samples | paper | samples above paper |", "|---|---|---|---|---|---|"]
    for cfg in report["configs"]:
        values = np.array([q[args.metric] for q in cfg["per_query"].values()])
        means = sample_means(values, args.size, args.draws, args.seed)
        lo, hi = np.percentile(means, [2.5, 97.5])
        paper = refs.get(cfg["name"], {}).get(args.metric)
        above = f"{(means > paper).mean():.1%}" if paper is not None else "-"
        rows.append(f"| {cfg['name']} | {values.mean():.4f} | {means.std():.4f} | "
                    f"{lo:.4f}-{hi:.4f} | {paper if paper is not None else '-'} | {above} |")
    body = (f"## Spread of {args.size}-query samples ({args.metric}, issue 5)\n\n{header()}"
            f"- per-query scores: `{args.report.relative_to(ROOT)}`; {args.draws} samples "
            f"without replacement, seed {args.seed}\n\n" + "\n".join(rows) + "\n")
    write_section("sample-spread", body)
    print(body)


if __name__ == "__main__":
    main()
