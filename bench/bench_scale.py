"""Scale-out benchmark: ANN vs exact dense search, a 1M-passage corpus, and Ray.

    python bench/bench_scale.py shipped   # SciFact, Vaswani: recall@100, nDCG@10, q/s, bytes
    python bench/bench_scale.py big       # >= 1M passages: ANN, BM25 + dense + RRF latency
    python bench/bench_scale.py hybrid    # 1M: BM25 numpy vs numba backend, + HNSW + RRF
    python bench/bench_scale.py bm25      # BM25 ms/query against the shard size
    python bench/bench_scale.py ray       # Ray encoding / evaluation, 1 and 2 workers vs local
    python bench/bench_scale.py serve     # Ray Serve: cross-encoder batching on vs off
    python bench/bench_scale.py render    # docs/benchmarks.md section "scale" from the JSON

Each part stores its numbers in bench/scale_results.json and re-renders the section (the 1M
corpus, perturbed copies of the real vectors and token lists: bench/sections/scale.md).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import resource
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from lib.results import DATA, ROOT, cells, publish_tables, recall, save_part, table, test_split
from lib.server import free_port
from lib.timing import interleaved, percentiles, secs, timed_ms

RESULTS = ROOT / "bench" / "scale_results.json"
INDEXES = ROOT / "indexes"
ANN = ("hnsw", "ivfpq")
SOURCES = ("scifact", "vaswani", "cranfield")  # of the 1M corpus (queries: all but cranfield)
SWEEP = {"hnsw": ("ef_search", (64, 128, 256, 512)), "ivfpq": ("nprobe", (16, 32, 64, 128))}
BACKENDS = ("numpy", "numba")
SERVE_RUNS = {"batching on (max_batch_size 8)": 8, "batching off (max_batch_size 1)": 1,
              "plain service (cross-encoder in each replica)": 0}


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _per_query_ms(search: Callable[[np.ndarray], Any], q: np.ndarray) -> float:
    return float(np.mean(timed_ms(lambda j: search(q[j:j + 1]), range(len(q)))))


def _stats(ms: list[float]) -> dict:
    return {"ms/query": float(np.mean(ms)), **{f"{k}_ms": v for k, v in percentiles(ms).items()}}


def _rrf(*ranked: np.ndarray) -> list[tuple[int, float]]:
    """The top 100 of the rows' reciprocal rank fusion (k 60)."""
    from intentrank.core.fusion import rrf

    return heapq.nlargest(100, rrf([r.tolist() for r in ranked]).items(), key=lambda x: x[1])


def _ann(method: str, vecs: np.ndarray, path: Path, **settings: int) -> tuple[Any, dict]:
    """An ANN index of ``vecs`` built at ``path``: its searcher and build facts."""
    from intentrank.index.ann import AnnSearcher, build_ann
    from intentrank.index.settings import AnnSettings

    s = AnnSettings(method, **settings)
    build_s = secs(build_ann, vecs, s, path)[0]
    return AnnSearcher(path, vecs, s), {"build_s": build_s, "size": path.stat().st_size}


# -- shipped corpora ------------------------------------------------------------------------
def _shipped(name: str) -> dict:
    from intentrank.index import Index
    from intentrank.index.ann import exact_search
    from intentrank.measures.metrics import evaluate

    queries, qrels = test_split(name)
    idx = Index(INDEXES / name)
    vecs = idx.embeddings
    encode_s, q = secs(idx.encode_queries, [x.text for x in queries])
    ex_rows, _ = exact_search(vecs, q, 100)

    def measure(search: Callable, build_s: float, nbytes: int) -> dict:
        rows, scores = search(q)
        run = {x.id: {idx.ids[r]: float(s) for r, s in zip(rr, ss, strict=True) if r >= 0}
               for x, rr, ss in zip(queries, rows, scores, strict=True)}
        return {"recall@100": recall(ex_rows, rows),
                "nDCG@10": evaluate(run, qrels, ["nDCG@10"]).aggregate["nDCG@10"],
                "ms/query": _per_query_ms(search, q), "bytes/doc": nbytes / len(vecs),
                "build_s": build_s}

    methods = {"exact": measure(lambda x: exact_search(vecs, x, 100), 0.0, vecs.nbytes)}
    for method in ANN:
        with tempfile.TemporaryDirectory() as tmp:
            s, built = _ann(method, vecs, Path(tmp) / "ann.faiss")
            # hnsw holds the vectors itself; ivfpq codes + the memory-mapped vectors
            methods[method] = measure(lambda x, s=s: s.search(x, 100), built["build_s"],
                                      built["size"] + (0 if method == "hnsw" else vecs.nbytes))
    idx.close()
    return {"docs": len(vecs), "queries": len(queries), "encode_ms": encode_s * 1000 / len(queries),
            "methods": methods}


def shipped() -> None:
    out = {name: _shipped(name) for name in ("scifact", "vaswani")}
    print(json.dumps(out, indent=1), flush=True)
    save_part(RESULTS, "shipped", out)


# -- the 1M corpus --------------------------------------------------------------------------
def _sources() -> tuple[np.ndarray, list[list[str]], np.ndarray, list[str]]:
    """Real vectors and BM25 token lists of SciFact, Vaswani and Cranfield; real queries."""
    from intentrank.index import Index
    from intentrank.index.hits import bm25_tokenize

    vecs, tokens, qtexts = [], [], []
    for name in SOURCES:
        idx = Index(INDEXES / name)
        vecs.append(np.asarray(idx.embeddings))
        s = idx.settings.bm25
        tokens += bm25_tokenize([idx.doc_text(i) for i in idx.ids], s.stopwords, s.stemmer)
        if name != "cranfield":
            qtexts += [x.text for x in test_split(name)[0]]
    return np.concatenate(vecs), tokens, idx.encode_queries(qtexts), qtexts


def _token_ids(tokens: list[list[str]], qtexts: list[str]
               ) -> tuple[list[np.ndarray], dict[str, int], list[list[str]]]:
    """Token ids a document (numpy: 4 bytes a token), the vocabulary, the queries' tokens."""
    from intentrank.index.hits import bm25_tokenize

    vocab: dict[str, int] = {}
    ids = [np.array([vocab.setdefault(t, len(vocab)) for t in d], dtype=np.int32) for d in tokens]
    return ids, vocab, [[t for t in toks if t in vocab]
                        for toks in bm25_tokenize(qtexts, "en", "english")]


def _bm25(src: list[np.ndarray], vocab: dict[str, int], n: int, rng: np.random.Generator
          ) -> Any:
    """A bm25s index (lucene, k1 1.5, b 0.75) of ``n`` documents: the real ones, then copies
    with 10% of their tokens dropped."""
    import bm25s

    corpus = [d if i < len(src) else d[rng.random(len(d)) >= 0.1]
              for i in range(n) for d in (src[i % len(src)],)]
    bm = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    bm.index(bm25s.tokenization.Tokenized(corpus, vocab), show_progress=False)
    return bm


def perturbed_vectors(base: np.ndarray, n: int, rng: np.random.Generator, path: Path) -> None:
    """Write ``n`` vectors normalise(v_i + 0.6 * v_j + 0.25 * gaussian) to the .npy ``path``:
    v_i the source vectors in turn, v_j one at random."""
    m, dim = base.shape
    vecs = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, dim))
    for a in range(0, n, 100_000):
        e = min(n, a + 100_000)
        v = base[np.arange(a, e) % m] + 0.6 * base[rng.integers(0, m, e - a)] \
            + (0.25 / np.sqrt(dim)) * rng.standard_normal((e - a, dim)).astype(np.float32)
        vecs[a:e] = v / np.linalg.norm(v, axis=1, keepdims=True)
    vecs.flush()


@contextlib.contextmanager
def _perturbed(n: int, out: dict) -> Iterator[tuple]:
    """The ``n``-passage perturbed corpus in a work folder deleted after (its sizes and BM25
    build go into ``out``)."""
    rng = np.random.default_rng(0)
    base, tokens, q, qtexts = _sources()
    m, dim = base.shape
    out.update({"docs": n, "source_docs": m, "queries": len(q)})
    work = Path(tempfile.mkdtemp(prefix="scale1m-", dir=ROOT / ".cache"))
    try:
        perturbed_vectors(base, n, rng, work / "embeddings.npy")
        src, vocab, qtok = _token_ids(tokens, qtexts)
        del tokens  # the token lists are the peak of memory: freed before the ANN builds
        build_s, bm = secs(_bm25, src, vocab, n, rng)
        out["bm25"] = {"build_s": build_s, "bytes/doc": sum(
            bm.scores[k].nbytes for k in ("data", "indices", "indptr")) / n}
        yield np.load(work / "embeddings.npy", mmap_mode="r"), bm, qtok, q, work
    finally:
        shutil.rmtree(work)


def big(n: int = 1_000_000) -> None:
    from intentrank.index.ann import exact_search

    out: dict = {}
    with _perturbed(n, out) as (vecs, bm, qtok, q, work):
        def bm25(j: int) -> np.ndarray:
            return bm.retrieve([qtok[j] or [""]], k=100, show_progress=False,
                               n_threads=1).documents[0]

        out["bm25"]["ms/query"] = float(np.mean(timed_ms(bm25, range(len(q)))))
        batch_s, (ex_rows, _) = secs(exact_search, vecs, q, 100)
        out["exact"] = {"ms/query": _per_query_ms(lambda x: exact_search(vecs, x, 100), q[:40]),
                        "batch_ms/query": batch_s * 1000 / len(q),
                        "bytes/doc": vecs.shape[1] * 4}
        for method in ANN:
            s, built = _ann(method, vecs, work / f"{method}.faiss")
            what, points = SWEEP[method]
            out[method] = {
                "build_s": built["build_s"], "recall@100": recall(ex_rows, s.search(q, 100)[0]),
                "ms/query": _per_query_ms(lambda x, s=s: s.search(x, 100), q),
                "bytes/doc": built["size"] / n + (0 if method == "hnsw" else vecs.shape[1] * 4),
                "sweep": {p: {"recall@100": recall(ex_rows, s.search(q, 100, **{what: p})[0]),
                              "ms/query": _per_query_ms(
                                  lambda x, s=s, kw={what: p}: s.search(x, 100, **kw), q[:100])}
                          for p in points}}
            print(method, json.dumps(out[method], indent=1), flush=True)
            out[f"hybrid_{method}_ms/query"] = float(np.mean(timed_ms(
                lambda j, s=s: _rrf(bm25(j), s.search(q[j:j + 1], 100)[0][0]), range(len(q)))))
        out["rss_gib"] = _rss_gib()
    print(json.dumps(out, indent=1), flush=True)
    save_part(RESULTS, "big", out)


def _interleaved(fn: Callable[[Any, str], Any], items: Iterable, ways: tuple[str, ...]
                 ) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """``fn(item, way)`` timed for each item, the ways in turn (so all see the same load):
    milliseconds per way and item, and each item's results by way."""
    items = list(items)
    got = interleaved({w: lambda part, w=w: [fn(part[0], w)] for w in ways}, items, 1,
                      quiet_gc=False)
    return ({w: [1000 * s for s in got[w]["each"]] for w in ways},
            [{w: got[w]["out"][i] for w in ways} for i in range(len(items))])


def hybrid(n: int = 1_000_000, ef_search: int = 512) -> None:
    """BM25 alone and BM25 + dense HNSW + RRF on the perturbed corpus, bm25s's numpy and
    numba backends in one run, through the index's own BM25 retrieval (ties by row)."""
    from intentrank.index.bm25 import retrieve

    out: dict = {"ef_search": ef_search, "backends": list(BACKENDS)}
    with _perturbed(n, out) as (vecs, bm, qtok, q, work):
        # the first query of the process: numba compiles here
        out["first_query_s"] = {b: timed_ms(lambda t, b=b: retrieve(bm, [t], 100, b), qtok[:1])[0]
                                / 1000 for b in BACKENDS}
        ms, hits = _interleaved(lambda t, b: retrieve(bm, [t], 100, b)[0], qtok, BACKENDS)
        out["bm25_alone"] = {b: _stats(ms[b]) for b in BACKENDS}
        same = sum(h["numpy"].rows.tolist() == h["numba"].rows.tolist()
                   and np.allclose(h["numpy"].scores, h["numba"].scores, rtol=1e-5) for h in hits)
        out["same_rows_and_scores"] = f"{same}/{len(qtok)}"
        print(json.dumps(out, indent=1), flush=True)
        searcher, built = _ann("hnsw", vecs, work / "hnsw.faiss", ef_search=ef_search)
        out["hnsw_build_s"] = built["build_s"]

        def search(j: int, way: str) -> object:
            if way == "dense":
                return searcher.search(q[j:j + 1], 100)
            return _rrf(retrieve(bm, [qtok[j]], 100, way)[0].rows,
                        searcher.search(q[j:j + 1], 100)[0][0])

        ms, _ = _interleaved(search, range(len(q)), ("dense", *BACKENDS))
        out |= {"dense_hnsw": _stats(ms["dense"]), "hybrid": {b: _stats(ms[b]) for b in BACKENDS},
                "rss_gib": _rss_gib()}
        print(json.dumps(out, indent=1), flush=True)
    save_part(RESULTS, "hybrid", out)


def bm25_sizes(sizes: tuple[int, ...] = (100_000, 200_000, 500_000, 1_000_000)) -> None:
    """BM25 ms/query against the number of documents in one bm25s index (the shard size)."""
    _, tokens, _, qtexts = _sources()
    src, vocab, qtok = _token_ids(tokens, qtexts)
    out = {}
    for n in sizes:
        bm = _bm25(src, vocab, n, np.random.default_rng(0))
        out[n] = float(np.mean(timed_ms(lambda t, bm=bm: bm.retrieve(
            [t or [""]], k=100, show_progress=False, n_threads=1), qtok)))
        print(n, out[n], flush=True)
        del bm
    save_part(RESULTS, "bm25_sizes", {"ms/query": out, "queries": len(qtok)})


# -- Ray ------------------------------------------------------------------------------------
def ray_part(n_queries: int | None = None, passages: int = 600) -> None:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.models.embedder import load_embedder
    from intentrank.scale.cluster import LocalCluster
    from intentrank.scale.encode import ray_encode
    from intentrank.scale.evaluate import build_pipeline_for, ray_run

    ds = load_dataset(DATA / "cranfield")
    texts = [d.full_text(" ") for d in ds.corpus()][:passages]
    queries = ds.split("test")[0][:n_queries]
    idx = Index(INDEXES / "cranfield")
    load_s, emb = secs(load_embedder)
    local = {"encode_load_s": load_s,
             "encode_p/s": len(texts) / secs(emb.encode_passages, texts)[0]}
    pipe = build_pipeline_for("rrf", idx)
    pipe.run(queries[:5])
    local["eval_q/s"] = len(queries) / secs(pipe.run, queries)[0]
    out: dict = {"passages": len(texts), "queries": len(queries), "pipeline": "rrf",
                 "local": local}
    print(out, flush=True)
    out["cluster_start_s"], cluster = secs(LocalCluster, workers=1, cpus_per_node=1)
    try:
        for w in (1, 2):
            encode_s = secs(ray_encode, texts, workers=w, batch_size=64)[0]
            # the first run starts the worker processes (import, load models), the next reuses
            cold, warm, eight = (secs(ray_run, "rrf", idx.path, qs, tasks=w)[0]
                                 for qs in (queries, queries, queries[:8]))
            out[f"ray{w}"] = {"encode_p/s": len(texts) / encode_s, "eval_q/s": len(queries) / warm,
                              "eval_cold_q/s": len(queries) / cold, "eval_8_queries_s": eight}
            print(w, out[f"ray{w}"], flush=True)
    finally:
        cluster.shutdown()
    local["eval_8_queries_s"] = secs(pipe.run, queries[:8])[0]
    save_part(RESULTS, "ray", out)


# -- Ray Serve: cross-encoder batching across requests --------------------------------------
def _fp32_cross_encoder() -> str:
    """An fp32 sentence-transformers CrossEncoder: the shipped MiniLM-L6 weights with a new
    1-logit head (seed 0; untrained: for speed, not quality), made once into the cache."""
    out = Path(os.environ["INTENTRANK_CACHE"]) / "models" / "cross-encoder-minilm-fp32-untrained"
    if not (out / "config.json").is_file():
        import transformers
        from sentence_transformers import CrossEncoder

        from intentrank.models.inputs import minilm_path

        transformers.set_seed(0)
        CrossEncoder(minilm_path(), num_labels=1, max_length=128, device="cpu").save(str(out))
    return str(out)


def serve_batch(n_queries: int = 48, clients: int = 8, depth: int = 20) -> None:
    """Requests/s and mean batch size of the service on Ray Serve with the cross-encoder
    (fp32, torch) in its own deployment, ``@serve.batch`` on (up to 8 requests a model call)
    vs off (1), in one run; and the plain service (each replica its own cross-encoder)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from intentrank.data.dataset import load_dataset
    from intentrank.index import IndexSettings, build_index
    from intentrank.scale.cluster import LocalCluster
    from intentrank.scale.serve import ScorerSpec, reset_scorer_stats, run, scorer_stats
    from intentrank.service.settings import ServiceSettings

    model = _fp32_cross_encoder()
    ds = load_dataset(DATA / "cranfield")
    texts = [q.text for q in ds.split("test")[0][:n_queries]]
    work = Path(tempfile.mkdtemp(prefix="servebatch-", dir=ROOT / ".cache"))
    build_index(ds.corpus(), work / "cranfield", IndexSettings(legs=("bm25",))).close()
    step = {"cross_encoder": {"model": model, "backend": "torch", "max_length": 128,
                              "top_k": depth, "batch_size": 32}}
    settings = ServiceSettings(indexes={"cranfield": str(work / "cranfield")},
                               pipelines={"bm25_ce": [{"bm25": {"depth": depth}}, step]},
                               rerankers={}, require_keys=False, workers=clients)
    port = free_port()

    def post(text: str) -> float:
        return secs(lambda: httpx.post(f"http://127.0.0.1:{port}/search", timeout=300, json={
            "query": text, "pipeline": "bm25_ce", "top_k": 10}).raise_for_status())[0]

    out: dict = {"queries": len(texts), "clients": clients, "pairs/query": depth,
                 "model": "MiniLM-L6 cross-encoder, fp32 torch, max_length 128",
                 "pair_batch_size": 32, "batch_wait_timeout_s": 0.02}
    out["cluster_start_s"], cluster = secs(LocalCluster, workers=1, cpus_per_node=1)
    from ray import serve

    try:
        for label, max_batch in SERVE_RUNS.items():
            scorer = {"cpus_per_replica": 0.25, "max_batch_size": max_batch, "scorer_cpus": 1.0,
                      "cross_encoder": ScorerSpec(model, "torch", 128, threads=2),
                      "batch_wait_timeout_s": 0.02, "pair_batch_size": 32}
            run(settings, replicas=2, port=port,
                **(scorer if max_batch else {"cpus_per_replica": 0.5}))
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(post, texts[:clients]))  # warm-up: models loaded, threads up
                if max_batch:
                    reset_scorer_stats()
                wall, lat = secs(lambda: list(pool.map(post, texts)))
            row = {"requests/s": len(texts) / wall,
                   **{f"{k}_s": v for k, v in percentiles(lat).items()}}
            if max_batch:
                st = scorer_stats()
                row |= {"model_calls": st["batches"], "max_batch": st["max_batch"],
                        "mean_batch": st["calls"] / max(1, st["batches"])}
            out[label] = row
            print(label, row, flush=True)
            serve.shutdown()
    finally:
        serve.shutdown()
        cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    save_part(RESULTS, "serve_batch", out)


# -- rendering (the prose is in bench/sections/scale.md) -----------------------------------
def _rows(d: dict) -> tuple[list[str], dict[str, str]]:
    """Each stored part's header and table, and the values its prose reads."""
    parts = ("shipped", "big", "hybrid", "serve_batch", "ray")
    md = [d[p]["header"] for p in parts]
    v = {f"{p}.load": f"{d[p]['load_average']:.1f}" for p in parts}
    s, b, h, sb, r = (d[p] for p in parts)
    md.append(table(["corpus", "docs", "search", "recall@100 vs exact", "nDCG@10", "ms/query",
                     "bytes/doc (dense)", "build s"], [
        [n, s[n]["docs"], m, *cells(x, "recall@100:.3f", "nDCG@10:.4f", "ms/query:.2f",
                                     "bytes/doc:.0f", "build_s:.1f")]
        for n in ("scifact", "vaswani") for m, x in s[n]["methods"].items()]))
    v["shipped.encode"] = ", ".join(f"{n} {s[n]['encode_ms']:.1f}" for n in ("scifact", "vaswani"))

    rows = [["dense exact (memory-mapped)", "1.000",
             *cells(b["exact"], "ms/query:.1f", "bytes/doc:.0f"), "0"]]
    rows += [[f"dense {m}", *cells(b[m], "recall@100:.3f", "ms/query:.2f", "bytes/doc:.0f",
                                    "build_s:.0f")] for m in ANN]
    rows.append(["bm25 (bm25s)", "-", *cells(b["bm25"], "ms/query:.2f", "bytes/doc:.0f",
                                               "build_s:.0f")])
    rows += [[f"bm25 + dense {m} + RRF", "-", f"{b[f'hybrid_{m}_ms/query']:.2f}", "-", "-"]
             for m in ANN]
    md.append(table(["leg", "recall@100 vs exact", "ms/query", "bytes/doc", "build s"], rows))
    v |= {"big.docs": f"{b['docs']:,}", "big.source_docs": f"{b['source_docs']:,}",
          "big.queries": str(b["queries"]), "big.rss": f"{b['rss_gib']:.2f}"}
    v |= {f"big.{m}.sweep": "; ".join(f"{what} {p}: recall {x['recall@100']:.3f}, "
                                      f"{x['ms/query']:.2f} ms" for p, x in b[m]["sweep"].items())
          for m, (what, _) in SWEEP.items()}

    stats, hy = ("ms/query:.2f", "p50_ms:.2f", "p95_ms:.2f"), h["hybrid"]
    rows = [[what, k, *cells(x[k], *stats),
             f"{x['numpy']['ms/query'] / x['numba']['ms/query']:.0f}x" if k == "numba" else ""]
            for what, x in (("BM25 alone", h["bm25_alone"]), ("BM25 + dense HNSW + RRF", hy))
            for k in BACKENDS]
    dense = cells(h["dense_hnsw"], *stats)
    rows.append(["dense HNSW alone", "-", *dense[:2], dense[2] + " |"])  # published: "| |"
    md.append(table(["search", "backend", "ms/query (mean)", "p50", "p95", "numpy / numba"],
                    rows))
    first = h["first_query_s"]
    v |= {"hybrid.docs": f"{h['docs']:,}", "hybrid.queries": str(h["queries"]),
          "hybrid.ef_search": str(h["ef_search"]), "hybrid.same": h["same_rows_and_scores"],
          "hybrid.rss": f"{h['rss_gib']:.2f}", "hybrid.numba": f"{hy['numba']['ms/query']:.1f}",
          "hybrid.numba.p95": f"{hy['numba']['p95_ms']:.1f}",
          "hybrid.numpy": f"{hy['numpy']['ms/query']:.0f}",
          "hybrid.first.numba": f"{first['numba']:.1f}",
          "hybrid.first.numpy": f"{first['numpy']:.2f}",
          "hybrid.bm25.build": f"{h['bm25']['build_s']:.0f}",
          "hybrid.bm25.bytes": f"{h['bm25']['bytes/doc']:.0f}",
          "hybrid.hnsw.build": f"{h['hnsw_build_s']:.0f}"}
    # the goal: BM25 + dense + fusion under 50 ms/query
    v |= {f"hybrid.{k}.goal": "met" if hy[k]["ms/query"] < 50 else "not met" for k in BACKENDS}

    on, off, plain = (sb[label] for label in SERVE_RUNS)
    md.append(table(["configuration", "requests/s", "ratio", "p50 s", "p95 s", "model calls",
                     "mean batch (requests)", "max batch"], [
        [label, f"{x['requests/s']:.2f}", f"{x['requests/s'] / off['requests/s']:.2f}",
         *cells(x, "p50_s:.2f", "p95_s:.2f"),
         *(cells(x, "model_calls:", "mean_batch:.2f", "max_batch:") if "model_calls" in x
           else ["-"] * 3)] for label, x in zip(SERVE_RUNS, (on, off, plain), strict=True)]))
    v |= {f"serve.{k}": str(sb[k]) for k in ("queries", "clients", "model", "pair_batch_size")}
    v |= {"serve.pairs": str(sb["pairs/query"]),
          "serve.cluster_start": f"{sb['cluster_start_s']:.1f}",
          "serve.wait_ms": f"{sb['batch_wait_timeout_s'] * 1000:.0f}",
          "serve.mean_batch": f"{on['mean_batch']:.1f}",
          "serve.batched": f"{on['requests/s'] / off['requests/s']:.2f}",
          "serve.plain": f"{plain['requests/s'] / on['requests/s']:.2f}"}

    lo = r["local"]
    md.append(table(["run", "encode passages/s", "ratio", "eval queries/s (warm)", "ratio",
                     "eval queries/s (first run, cold workers)", "8 queries, s"], [
        ["single process (2 threads)", f"{lo['encode_p/s']:.1f}", "1.00",
         f"{lo['eval_q/s']:.1f}", "1.00", "-", f"{lo['eval_8_queries_s']:.2f}"],
        *([f"Ray, {w} worker(s)", f"{x['encode_p/s']:.1f}",
           f"{x['encode_p/s'] / lo['encode_p/s']:.2f}", f"{x['eval_q/s']:.1f}",
           f"{x['eval_q/s'] / lo['eval_q/s']:.2f}",
           *cells(x, "eval_cold_q/s:.1f", "eval_8_queries_s:.2f")]
          for w in (1, 2) for x in (r[f"ray{w}"],))]))
    v |= {"ray.passages": str(r["passages"]), "ray.queries": str(r["queries"]),
          "ray.pipeline": r["pipeline"], "ray.cluster_start": f"{r['cluster_start_s']:.1f}"}
    bs = d["bm25_sizes"]
    v |= {"bm25_sizes.queries": str(bs["queries"]), "bm25_sizes.load": f"{bs['load_average']:.1f}",
          "bm25_sizes": "; ".join(f"{int(n):,} docs: {ms:.1f} ms"
                                  for n, ms in bs["ms/query"].items())}
    return md, v


def main() -> None:
    parts = {"shipped": shipped, "big": big, "hybrid": hybrid, "bm25": bm25_sizes,
             "ray": ray_part, "serve": serve_batch, "render": lambda: None}
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=list(parts))
    parts[ap.parse_args().part]()
    md, values = _rows(json.loads(RESULTS.read_text()))
    publish_tables("scale", "\n\n".join(md), values)


if __name__ == "__main__":
    main()
