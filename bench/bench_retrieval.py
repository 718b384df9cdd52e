"""Retrieval quality and speed of every leg and fusion on the shared collections.

    .venv/bin/python bench/bench_retrieval.py --json runs/bench_retrieval.json
    .venv/bin/python bench/bench_retrieval.py --qps-only      # BM25 q/s on indexes/<name>

Each collection runs in its own process (peak memory per collection); index builds skip the
embedding cache, so dense build time is real encoding time. Prose: bench/sections/retrieval.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import best_of  # also sets HF_HUB_OFFLINE, TOKENIZERS_PARALLELISM
from report import DATA, ROOT, header, publish_tables, run_each_in_subprocess, save_json, table

COLLECTIONS = ("scifact", "cranfield", "vaswani")
SYSTEMS = ["bm25", "dense", "tfidf", "sparse", "graph", "rrf", "weighted"]
ANCHORS = {  # published SciFact nDCG@10 (x100)
    "bm25": "67.89 (Anserini flat), 68.7 (bm25s)",
    "dense": "64.51 (MTEB, all-MiniLM-L6-v2)",
}


def bm25_qps(idx, queries, repeats: int = 15) -> dict[str, float]:
    """Queries/s of BM25 through intentrank vs bm25s called directly (same tokenizer, k=100)."""
    import bm25s
    import Stemmer

    from intentrank.retrieve.retrievers import BM25Retriever

    s, texts, stage = idx.settings.bm25, [q.text for q in queries], BM25Retriever(idx, depth=100)
    stem = Stemmer.Stemmer(s.stemmer)

    def direct() -> None:
        toks = bm25s.tokenize(texts, stopwords=s.stopwords, stemmer=stem, show_progress=False,
                              return_ids=False)
        idx.bm25.retrieve(toks, k=100, show_progress=False)

    best = best_of({"bm25s": direct, "intentrank": lambda: stage.run(queries)}, repeats)[0]
    return {k: len(queries) / v for k, v in best.items()}


def run_one(name: str) -> dict:
    from intentrank.core.config import resolve_pipeline
    from intentrank.data.dataset import load_dataset
    from intentrank.index import build_index
    from intentrank.measures.metrics import evaluate
    from intentrank.pipelines import pipeline_from_config

    ds = load_dataset(DATA / name)
    queries, qrels = ds.split("test")
    with tempfile.TemporaryDirectory() as tmp:
        idx = build_index(ds.corpus(), Path(tmp) / name, embedding_cache=False)
        ds.check_qrels(set(idx.ids))
        rows = {}
        for system in SYSTEMS:
            pipe = pipeline_from_config(resolve_pipeline(system), index=idx)
            pipe.run(queries[:2])  # warm-up: model load, lazy leg load
            res = pipe.run(queries)
            secs = sum(st.seconds for st in res.trace.stages.values())
            rows[system] = {**evaluate(res.to_run(), qrels, ["nDCG@10", "Recall@100"]).aggregate,
                            "ms_per_query": 1000 * secs / len(queries)}
        return {"collection": name, "n_docs": len(idx), "n_queries": len(queries),
                "systems": rows, "build_seconds": dict(idx.manifest["build_seconds"]),
                "bm25_qps": bm25_qps(idx, queries),
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def overhead(q: dict[str, float]) -> str:
    return f"{100 * (q['bm25s'] / q['intentrank'] - 1):+.1f}%"


def tables(results: list[dict]) -> str:
    """The header lines and both tables of section ``retrieval``."""
    quality = table(["system", *(f"{r['collection']} {m}" for r in results
                                 for m in ("nDCG@10", "R@100")), "SciFact published nDCG@10"],
                    [[system, *(f"{100 * r['systems'][system][m]:.2f}" for r in results
                                for m in ("nDCG@10", "Recall@100")), ANCHORS.get(system, "")]
                     for system in SYSTEMS])
    speed = []
    for r in results:
        b, q, s = r["build_seconds"], r["bm25_qps"], r["systems"]
        speed.append([r["collection"], r["n_docs"], r["n_queries"],
                      " / ".join(f"{b[k]:.1f}" for k in ("bm25", "dense", "tfidf", "graph")),
                      f"{r['n_docs'] / b['dense']:.0f}", f"{q['intentrank']:.0f}",
                      f"{q['bm25s']:.0f}", overhead(q),
                      " / ".join(f"{s[k]['ms_per_query']:.1f}"
                                 for k in ("dense", "rrf", "weighted")),
                      f"{r['peak_rss_mib']:.0f}"])
    return "\n\n".join([header(), quality, table(
        ["collection", "docs", "queries", "build s (bm25 / dense / tfidf / graph)",
         "dense passages/s", "BM25 q/s intentrank", "BM25 q/s bm25s direct", "overhead",
         "ms/query dense / rrf / weighted", "peak RSS MiB"], speed)])


def qps_only(write: bool) -> None:
    """BM25 q/s, intentrank vs bm25s directly, best of 30 on the built indexes (section
    retrieval-qps: a quick run for an idle machine; the full run shares it with index builds)."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index

    rows = []
    for name in COLLECTIONS:
        queries = load_dataset(DATA / name).split("test")[0]
        q = bm25_qps(Index.open(ROOT / "indexes" / name), queries, repeats=30)
        rows.append([name, len(queries), f"{q['intentrank']:.0f}", f"{q['bm25s']:.0f}",
                     overhead(q)])
    publish_tables("retrieval-qps", header() + "\n" + table(
        ["collection", "queries", "BM25 q/s intentrank", "BM25 q/s bm25s direct", "overhead"],
        rows), write=write)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--json", type=Path, help="also save raw results here")
    ap.add_argument("--qps-only", action="store_true",
                    help="only BM25 q/s, intentrank vs bm25s, on the built indexes/<name>")
    args = ap.parse_args()
    if args.qps_only:
        qps_only(not args.no_write)
    elif args.one:
        print(json.dumps(run_one(args.one)))
    else:
        results = run_each_in_subprocess(__file__, list(COLLECTIONS))
        publish_tables("retrieval", tables(results), write=not args.no_write)
        if args.json:
            save_json(args.json, results)


if __name__ == "__main__":
    main()
