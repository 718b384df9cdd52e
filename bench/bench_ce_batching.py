"""Does the bundled int8 cross-encoder's score depend on its batch? Before and after the fix.

    nice .venv/bin/python bench/bench_ce_batching.py [--only scifact ...]

The model is dynamically quantised (activations scaled by the range of the whole batch), so
batches of 8 (the old behaviour) and one pair at a time (today's) are compared on BM25's top 30
of every test query in one run; what is reported: bench/sections/ce-batching.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import COLLECTIONS, best_of, candidate_pairs, log, open_index
from report import DATA, ROOT, header, publish_tables, save_json, table

RESULTS = ROOT / "runs" / "bench_ce_batching.json"
K = 30  # BM25 candidates reranked


def measure(name: str, tmp: Path) -> dict:
    """BM25 top-K -> bundled CE, batched (8) and per pair, on ``name``'s test queries."""
    from intentrank.data.dataset import load_dataset
    from intentrank.measures.metrics import evaluate
    from intentrank.measures.significance import paired_test
    from intentrank.models.cross_encoder import load_cross_encoder

    queries, qrels = load_dataset(DATA / name).split("test")
    idx = open_index(name, tmp)
    hits = idx.search_bm25([q.text for q in queries], K)
    pairs, scorer = candidate_pairs(idx, queries, K), load_cross_encoder()
    items = scorer.items  # the per-pair runner; None: length-sorted batches of 8

    def scores(per_pair: bool, sample: list | None = None) -> np.ndarray:
        scorer.items = items if per_pair else None
        return scorer.predict(sample or pairs, batch_size=8)

    modes = {"batched": False, "per_pair": True}
    scored = {mode: scores(per_pair) for mode, per_pair in modes.items()}
    # speed: the same 200 pairs, the two modes interleaved, best of 3 (robust to load drift)
    best = best_of({m: lambda p=p: scores(p, pairs[:200]) for m, p in modes.items()})[0]
    scorer.items = items
    runs: dict[str, dict] = {m: {} for m in modes}
    bm25_run, top10_changed, start = {}, 0, 0
    for q, h in zip(queries, hits, strict=True):
        ids = [idx.ids[r] for r in h.rows.tolist()]
        bm25_run[q.id] = dict(zip(ids, h.scores.tolist(), strict=True))
        parts = [s[start:start + len(ids)] for s in scored.values()]
        for m, part in zip(modes, parts, strict=True):
            runs[m][q.id] = dict(zip(ids, part.tolist(), strict=True))
        top10_changed += len({tuple(np.argsort(-p, kind="stable")[:10]) for p in parts}) > 1
        start += len(ids)
    diff = np.abs(scored["batched"] - scored["per_pair"])
    ev = {m: evaluate(r, qrels, ["nDCG@10"]) for m, r in runs.items()}
    test = paired_test(ev["batched"].column("nDCG@10"), ev["per_pair"].column("nDCG@10"),
                       "nDCG@10")
    return {"queries": len(queries), "pairs": len(pairs), "k": K,
            "bm25": evaluate(bm25_run, qrels, ["nDCG@10"]).aggregate["nDCG@10"],
            "ndcg": {m: e.aggregate["nDCG@10"] for m, e in ev.items()},
            "p": test.p_randomization,
            "pairs_per_s": {m: min(len(pairs), 200) / s for m, s in best.items()},
            "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "top10_changed": top10_changed}


def section(res: dict) -> tuple[str, dict[str, str]]:
    """The header lines (machine, date: the template names the commands) and the table, and
    the nDCG@10 differences the prose reads."""
    rows, deltas = [], []
    for name in (n for n in COLLECTIONS if n in res):
        r, speed = res[name], res[name]["pairs_per_s"]
        nd = r["ndcg"]
        rows.append([name, r["queries"], f"{100 * r['bm25']:.2f}", f"{100 * nd['batched']:.2f}",
                     f"{100 * nd['per_pair']:.2f}", f"{r['p']:.3f}", f"{r['max_abs_diff']:.4f}",
                     f"{r['mean_abs_diff']:.4f}", f"{r['top10_changed']}/{r['queries']}",
                     f"{speed['per_pair'] / speed['batched']:.2f}x ({speed['per_pair']:.0f} vs "
                     f"{speed['batched']:.0f} pairs/s)"])
        deltas.append(f"{name} {100 * (nd['per_pair'] - nd['batched']):+.2f} (p {r['p']:.3f})")
    md = table(["collection", "queries", "BM25", "CE batched", "CE per pair", "p",
                "max abs score diff", "mean abs diff", "top-10 changed",
                "speed per pair / batched"], rows)
    return res["header"].split("\n", 1)[1] + "\n" + md, {"deltas": "; ".join(deltas)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=COLLECTIONS, action="append")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    res = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    res.update({"k": K, "header": header()})
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or COLLECTIONS:
            res[name] = measure(name, Path(tmp))
            log(json.dumps(res[name]))
            save_json(RESULTS, res)
    publish_tables("ce-batching", *section(res), write=not args.no_write)


if __name__ == "__main__":
    main()
