"""How far fusing the cross-encoder with the first stage can go on SciFact (issue 13's 0.76).

    .venv/bin/python bench/bench_ce_fusion.py

Needs bench_adapted_dense.py's SciFact index and CE score cache (`intentrank bench
ce-fusion`); the rows and the 5-fold choice of depth, weight and k:
bench/sections/ce-fusion.md.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_adapted_dense import CE, PIPELINES, CachedScorer, run_all
from report import DATA, ROOT, header, publish_tables, rank_scores, save_json, table

INDEX = ROOT / "runs" / "indexes" / "scifact-emb-scifact-train"  # made by bench_adapted_dense

DEPTHS = (10, 20, 30, 50, 100)
GRID = [(d, w, k) for d in (20, 30, 50, 100) for w in (0.5, 0.75, 1.0, 1.5, 2.0)
        for k in (10, 30, 60)]
FOLDS = 5


def weighted_rrf(first: list[str], by_ce: list[str], w: float, k: float) -> dict[str, float]:
    """``1/(k + rank in first) + w/(k + rank by the CE)`` (ranks from 1)."""
    out = {d: 1 / (k + i) for i, d in enumerate(first, 1)}
    for i, d in enumerate(by_ce, 1):
        out[d] = out.get(d, 0.0) + w / (k + i)
    return out


def measure() -> dict[str, Any]:
    import numpy as np

    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.measures.metrics import evaluate

    if not INDEX.is_dir():
        raise SystemExit(f"{INDEX}: no index; run bench/bench_adapted_dense.py first")
    queries, qrels = load_dataset(DATA / "scifact").split("test")
    runs = run_all(Index(INDEX), queries, ["first", "ce"], CachedScorer(), {
        "first": (None, PIPELINES["RRF(BM25, dense)"][1]), "ce": ("first", [CE])})
    first = {q: list(docs) for q, docs in runs["first"]["run"].items()}
    ce_score = runs["ce"]["run"]

    def by_ce(q: str, depth: int) -> list[str]:
        return sorted(first[q][:depth], key=lambda d: -ce_score[q][d])

    def per_query(run: dict[str, dict[str, float]]) -> dict[str, float]:
        return evaluate(run, qrels, ["nDCG@10"]).column("nDCG@10")

    def mean(col: dict[str, float]) -> float:
        return 100 * float(np.mean(list(col.values())))

    rows = {"first stage": mean(per_query({q: rank_scores(v) for q, v in first.items()}))}
    for d in DEPTHS:
        rows[f"CE alone, top {d}"] = mean(per_query({q: rank_scores(by_ce(q, d))
                                                     for q in first}))
        rows[f"RRF(first, CE of top {d}), k 60"] = mean(per_query(
            {q: weighted_rrf(first[q], by_ce(q, d), 1.0, 60) for q in first}))
    grid = {g: per_query({q: weighted_rrf(first[q], by_ce(q, g[0]), g[1], g[2])
                          for q in first}) for g in GRID}
    order = sorted(first)
    random.Random(0).shuffle(order)
    folds = [order[i::FOLDS] for i in range(FOLDS)]
    cv: dict[str, float] = {}
    chosen = []
    for fold in folds:
        rest = set(order) - set(fold)
        g = max(grid, key=lambda g: np.mean([v for q, v in grid[g].items() if q in rest]))
        chosen.append(list(g))
        cv.update({q: grid[g][q] for q in fold if q in grid[g]})
    best = max(grid, key=lambda g: np.mean(list(grid[g].values())))
    return {"n_queries": len(cv), "rows": rows, "cv": mean(cv), "cv_choices": chosen,
            "best_on_test": {"setting": list(best), "nDCG@10": mean(grid[best])}}


def section(r: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The section's header lines and table, and the values its prose
    (bench/sections/ce-fusion.md) reads."""
    rows, b = r["rows"], r["best_on_test"]
    fitted = (f"(the grid's best setting on all test queries, fitted to them: depth "
              f"{b['setting'][0]}, w {b['setting'][1]:g}, k {b['setting'][2]:g})")
    md = table(["ranking", "nDCG@10"], [
        *((name, f"{v:.2f}") for name, v in rows.items()),
        (f"weighted RRF, depth/weight/k chosen by {FOLDS}-fold cross-validation", f"{r['cv']:.2f}"),
        (fitted, f"({b['nDCG@10']:.2f})")], "|---|---:|")
    first, shipped = rows["first stage"], rows["RRF(first, CE of top 30), k 60"]
    alone = [v for k, v in rows.items() if k.startswith("CE alone")]
    return header() + "\n" + md, {
        "n_queries": str(r["n_queries"]), "first": f"{first:.2f}", "depths": str(len(alone)),
        "folds": "; ".join(f"depth {d}, w {w:g}, k {k:g}" for d, w, k in r["cv_choices"]),
        "below": str(sum(v < first for v in alone)), "best_alone": f"{max(alone):.2f}",
        "cv_gain": f"{r['cv'] - shipped:+.2f}", "shipped": f"{shipped:.2f}",
        "fitted_gain": f"{b['nDCG@10'] - shipped:+.2f}", "to_goal": f"{76 - shipped:.2f}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true")
    write = not ap.parse_args().no_write
    result = measure()
    save_json(ROOT / "runs" / "bench_ce_fusion.json", result, indent=2)
    publish_tables("ce-fusion", *section(result), write=write)


if __name__ == "__main__":
    main()
