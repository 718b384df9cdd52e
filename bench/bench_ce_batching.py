"""Does the bundled int8 cross-encoder's score depend on its batch? Before and after the fix.

    nice .venv/bin/python bench/bench_ce_batching.py [--k 30] [--only scifact ...]

The model is dynamically quantised (activations scaled by the range of the whole batch), so
batches of 8 (the old behaviour) and one pair at a time (today's) are compared on BM25's top k
of every test query in one run; what is reported: bench/sections/ce-batching.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import COLLECTIONS, candidate_pairs, log, open_index
from report import DATA, ROOT, header, publish, save_json

RESULTS = ROOT / "runs" / "bench_ce_batching.json"


def measure(name: str, k: int, tmp: Path) -> dict:
    """BM25 top-k -> bundled CE, batched (8) and per pair, on ``name``'s test queries."""
    from intentrank.data.dataset import load_dataset
    from intentrank.measures.metrics import evaluate
    from intentrank.models.cross_encoder import load_cross_encoder

    ds = load_dataset(DATA / name)
    queries, qrels = ds.split("test")
    idx = open_index(name, tmp)
    hits = idx.search_bm25([q.text for q in queries], k)
    pairs = candidate_pairs(idx, queries, k)
    scorer = load_cross_encoder()
    modes = {"batched": False, "per_pair": True}
    scores = {}
    for mode, per_pair in modes.items():
        scorer.per_pair = per_pair
        scores[mode] = scorer.predict(pairs, batch_size=8)
        log(f"{name} {mode}: scored {len(pairs)} pairs")
    # speed: the same 200 pairs, the two modes interleaved, best of 3 (robust to load drift)
    sample, best = pairs[:200], dict.fromkeys(modes, float("inf"))
    for _ in range(3):
        for mode, per_pair in modes.items():
            scorer.per_pair = per_pair
            t = time.perf_counter()
            scorer.predict(sample, batch_size=8)
            best[mode] = min(best[mode], time.perf_counter() - t)
    scorer.per_pair = True
    runs: dict[str, dict] = {m: {} for m in scores}
    top10_changed, start = 0, 0
    bm25_run = {}
    for q, h in zip(queries, hits, strict=True):
        ids = [idx.ids[r] for r in h.rows.tolist()]
        bm25_run[q.id] = {d: float(s) for d, s in zip(ids, h.scores.tolist(), strict=True)}
        tops = []
        for m, s in scores.items():
            part = s[start:start + len(ids)]
            runs[m][q.id] = {d: float(v) for d, v in zip(ids, part.tolist(), strict=True)}
            tops.append([ids[i] for i in np.argsort(-part, kind="stable")[:10]])
        top10_changed += tops[0] != tops[1]
        start += len(ids)
    diff = np.abs(scores["batched"] - scores["per_pair"])
    ev = {m: evaluate(r, qrels, ["nDCG@10"]) for m, r in runs.items()}
    from intentrank.measures.significance import paired_test

    test = paired_test(ev["batched"].column("nDCG@10"), ev["per_pair"].column("nDCG@10"),
                       "nDCG@10")
    return {"queries": len(queries), "pairs": len(pairs), "k": k,
            "bm25": evaluate(bm25_run, qrels, ["nDCG@10"]).aggregate["nDCG@10"],
            "ndcg": {m: e.aggregate["nDCG@10"] for m, e in ev.items()},
            "p": test.p_randomization,
            "pairs_per_s": {m: len(sample) / s for m, s in best.items()},
            "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "top10_changed": top10_changed}


def to_markdown(res: dict) -> str:
    lines = ["## Bundled cross-encoder: batched vs one pair at a time (reliability)", "",
             res["header"].rstrip(), "",
             f"BM25 top {res['k']} -> the bundled int8 cross-encoder, every test query, scored "
             "in batches of 8 pairs of similar length (how every bundled-CE number in this "
             "file measured before 2026-11-24 was scored) and one pair at a time (how it "
             "scores now), in the same run. nDCG@10 x100; p = paired randomization test; "
             "top-10 changed = queries whose top-10 list (order included) differs between "
             "the two modes; speed = the first 200 pairs, the two modes interleaved, best of "
             "3.", "",
             "| collection | queries | BM25 | CE batched | CE per pair | p | max abs score "
             "diff | mean abs diff | top-10 changed | speed per pair / batched |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in COLLECTIONS:
        if name not in res:
            continue
        r = res[name]
        lines.append(
            f"| {name} | {r['queries']} | {100 * r['bm25']:.2f} | "
            f"{100 * r['ndcg']['batched']:.2f} | {100 * r['ndcg']['per_pair']:.2f} | "
            f"{r['p']:.3f} | {r['max_abs_diff']:.4f} | {r['mean_abs_diff']:.4f} | "
            f"{r['top10_changed']}/{r['queries']} | "
            f"{r['pairs_per_s']['per_pair'] / r['pairs_per_s']['batched']:.2f}x "
            f"({r['pairs_per_s']['per_pair']:.0f} vs {r['pairs_per_s']['batched']:.0f} "
            "pairs/s) |")
    deltas = "; ".join(
        f"{n} {100 * (res[n]['ndcg']['per_pair'] - res[n]['ndcg']['batched']):+.2f} "
        f"(p {res[n]['p']:.3f})" for n in COLLECTIONS if n in res)
    lines += ["", f"nDCG@10 per pair minus batched: {deltas}."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=30, help="BM25 candidates reranked")
    ap.add_argument("--only", choices=COLLECTIONS, action="append")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    import tempfile

    res = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    res.update({"k": args.k, "header": header()})
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or COLLECTIONS:
            res[name] = measure(name, args.k, Path(tmp))
            log(json.dumps(res[name]))
            save_json(RESULTS, res)
    publish("ce-batching", to_markdown(res), not args.no_write)


if __name__ == "__main__":
    main()
