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
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import DATA, ROOT, free_port, header, publish_tables

RESULTS = ROOT / "bench" / "scale_results.json"
INDEXES = ROOT / "indexes"


def _load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def _save(key: str, value: dict) -> None:
    data = _load()
    data[key] = value | {"header": header(), "load_average": os.getloadavg()[0]}
    RESULTS.write_text(json.dumps(data, indent=1))


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _recall(exact_rows: np.ndarray, rows: np.ndarray, k: int = 100) -> float:
    return float(np.mean([len(set(e[:k].tolist()) & set(r[:k].tolist())) / k
                          for e, r in zip(exact_rows, rows, strict=True)]))


def _per_query_ms(search, q: np.ndarray, repeat: int = 1) -> float:
    """Mean ms per query, one query at a time (latency, not batch throughput)."""
    t = time.perf_counter()
    for _ in range(repeat):
        for j in range(len(q)):
            search(q[j:j + 1])
    return (time.perf_counter() - t) * 1000 / (len(q) * repeat)


def _ann_methods() -> dict:
    from intentrank.index.settings import AnnSettings

    return {"hnsw": AnnSettings("hnsw"), "ivfpq": AnnSettings("ivfpq")}


# -- shipped corpora ------------------------------------------------------------------------
def shipped() -> None:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.index.ann import AnnSearcher, build_ann, exact_search
    from intentrank.measures.metrics import evaluate

    out = {}
    for name in ("scifact", "vaswani"):
        ds = load_dataset(DATA / name)
        queries, qrels = ds.split("test")
        idx = Index(INDEXES / name)
        vecs = idx.embeddings
        t = time.perf_counter()
        q = idx.encode_queries([x.text for x in queries])
        encode_ms = (time.perf_counter() - t) * 1000 / len(queries)
        ex_rows, ex_scores = exact_search(vecs, q, 100)

        def run_of(rows, scores, ids=idx.ids, queries=queries):
            return {qq.id: {ids[r]: float(s) for r, s in zip(rr, ss, strict=True) if r >= 0}
                    for qq, rr, ss in zip(queries, rows, scores, strict=True)}

        ndcg_exact = evaluate(run_of(ex_rows, ex_scores), qrels, ["nDCG@10"]).aggregate["nDCG@10"]
        exact_ms = _per_query_ms(lambda x, v=vecs: exact_search(v, x, 100), q)
        rows_out = {"exact": {"recall@100": 1.0, "nDCG@10": ndcg_exact, "ms/query": exact_ms,
                              "bytes/doc": vecs.shape[1] * 4, "build_s": 0.0}}
        for method, s in _ann_methods().items():
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "ann.faiss"
                t = time.perf_counter()
                build_ann(vecs, s, path)
                build_s = time.perf_counter() - t
                searcher = AnnSearcher(path, vecs, s)
                rows, scores = searcher.search(q, 100)
                extra = os.path.getsize(path) - (vecs.nbytes if method == "hnsw" else 0)
                rows_out[method] = {
                    "recall@100": _recall(ex_rows, rows),
                    "nDCG@10": evaluate(run_of(rows, scores), qrels,
                                        ["nDCG@10"]).aggregate["nDCG@10"],
                    "ms/query": _per_query_ms(lambda x, s_=searcher: s_.search(x, 100), q),
                    # hnsw holds the vectors itself; ivfpq codes + the memory-mapped vectors
                    "bytes/doc": (os.path.getsize(path) if method == "hnsw"
                                  else extra + vecs.nbytes) / len(vecs),
                    "build_s": build_s}
        out[name] = {"docs": len(vecs), "queries": len(queries), "encode_ms": encode_ms,
                     "methods": rows_out}
        idx.close()
        print(name, json.dumps(out[name], indent=1), flush=True)
    _save("shipped", out)


# -- the 1M corpus --------------------------------------------------------------------------
def _sources() -> tuple[np.ndarray, list[list[str]], np.ndarray, list[str]]:
    """Real vectors and BM25 token lists of SciFact, Vaswani and Cranfield; real queries."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.index.hits import bm25_tokenize

    vecs, tokens, qtexts = [], [], []
    for name in ("scifact", "vaswani", "cranfield"):
        idx = Index(INDEXES / name)
        vecs.append(np.asarray(idx.embeddings))
        s = idx.settings.bm25
        tokens += bm25_tokenize([idx.doc_text(i) for i in idx.ids], s.stopwords, s.stemmer)
        if name != "cranfield":
            queries, _ = load_dataset(DATA / name).split("test")
            qtexts += [x.text for x in queries]
        encoder = idx
    q = encoder.encode_queries(qtexts)
    return np.concatenate(vecs), tokens, q, qtexts


def _perturbed(n: int, work: Path, out: dict) -> tuple:
    """The ``n``-passage perturbed corpus: memory-mapped vectors under ``work`` and one bm25s
    index over the token lists; build times and BM25 bytes/doc go into ``out``. Returns
    (vectors, bm25s index, vocabulary, query vectors, query texts)."""
    import bm25s

    rng = np.random.default_rng(0)
    base, tokens, q, qtexts = _sources()
    m, dim = base.shape
    out.update({"docs": n, "source_docs": m, "queries": len(q)})
    # vectors: normalise(v_i + 0.6 * v_j + 0.25 * gaussian), i a source doc, j a random one
    t = time.perf_counter()
    vec_path = work / "embeddings.npy"
    vecs = np.lib.format.open_memmap(vec_path, mode="w+", dtype=np.float32, shape=(n, dim))
    src = np.arange(n) % m
    for a in range(0, n, 100_000):
        e = min(n, a + 100_000)
        v = base[src[a:e]] + 0.6 * base[rng.integers(0, m, e - a)] \
            + (0.25 / np.sqrt(dim)) * rng.standard_normal((e - a, dim)).astype(np.float32)
        vecs[a:e] = v / np.linalg.norm(v, axis=1, keepdims=True)
    vecs.flush()
    del vecs
    vecs = np.load(vec_path, mmap_mode="r")
    out["make_vectors_s"] = time.perf_counter() - t
    # BM25 first (its token lists are the peak of memory; freed before the ANN builds): the
    # real token lists, each copy with 10% of its tokens dropped, in one bm25s index (a
    # sharded build scores identically, tests/test_scale_index.py)
    t = time.perf_counter()
    vocab: dict[str, int] = {}
    src_ids = [np.array([vocab.setdefault(tok, len(vocab)) for tok in doc], dtype=np.int32)
               for doc in tokens]
    del tokens
    corpus_ids = []
    for i in range(n):
        d = src_ids[src[i]]
        keep = rng.random(len(d)) >= 0.1 if i >= m else np.ones(len(d), bool)
        corpus_ids.append(d[keep])  # numpy: 4 bytes a token, not a Python int
    out["make_tokens_s"] = time.perf_counter() - t
    t = time.perf_counter()
    bm = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    bm.index(bm25s.tokenization.Tokenized(corpus_ids, vocab), show_progress=False)
    del corpus_ids
    out["bm25"] = {"build_s": time.perf_counter() - t,
                   "bytes/doc": sum(bm.scores[k].nbytes for k in ("data", "indices", "indptr"))
                   / n}
    return vecs, bm, vocab, q, qtexts


def big(n: int, hnsw: bool) -> None:
    from intentrank.index.ann import AnnSearcher, build_ann, exact_search
    from intentrank.index.hits import bm25_tokenize

    out: dict = {}
    work = Path(tempfile.mkdtemp(prefix="scale1m-", dir=ROOT / ".cache"))
    vecs, bm, vocab, q, qtexts = _perturbed(n, work, out)
    dim = vecs.shape[1]
    qtok = bm25_tokenize(qtexts, "en", "english")
    qtok = [[tok for tok in toks if tok in vocab] or [""] for toks in qtok]

    def bm25_search(j: int) -> tuple[np.ndarray, np.ndarray]:
        res = bm.retrieve([qtok[j]], k=100, show_progress=False, n_threads=1)
        return res.documents[0], res.scores[0]

    t = time.perf_counter()
    for j in range(len(q)):
        bm25_search(j)
    out["bm25"]["ms/query"] = (time.perf_counter() - t) * 1000 / len(q)
    t = time.perf_counter()
    ex_rows, _ = exact_search(vecs, q, 100)
    out["exact"] = {"ms/query": _per_query_ms(lambda x: exact_search(vecs, x, 100), q[:40]),
                    "batch_ms/query": (time.perf_counter() - t) * 1000 / len(q),
                    "bytes/doc": dim * 4}
    print("exact", out["exact"], flush=True)
    searchers = {}
    for method, s in _ann_methods().items():
        if method == "hnsw" and not hnsw:
            continue
        path = work / f"{method}.faiss"
        t = time.perf_counter()
        info = build_ann(vecs, s, path)
        build_s = time.perf_counter() - t
        searcher = AnnSearcher(path, vecs, s)
        rows, _ = searcher.search(q, 100)
        size = os.path.getsize(path)
        res = {"build_s": build_s, "recall@100": _recall(ex_rows, rows), "info": info,
               "ms/query": _per_query_ms(lambda x, s_=searcher: s_.search(x, 100), q),
               "file_bytes/doc": size / n,
               "bytes/doc": size / n if method == "hnsw" else size / n + dim * 4,
               "rss_gib": _rss_gib()}
        sweep = {}
        for p in ((64, 128, 256, 512) if method == "hnsw" else (16, 32, 64, 128)):
            kw = {"ef_search": p} if method == "hnsw" else {"nprobe": p}
            r, _ = searcher.search(q, 100, **kw)
            sweep[p] = {"recall@100": _recall(ex_rows, r), "ms/query": _per_query_ms(
                lambda x, s_=searcher, kw=kw: s_.search(x, 100, **kw), q[:100])}
        res["sweep"] = sweep
        out[method] = res
        searchers[method] = searcher
        print(method, json.dumps(res, indent=1), flush=True)
    for method, searcher in searchers.items():
        t = time.perf_counter()
        for j in range(len(q)):
            b_rows, _ = bm25_search(j)
            d_rows, _ = searcher.search(q[j:j + 1], 100)
            _rrf(b_rows, d_rows[0])
        out[f"hybrid_{method}_ms/query"] = (time.perf_counter() - t) * 1000 / len(q)
    out["rss_gib"] = _rss_gib()
    print(json.dumps(out, indent=1), flush=True)
    for p in work.iterdir():
        p.unlink()
    work.rmdir()
    _save("big", out)


def _rrf(*ranked: np.ndarray, k: int = 100) -> list[tuple[int, float]]:
    fused: dict[int, float] = {}
    for rows in ranked:
        for rank, r in enumerate(rows.tolist(), 1):
            fused[r] = fused.get(r, 0.0) + 1.0 / (60 + rank)
    return sorted(fused.items(), key=lambda x: -x[1])[:k]


def _stats(ms: list[float]) -> dict:
    return {"ms/query": float(np.mean(ms)), "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95))}


def hybrid(n: int, ef_search: int) -> None:
    """BM25 alone and BM25 + dense HNSW + RRF on the perturbed corpus, with bm25s's numpy
    and numba backends in one run (queries interleaved between the backends, so both see
    the same machine load), through the index's own BM25 retrieval
    (:func:`intentrank.index.bm25.retrieve`: ties by row)."""
    from intentrank.index.ann import AnnSearcher, build_ann
    from intentrank.index.bm25 import retrieve
    from intentrank.index.hits import bm25_tokenize
    from intentrank.index.settings import AnnSettings

    backends = ("numpy", "numba")
    out: dict = {"ef_search": ef_search, "backends": list(backends)}
    work = Path(tempfile.mkdtemp(prefix="scale1m-", dir=ROOT / ".cache"))
    try:
        vecs, bm, vocab, q, qtexts = _perturbed(n, work, out)
        qtok = [[tok for tok in toks if tok in vocab]
                for toks in bm25_tokenize(qtexts, "en", "english")]
        first = {}
        for b in backends:  # the first query of the process: numba compiles here
            t = time.perf_counter()
            retrieve(bm, qtok[:1], 100, b)
            first[b] = time.perf_counter() - t
        out["first_query_s"] = first
        ms: dict[str, list[float]] = {b: [] for b in backends}
        same = 0
        for toks in qtok:
            hits = {}
            for b in backends:
                t = time.perf_counter()
                (hits[b],) = retrieve(bm, [toks], 100, b)
                ms[b].append((time.perf_counter() - t) * 1000)
            same += hits["numpy"].rows.tolist() == hits["numba"].rows.tolist() and \
                np.allclose(hits["numpy"].scores, hits["numba"].scores, rtol=1e-5)
        out["bm25_alone"] = {b: _stats(ms[b]) for b in backends}
        out["same_rows_and_scores"] = f"{same}/{len(qtok)}"
        print(json.dumps(out, indent=1), flush=True)
        s = AnnSettings("hnsw", ef_search=ef_search)
        path = work / "hnsw.faiss"
        t = time.perf_counter()
        build_ann(vecs, s, path)
        out["hnsw_build_s"] = time.perf_counter() - t
        searcher = AnnSearcher(path, vecs, s)
        dense_ms: list[float] = []
        ms = {b: [] for b in backends}
        for j, toks in enumerate(qtok):
            t = time.perf_counter()
            d_rows, _ = searcher.search(q[j:j + 1], 100)
            dense_ms.append((time.perf_counter() - t) * 1000)
            for b in backends:
                t = time.perf_counter()
                (hits,) = retrieve(bm, [toks], 100, b)
                d_rows, _ = searcher.search(q[j:j + 1], 100)
                _rrf(hits.rows, d_rows[0])
                ms[b].append((time.perf_counter() - t) * 1000)
        out["dense_hnsw"] = _stats(dense_ms)
        out["hybrid"] = {b: _stats(ms[b]) for b in backends}
        out["rss_gib"] = _rss_gib()
        print(json.dumps(out, indent=1), flush=True)
    finally:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()
    _save("hybrid", out)


def bm25_sizes(sizes: list[int]) -> None:
    """BM25 ms/query against the number of documents in one bm25s index (the shard size)."""
    import bm25s

    from intentrank.index.hits import bm25_tokenize

    _, tokens, q, qtexts = _sources()
    vocab: dict[str, int] = {}
    src = [np.array([vocab.setdefault(t, len(vocab)) for t in d], dtype=np.int32)
           for d in tokens]
    qtok = [[t for t in toks if t in vocab] or [""]
            for toks in bm25_tokenize(qtexts, "en", "english")]
    out = {}
    for n in sizes:
        rng = np.random.default_rng(0)
        corpus = [src[i % len(src)][rng.random(len(src[i % len(src)])) >= 0.1]
                  if i >= len(src) else src[i] for i in range(n)]
        bm = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        bm.index(bm25s.tokenization.Tokenized(corpus, vocab), show_progress=False)
        del corpus
        t = time.perf_counter()
        for toks in qtok:
            bm.retrieve([toks], k=100, show_progress=False, n_threads=1)
        out[n] = (time.perf_counter() - t) * 1000 / len(qtok)
        print(n, out[n], flush=True)
        del bm
    _save("bm25_sizes", {"ms/query": out, "queries": len(qtok)})


# -- Ray ------------------------------------------------------------------------------------
def ray_part() -> None:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.models.embedder import load_embedder
    from intentrank.scale.cluster import LocalCluster
    from intentrank.scale.encode import ray_encode
    from intentrank.scale.evaluate import build_pipeline_for, ray_run

    ds = load_dataset(DATA / "cranfield")
    texts = [d.full_text(" ") for d in ds.corpus()][:600]
    queries, _ = ds.split("test")
    idx = Index(INDEXES / "cranfield")
    out: dict = {"passages": len(texts), "queries": len(queries), "pipeline": "rrf"}
    t = time.perf_counter()
    emb = load_embedder()
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    emb.encode_passages(texts)
    out["local"] = {"encode_p/s": len(texts) / (time.perf_counter() - t),
                    "encode_load_s": load_s}
    pipe = build_pipeline_for("rrf", idx)
    pipe.run(queries[:5])
    t = time.perf_counter()
    pipe.run(queries)
    out["local"]["eval_q/s"] = len(queries) / (time.perf_counter() - t)
    print(out, flush=True)
    t = time.perf_counter()
    cluster = LocalCluster(workers=1, cpus_per_node=1)
    out["cluster_start_s"] = time.perf_counter() - t
    try:
        for workers in (1, 2):
            t = time.perf_counter()
            ray_encode(texts, workers=workers, batch_size=64)
            enc_s = time.perf_counter() - t
            t = time.perf_counter()
            ray_run("rrf", idx.path, queries, tasks=workers)
            cold_s = time.perf_counter() - t  # worker processes start, import, load models
            t = time.perf_counter()
            ray_run("rrf", idx.path, queries, tasks=workers)
            ev_s = time.perf_counter() - t  # warm: Ray reuses the worker processes
            t = time.perf_counter()
            ray_run("rrf", idx.path, queries[:8], tasks=workers)
            small_s = time.perf_counter() - t
            out[f"ray{workers}"] = {"encode_p/s": len(texts) / enc_s,
                                    "eval_q/s": len(queries) / ev_s,
                                    "eval_cold_q/s": len(queries) / cold_s,
                                    "eval_8_queries_s": small_s}
            print(workers, out[f"ray{workers}"], flush=True)
    finally:
        cluster.shutdown()
    t = time.perf_counter()
    pipe.run(queries[:8])
    out["local"]["eval_8_queries_s"] = time.perf_counter() - t
    _save("ray", out)


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


def serve_batch(n_queries: int, clients: int, depth: int) -> None:
    """Requests/s and mean batch size of the service on Ray Serve with the cross-encoder
    (fp32, torch) in its own deployment, ``@serve.batch`` on (up to 8 requests a model call)
    vs off (1), in one run; and the plain service (each replica its own cross-encoder)."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from intentrank.data.dataset import load_dataset
    from intentrank.index import IndexSettings, build_index
    from intentrank.scale.cluster import LocalCluster
    from intentrank.scale.serve import ScorerSpec, reset_scorer_stats, run, scorer_stats
    from intentrank.service.settings import ServiceSettings

    model = _fp32_cross_encoder()
    ds = load_dataset(DATA / "cranfield")
    queries, _ = ds.split("test")
    texts = [q.text for q in queries[:n_queries]]
    work = Path(tempfile.mkdtemp(prefix="servebatch-", dir=ROOT / ".cache"))
    build_index(ds.corpus(), work / "cranfield", IndexSettings(legs=("bm25",))).close()
    step = {"cross_encoder": {"model": model, "backend": "torch", "max_length": 128,
                              "top_k": depth, "batch_size": 32}}
    settings = ServiceSettings(indexes={"cranfield": str(work / "cranfield")},
                               pipelines={"bm25_ce": [{"bm25": {"depth": depth}}, step]},
                               rerankers={}, require_keys=False, workers=clients)
    spec = ScorerSpec(model, "torch", 128, threads=2)
    port = free_port()

    def post(text: str) -> float:
        t = time.perf_counter()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/search", method="POST",
            data=json.dumps({"query": text, "pipeline": "bm25_ce", "top_k": 10}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as resp:
            json.loads(resp.read())
        return time.perf_counter() - t

    out: dict = {"queries": len(texts), "clients": clients, "pairs/query": depth,
                 "model": "MiniLM-L6 cross-encoder, fp32 torch, max_length 128",
                 "pair_batch_size": 32, "batch_wait_timeout_s": 0.02}
    t = time.perf_counter()
    cluster = LocalCluster(workers=1, cpus_per_node=1)
    out["cluster_start_s"] = time.perf_counter() - t
    from ray import serve

    runs = [("batching on (max_batch_size 8)", 8), ("batching off (max_batch_size 1)", 1),
            ("plain service (cross-encoder in each replica)", 0)]
    try:
        for label, max_batch in runs:
            t = time.perf_counter()
            if max_batch:
                run(settings, replicas=2, cpus_per_replica=0.25, port=port, cross_encoder=spec,
                    max_batch_size=max_batch, batch_wait_timeout_s=0.02, pair_batch_size=32,
                    scorer_cpus=1.0)
            else:
                run(settings, replicas=2, cpus_per_replica=0.5, port=port)
            deploy_s = time.perf_counter() - t
            with ThreadPoolExecutor(clients) as pool:  # warm-up: models loaded, threads up
                list(pool.map(post, texts[:clients]))
            if max_batch:
                reset_scorer_stats()
            t = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                lat = list(pool.map(post, texts))
            wall = time.perf_counter() - t
            row = {"requests/s": len(texts) / wall, "p50_s": float(np.percentile(lat, 50)),
                   "p95_s": float(np.percentile(lat, 95)), "deploy_s": deploy_s}
            if max_batch:
                st = scorer_stats()
                row |= {"model_calls": st["batches"], "requests_scored": st["calls"],
                        "mean_batch": st["calls"] / max(1, st["batches"]),
                        "max_batch": st["max_batch"]}
            out[label] = row
            print(label, row, flush=True)
            serve.shutdown()
    finally:
        serve.shutdown()
        cluster.shutdown()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    _save("serve_batch", out)


# -- rendering (the prose is in bench/sections/scale.md) -----------------------------------
def _table(head: str, rows: list[str]) -> str:
    return "\n".join([f"| {head} |", "|---" * (head.count(" | ") + 1) + "|", *rows])


def _rows(d: dict) -> tuple[list[str], dict[str, str]]:
    """Each stored part's header and table, and the values its prose reads."""
    md: list[str] = []
    v: dict[str, str] = {}
    for part in ("shipped", "big", "hybrid", "serve_batch", "ray"):
        if part in d:
            md.append(d[part]["header"])
            v[f"{part}.load"] = f"{d[part]['load_average']:.1f}"
    if "shipped" in d:
        s = d["shipped"]
        md.append(_table("corpus | docs | search | recall@100 vs exact | nDCG@10 | ms/query | "
                         "bytes/doc (dense) | build s", [
                             f"| {n} | {s[n]['docs']} | {m} | {r['recall@100']:.3f} | "
                             f"{r['nDCG@10']:.4f} | {r['ms/query']:.2f} | {r['bytes/doc']:.0f} | "
                             f"{r['build_s']:.1f} |"
                             for n in ("scifact", "vaswani") for m, r in s[n]["methods"].items()]))
        v["shipped.encode"] = ", ".join(f"{n} {s[n]['encode_ms']:.1f}"
                                        for n in ("scifact", "vaswani"))
    if "big" in d:
        b = d["big"]
        rows = [f"| dense exact (memory-mapped) | 1.000 | {b['exact']['ms/query']:.1f} | "
                f"{b['exact']['bytes/doc']:.0f} | 0 |"]
        rows += [f"| dense {m} | {b[m]['recall@100']:.3f} | {b[m]['ms/query']:.2f} | "
                 f"{b[m]['bytes/doc']:.0f} | {b[m]['build_s']:.0f} |" for m in ANN if m in b]
        rows.append(f"| bm25 (bm25s) | - | {b['bm25']['ms/query']:.2f} | "
                    f"{b['bm25']['bytes/doc']:.0f} | {b['bm25']['build_s']:.0f} |")
        rows += [f"| bm25 + dense {m} + RRF | - | {b[f'hybrid_{m}_ms/query']:.2f} | - | - |"
                 for m in ANN if f"hybrid_{m}_ms/query" in b]
        md.append(_table("leg | recall@100 vs exact | ms/query | bytes/doc | build s", rows))
        v |= {"big.docs": f"{b['docs']:,}", "big.source_docs": f"{b['source_docs']:,}",
              "big.queries": str(b["queries"]), "big.rss": f"{b['rss_gib']:.2f}"}
        for m, what in (("hnsw", "ef_search"), ("ivfpq", "nprobe")):
            v[f"big.{m}.sweep"] = "; ".join(
                f"{what} {p}: recall {r['recall@100']:.3f}, {r['ms/query']:.2f} ms"
                for p, r in b.get(m, {}).get("sweep", {}).items())
    if "hybrid" in d:
        h = d["hybrid"]
        rows = []
        for what, key in (("BM25 alone", "bm25_alone"), ("BM25 + dense HNSW + RRF", "hybrid")):
            r = h[key]
            rows += [f"| {what} | {b} | {r[b]['ms/query']:.2f} | {r[b]['p50_ms']:.2f} | "
                     f"{r[b]['p95_ms']:.2f} | "
                     + (f"{r['numpy']['ms/query'] / r['numba']['ms/query']:.0f}x |"
                        if b == "numba" else " |") for b in ("numpy", "numba")]
        dh, hy = h["dense_hnsw"], h["hybrid"]
        rows.append(f"| dense HNSW alone | - | {dh['ms/query']:.2f} | {dh['p50_ms']:.2f} | "
                    f"{dh['p95_ms']:.2f} | |")
        md.append(_table("search | backend | ms/query (mean) | p50 | p95 | numpy / numba", rows))
        v |= {"hybrid.docs": f"{h['docs']:,}", "hybrid.queries": str(h["queries"]),
              "hybrid.ef_search": str(h["ef_search"]), "hybrid.same": h["same_rows_and_scores"],
              "hybrid.rss": f"{h['rss_gib']:.2f}",
              "hybrid.numba": f"{hy['numba']['ms/query']:.1f}",
              "hybrid.numba.p95": f"{hy['numba']['p95_ms']:.1f}",
              "hybrid.numpy": f"{hy['numpy']['ms/query']:.0f}",
              "hybrid.first.numba": f"{h['first_query_s']['numba']:.1f}",
              "hybrid.first.numpy": f"{h['first_query_s']['numpy']:.2f}",
              "hybrid.bm25.build": f"{h['bm25']['build_s']:.0f}",
              "hybrid.bm25.bytes": f"{h['bm25']['bytes/doc']:.0f}",
              "hybrid.hnsw.build": f"{h['hnsw_build_s']:.0f}"}
        for b in ("numpy", "numba"):  # the goal: BM25 + dense + fusion under 50 ms/query
            v[f"hybrid.{b}.goal"] = "met" if hy[b]["ms/query"] < 50 else "not met"
    if "serve_batch" in d:
        s = d["serve_batch"]
        base = s.get(SERVE_RUNS[1], {}).get("requests/s")
        rows = []
        for label in SERVE_RUNS:
            if r := s.get(label):
                calls = (f"{r['model_calls']} | {r['mean_batch']:.2f} | {r['max_batch']}"
                         if "model_calls" in r else "- | - | -")
                ratio = f"{r['requests/s'] / base:.2f}" if base else "-"
                rows.append(f"| {label} | {r['requests/s']:.2f} | {ratio} | "
                            f"{r['p50_s']:.2f} | {r['p95_s']:.2f} | {calls} |")
        md.append(_table("configuration | requests/s | ratio | p50 s | p95 s | model calls | "
                         "mean batch (requests) | max batch", rows))
        on, plain = s.get(SERVE_RUNS[0]), s.get(SERVE_RUNS[2])
        v |= {f"serve.{k}": str(s[k]) for k in ("queries", "clients", "model", "pair_batch_size")}
        v |= {"serve.pairs": str(s["pairs/query"]),
              "serve.cluster_start": f"{s['cluster_start_s']:.1f}",
              "serve.wait_ms": f"{s['batch_wait_timeout_s'] * 1000:.0f}"}
        if on and base and plain:
            v |= {"serve.mean_batch": f"{on['mean_batch']:.1f}",
                  "serve.batched": f"{on['requests/s'] / base:.2f}",
                  "serve.plain": f"{plain['requests/s'] / on['requests/s']:.2f}"}
    if "ray" in d:
        r, lo = d["ray"], d["ray"]["local"]
        rows = [f"| single process (2 threads) | {lo['encode_p/s']:.1f} | 1.00 | "
                f"{lo['eval_q/s']:.1f} | 1.00 | - | {lo['eval_8_queries_s']:.2f} |"]
        rows += [f"| Ray, {w} worker(s) | {x['encode_p/s']:.1f} | "
                 f"{x['encode_p/s'] / lo['encode_p/s']:.2f} | {x['eval_q/s']:.1f} | "
                 f"{x['eval_q/s'] / lo['eval_q/s']:.2f} | "
                 f"{x.get('eval_cold_q/s', float('nan')):.1f} | {x['eval_8_queries_s']:.2f} |"
                 for w in (1, 2) if (x := r.get(f"ray{w}"))]
        md.append(_table("run | encode passages/s | ratio | eval queries/s (warm) | ratio | "
                         "eval queries/s (first run, cold workers) | 8 queries, s", rows))
        v |= {"ray.passages": str(r["passages"]), "ray.queries": str(r["queries"]),
              "ray.pipeline": r["pipeline"], "ray.cluster_start": f"{r['cluster_start_s']:.1f}"}
    if "bm25_sizes" in d:
        b = d["bm25_sizes"]
        v |= {"bm25_sizes.queries": str(b["queries"]),
              "bm25_sizes.load": f"{b['load_average']:.1f}",
              "bm25_sizes": "; ".join(f"{int(n):,} docs: {ms:.1f} ms"
                                      for n, ms in b["ms/query"].items())}
    return md, v


SERVE_RUNS = ("batching on (max_batch_size 8)", "batching off (max_batch_size 1)",
              "plain service (cross-encoder in each replica)")
ANN = ("hnsw", "ivfpq")


def render() -> None:
    md, values = _rows(_load())
    publish_tables("scale", "\n\n".join(md), values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=["shipped", "big", "hybrid", "bm25", "ray", "serve",
                                     "render"])
    ap.add_argument("--sizes", default="100000,200000,500000,1000000")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--no-hnsw", action="store_true")
    ap.add_argument("--ef-search", type=int, default=512)
    ap.add_argument("--queries", type=int, default=48)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--depth", type=int, default=20)
    args = ap.parse_args()
    if args.part == "shipped":
        shipped()
    elif args.part == "big":
        big(args.docs, not args.no_hnsw)
    elif args.part == "hybrid":
        hybrid(args.docs, args.ef_search)
    elif args.part == "bm25":
        bm25_sizes([int(x) for x in args.sizes.split(",")])
    elif args.part == "serve":
        serve_batch(args.queries, args.clients, args.depth)
    elif args.part == "ray":
        ray_part()
    render()


if __name__ == "__main__":
    main()
