"""Updates and filters (issue 48): update against rebuild, delete throughput, filtered latency
and ANN recall by selectivity.

    python bench/bench_updates.py updates   # SciFact: build, add 100, deletes, exactness
    python bench/bench_updates.py filters   # SciFact: latency by selectivity per leg, HNSW
    python bench/bench_updates.py big       # 1M passages: BM25, exact, HNSW with filters
    python bench/bench_updates.py big-inputs --inputs F.npz   # what big needs, for another
    python bench/bench_updates.py big --inputs F.npz --no-render   # machine (no models)
    python bench/bench_updates.py updates --no-render   # any part: store the numbers only
    python bench/bench_updates.py filters --no-render
    python bench/bench_updates.py render    # docs/benchmarks.md section "updates"

Every document carries ``bucket`` (row mod 100) and ``year``: ``bucket < 1`` keeps 1% of the
corpus, ``bucket < 10`` 10%, ``bucket < 50`` 50%. Each part stores its numbers in
bench/updates_results.json and re-renders the section (text: bench/sections/updates.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from lib.results import DATA, ROOT, log, publish_tables, recall, save_part, table, test_texts
from lib.timing import each_ms, percentiles, secs

RESULTS = ROOT / "bench" / "updates_results.json"
SHARES = {"1%": "bucket < 1", "10%": "bucket < 10", "50%": "bucket < 50", "none": None}


def _tagged() -> list[Any]:
    from intentrank.data.corpus import iter_corpus

    return [replace(d, metadata={"bucket": i % 100, "year": 2000 + i % 25})
            for i, d in enumerate(iter_corpus(DATA / "scifact" / "corpus.jsonl.gz"))]


def updates() -> None:
    """Build SciFact without its last 100 abstracts, add them, delete 1/10/100/1000 (each on
    a copy: tombstones) and 1,100 (past the merge share: a compact generation), merge; then
    check the result against a fresh build of the final corpus and time each leg's first
    search on both (a reader of tombstones recomputes the lexical statistics)."""
    from intentrank.index import Index, IndexSettings, build_index
    from intentrank.index.update import delete, merge, upsert

    docs = _tagged()
    work = Path(tempfile.mkdtemp(prefix="updates-", dir=ROOT / ".cache"))
    out: dict[str, Any] = {"docs": len(docs)}
    try:
        path = work / "idx"
        log("full build of all but the last 100 abstracts (embedding cache off)")
        took, index = secs(build_index, docs[:-100], path, IndexSettings(),
                           embedding_cache=False)
        out["build"] = {"s": took, "legs": index.manifest["build_seconds"]}
        index.close()
        log("add the last 100")
        took, stats = secs(upsert, path, docs[-100:], embedding_cache=False)
        out["add100"] = {"s": took, "timings": stats.timings, "encoded": stats.encoded}
        log("re-add the same 100 (unchanged: skipped)")
        out["noop100"] = {"s": secs(upsert, path, docs[-100:])[0]}
        rng = np.random.default_rng(0)
        with Index(path) as index:
            ids = list(index.ids)
        out["delete"] = {}
        for n in (1, 10, 100, 1000, 1100):
            copy = work / f"del{n}"
            shutil.copytree(path, copy)
            gone = [ids[int(i)] for i in rng.choice(len(ids), n, replace=False)]
            took, stats = secs(delete, copy, gone)
            out["delete"][n] = {"s": took, "timings": stats.timings,
                                "tombstones": stats.tombstones, "merged": stats.merged}
            if n == 1000:
                out["merge1000"] = {"s": secs(merge, copy)[0]}
            shutil.rmtree(copy)
        log("delete by filter (bucket >= 95 OR year = 2003: about 460)")
        took, stats = secs(delete, path, filter="bucket >= 95 OR year = 2003")
        out["delete_filter"] = {"s": took, "deleted": stats.deleted,
                                "tombstones": stats.tombstones}
        log("fresh build of the final corpus, compared leg by leg")
        with Index(path) as index:
            final = list(index.documents())
            # vectors from the shared embedding cache (filled by index-scifact's build with
            # the same model): a passage's vector does not depend on when it was encoded
            fresh = build_index(final, work / "fresh", IndexSettings())
            out["identical"] = _identical(index, fresh)
            fresh.close()
        out["first_search"] = {name: _first_search(where) for name, where in
                               (("tombstones", path), ("fresh build", work / "fresh"))}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))
    save_part(RESULTS, "updates", out)


def _first_search(path: Path) -> dict[str, float]:
    """Seconds of each leg's first search in a newly opened Index (the query embedder loaded
    before): what a reader pays to load the leg."""
    from intentrank.index import Index

    out = {}
    with Index(path) as index:
        index.encode_queries(["warm-up"])
        for leg in ("bm25", "dense", "tfidf", "graph"):
            out[leg] = secs(getattr(index, f"search_{leg}"), ["vitamin D and fractures"], 10)[0]
    return out


def _identical(a: Any, b: Any) -> dict[str, bool]:

    queries = test_texts("scifact")
    same = {"corpus sha256": a.corpus_sha256 == b.corpus_sha256,
            "vectors": bool(np.array_equal(np.asarray(a.embeddings), np.asarray(b.embeddings)))}
    for leg in ("bm25", "dense", "tfidf", "graph"):
        ha, hb = (getattr(x, f"search_{leg}")(queries, 100) for x in (a, b))
        same[leg] = all(np.array_equal(x.rows, y.rows) and np.array_equal(x.scores, y.scores)
                        for x, y in zip(ha, hb, strict=True))
    return same


def filters() -> None:
    """Filtered search on SciFact (test queries one at a time), each leg, each share."""
    from intentrank.index import IndexSettings, build_index
    from intentrank.index.ann import build_ann
    from intentrank.index.settings import AnnSettings

    queries = test_texts("scifact")
    work = Path(tempfile.mkdtemp(prefix="filters-", dir=ROOT / ".cache"))
    out: dict[str, Any] = {"queries": len(queries), "legs": {}}
    try:
        index = build_index(_tagged(), work / "idx", IndexSettings())
        qv = index.encode_queries(queries)
        masks = {}
        index.metadata_columns  # noqa: B018 - built once per open index, not per filter
        for share, text in SHARES.items():
            took, masks[share] = secs(index.allowed_rows, text)  # the first call: uncached
            if text is not None:
                out.setdefault("mask_ms", {})[share] = took * 1000
        for leg in ("bm25", "dense", "tfidf", "graph"):
            search, out["legs"][leg] = getattr(index, f"search_{leg}"), {}
            extra = [{"query_vectors": qv[j:j + 1]} if leg == "dense" else {}
                     for j in range(len(queries))]
            for share, allow in masks.items():
                _, ms = each_ms(lambda x, search=search, allow=allow: search(
                    [x[0]], 10, allow=allow, **x[1]), list(zip(queries, extra, strict=True)))
                out["legs"][leg][share] = percentiles(ms)
                out.setdefault("first_ms", {}).setdefault(leg, {})[share] = ms[0]
        vecs = np.asarray(index.embeddings)
        out["hnsw"] = _ann_recall(vecs, qv, {s: m for s, m in masks.items() if m is not None},
                                  AnnSettings("hnsw"), work / "hnsw.faiss", build_ann)
        index.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))
    save_part(RESULTS, "filters", out)


def _ann_recall(vecs: np.ndarray, q: np.ndarray, masks: dict[str, np.ndarray], s: Any,
                file: Path, build_ann: Any, k: int = 10) -> dict[str, Any]:
    """Recall@k of filtered ANN search (the index's own policy: exact below 20% of rows)
    against exact filtered search, and its latency, per share."""
    from intentrank.index.ann import (
        ANN_EXACT_BELOW,
        GATHER_BELOW,
        AnnSearcher,
        exact_search,
        exact_search_rows,
    )

    build_s = secs(build_ann, vecs, s, file)[0]
    searcher = AnnSearcher(file, vecs, s)
    out: dict[str, Any] = {"build_s": build_s}
    for share, allow in masks.items():
        rows = np.flatnonzero(allow)
        truth, _ = exact_search_rows(vecs, rows, q, k)
        got, ms = [], []
        exact = allow.mean() < ANN_EXACT_BELOW
        for j in range(len(q)):
            t = time.perf_counter()
            if exact and allow.mean() < GATHER_BELOW:
                r, _ = exact_search_rows(vecs, rows, q[j:j + 1], k)
            elif exact:
                r, _ = exact_search(vecs, q[j:j + 1], k, allow=allow)
            else:
                r, _ = searcher.search(q[j:j + 1], k, allow=allow)
            ms.append((time.perf_counter() - t) * 1000)
            got.append(r[0])
        raw = [searcher.search(q[j:j + 1], k, allow=allow)[0][0] for j in range(len(q))]
        out[share] = {"recall": recall(truth, got, k), "raw_ann_recall": recall(truth, raw, k),
                      "exact_scan": bool(exact), **percentiles(ms)}
        sweep = {}
        for ef in (64, 128, 256, 512, 1024):  # ef_search before the filter's widening
            t = time.perf_counter()
            rows_ef = [searcher.search(q[j:j + 1], k, ef_search=ef, allow=allow)[0][0]
                       for j in range(len(q))]
            sweep[ef] = {"recall": recall(truth, rows_ef, k),
                         "ms": (time.perf_counter() - t) * 1000 / len(q)}
        out[share]["sweep"] = sweep
    unfiltered, _ = exact_search_rows(vecs, np.arange(len(vecs)), q, k)
    out["unfiltered_recall"] = recall(unfiltered, [searcher.search(q[j:j + 1], k)[0][0]
                                                    for j in range(len(q))], k)
    return out


def big_inputs(path: Path | None = None) -> dict[str, Any]:
    """What the 1M corpus is made from: SciFact's vectors and BM25 token ids (indexes/
    scifact), 100 test queries' vectors and tokens; saved to ``path`` (an .npz another
    machine can run ``big --inputs`` from without the models), or loaded from it if it
    exists."""
    if path is not None and path.exists():
        z = np.load(path, allow_pickle=False)
        lens = z["lens"]
        ids = np.split(z["ids"], np.cumsum(lens)[:-1])
        qlens = z["qlens"]
        qtok = [t.tolist() for t in np.split(z["qtok"], np.cumsum(qlens)[:-1])]
        return {"base": z["base"], "ids": ids, "vocab": z["vocab"].tolist(), "q": z["q"],
                "qtok": qtok}
    from intentrank.index import Index
    from intentrank.index.hits import bm25_tokenize

    src = Index(ROOT / "indexes" / "scifact")
    s = src.settings.bm25
    tokens = bm25_tokenize([src.doc_text(i) for i in src.ids], s.stopwords, s.stemmer)
    vocab: dict[str, int] = {}
    ids = [np.array([vocab.setdefault(t, len(vocab)) for t in d], dtype=np.int32)
           for d in tokens]
    queries = test_texts("scifact")[:100]
    qtok = bm25_tokenize(queries, s.stopwords, s.stemmer)
    out = {"base": np.asarray(src.embeddings), "ids": ids, "vocab": list(vocab),
           "q": src.encode_queries(queries), "qtok": qtok}
    if path is not None:
        np.savez_compressed(path, base=out["base"], ids=np.concatenate(ids),
                 lens=np.array([len(d) for d in ids]), vocab=np.array(out["vocab"]),
                 q=out["q"], qtok=np.array([t for d in qtok for t in d], dtype=str),
                 qlens=np.array([len(d) for d in qtok]))
    return out


def big(n: int = 1_000_000, inputs: Path | None = None) -> None:
    """1M passages perturbed from SciFact's (vectors v_i + 0.6 v_j + noise, token lists with
    10% dropped), BM25 (unfiltered: bm25s numpy; filtered: the matching documents'
    statistics from the postings, and bm25s's weight mask for comparison), exact dense and
    HNSW under filters."""
    import bm25s
    import scipy.sparse as sp
    from bench_scale import perturbed_vectors

    from intentrank.filters import MetadataColumns, parse_filter
    from intentrank.index.ann import GATHER_BELOW, build_ann, exact_search, exact_search_rows
    from intentrank.index.bm25 import retrieve
    from intentrank.index.settings import AnnSettings, BM25Settings
    from intentrank.index.subset import BM25Postings
    from intentrank.index.terms import TermRows

    made = big_inputs(inputs)
    base, ids, q, qtok = made["base"], made["ids"], made["q"], made["qtok"]
    vocab = {t: i for i, t in enumerate(made["vocab"])}
    rng = np.random.default_rng(0)
    m, dim = base.shape
    (ROOT / ".cache").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="filters1m-", dir=ROOT / ".cache"))
    out: dict[str, Any] = {"docs": n, "queries": len(q), "legs": {}}
    try:
        perturbed_vectors(base, n, rng, work / "v.npy")
        vecs = np.load(work / "v.npy", mmap_mode="r")
        log("BM25 over 1M")
        corpus = [d if i < m else d[rng.random(len(d)) >= 0.1]
                  for i in range(n) for d in (ids[i % m],)]
        bm = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        bm.index(bm25s.tokenization.Tokenized(corpus, vocab), show_progress=False)
        lens = np.array([len(d) for d in corpus])
        counts = sp.csr_matrix((np.ones(int(lens.sum()), dtype=np.float32),
                                np.concatenate(corpus), np.concatenate([[0], np.cumsum(lens)])),
                               shape=(n, len(vocab)))
        counts.sum_duplicates()
        del corpus
        out["postings_s"], postings = secs(BM25Postings, TermRows(counts, list(vocab)),
                                            BM25Settings(method="lucene", k1=1.5, b=0.75,
                                                         stemmer=None))
        cols = MetadataColumns.from_records([{"bucket": i % 100} for i in range(n)])
        out["column_s"] = secs(parse_filter("bucket = -1").mask, cols)[0]  # builds it
        masks = {}
        for share, text in SHARES.items():
            if text is None:
                masks[share] = None
                continue
            took, mask = secs(parse_filter(text).mask, cols)  # the first call: uncached
            out.setdefault("mask_ms", {})[share] = took * 1000
            masks[share] = np.asarray(mask, dtype=bool)
        for share, allow in masks.items():
            rows = np.flatnonzero(allow) if allow is not None else None
            gather = allow is not None and allow.mean() < GATHER_BELOW
            for leg, search, items in (
                    ("bm25", (lambda t: retrieve(bm, [t], 10)) if allow is None else
                     (lambda t, a=allow: postings.search([t], 10, a)), qtok),
                    ("bm25 (whole-index statistics)",
                     lambda t, a=allow: retrieve(bm, [t], 10, allow=a), qtok),
                    ("dense exact", (lambda x, r=rows: exact_search_rows(vecs, r, x, 10))
                     if gather else (lambda x, a=allow: exact_search(vecs, x, 10, allow=a)),
                     [q[j:j + 1] for j in range(20)])):
                out["legs"].setdefault(leg, {})[share] = percentiles(each_ms(search, items)[1])
        log("HNSW over 1M")
        out["hnsw"] = _ann_recall(vecs, q, {s: a for s, a in masks.items() if a is not None},
                                  AnnSettings("hnsw"), work / "hnsw.faiss", build_ann)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))
    save_part(RESULTS, "big", out)


def render() -> None:
    data = json.loads(RESULTS.read_text())
    parts, values = [], {}
    if "updates" in data:
        u = data["updates"]
        build = u["build"]["s"]
        rows = [["full build, 5,083 abstracts", f"{build:.1f}", "1.000", "-"],
                ["add 100 abstracts", f"{u['add100']['s']:.1f}",
                 f"{u['add100']['s'] / build:.3f}", _legs(u["add100"]["timings"])],
                ["re-add the same 100 (unchanged)", f"{u['noop100']['s']:.2f}",
                 f"{u['noop100']['s'] / build:.3f}", "-"]]
        for n, d in u["delete"].items():
            dead = d["tombstones"]
            how = ("merged (compact)" if d["merged"] else
                   f"tombstones ({dead} dead row{'' if dead == 1 else 's'})")
            rows.append([f"delete {n} by id: {how}", f"{d['s']:.2f}", f"{d['s'] / build:.4f}",
                         _legs(d["timings"])])
            if n == "1000":
                m = u["merge1000"]["s"]
                rows.append(["then merge those 1000", f"{m:.2f}", f"{m / build:.4f}", "-"])
        f = u["delete_filter"]
        rows.append([f"delete by filter ({f['deleted']} documents): tombstones", f"{f['s']:.2f}",
                     f"{f['s'] / build:.4f}", "-"])
        parts += [u["header"], table(["operation", "seconds", "x full build", "per leg (s)"],
                                     rows)]
        same = u["identical"]
        parts.append(table(["compared with a fresh build", *same],
                           [["identical", *("yes" if v else "NO" for v in same.values())]]))
        first = u["first_search"]
        parts.append(table(["first search of a newly opened index, s", *first["tombstones"]],
                           [[name, *(f"{v:.2f}" for v in legs.values())]
                            for name, legs in first.items()]))
        values["add.ratio"] = f"{u['add100']['s'] / build:.1%}"
        light = [d["s"] for d in u["delete"].values() if not d["merged"]]
        values["delete.min"], values["delete.max"] = f"{min(light):.2f}", f"{max(light):.2f}"
        values["updates.load"] = f"{u['load_average']:.1f}"
    if "filters" in data:
        f = data["filters"]
        parts += [f["header"], _latency_table(f)]
        parts.append(_recall_table(f["hnsw"]))
        values["filters.load"] = f"{f['load_average']:.1f}"
    if "big" in data:
        b = data["big"]
        h = b["hnsw"]
        parts += [b["header"], _latency_table(b), _recall_table(h)]
        values["big.load"] = f"{b['load_average']:.1f}"
        values["big.column_s"] = f"{b['column_s']:.2f}"
        values["big.postings_s"] = f"{b['postings_s']:.1f}"
        bm25 = b["legs"]["bm25"]
        values["big.bm25_50"] = f"{bm25['50%']['p50'] / bm25['none']['p50']:.1f}"
        values["big.raw1"] = f"{h['1%']['raw_ann_recall']:.3f}"
        values["big.raw10"] = f"{h['10%']['raw_ann_recall']:.3f}"
        values["big.unfiltered"] = f"{h['unfiltered_recall']:.3f}"
        ok = [(int(ef), v) for ef, v in h["50%"]["sweep"].items() if v["recall"] >= 0.95]
        ef, v = min(ok) if ok else (0, {"ms": float("nan")})
        values["big.ef95"] = str(ef) if ok else "none of those swept"
        values["big.ef95_ms"] = f"{v['ms']:.1f}"
    publish_tables("updates", "\n\n".join(parts), values)


def _legs(timings: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in timings.items())


def _latency_table(d: dict[str, Any]) -> str:
    shares = list(SHARES)
    rows = [[leg, *(f"{v[s]['p50']:.1f} / {v[s]['p95']:.1f}" for s in shares)]
            for leg, v in d["legs"].items()]
    for leg in ("tfidf", "graph"):  # their statistics over a filter's rows, computed once
        if leg in d.get("first_ms", {}):
            first = d["first_ms"][leg]
            rows.append([f"{leg}: a filter's first search", *(f"{first[s]:.1f}" if s in first
                                                               else "-" for s in shares)])
    masks = d["mask_ms"]
    rows.append(["the filter's row mask", *(f"{masks[s]:.1f}" if s in masks else "-"
                                            for s in shares)])
    return table(["ms p50 / p95, top 10", *shares], rows)


def _recall_table(h: dict[str, Any]) -> str:
    shares = [s for s in SHARES if s in h]
    rows = [["recall@10 (as the index searches)", *(f"{h[s]['recall']:.3f}" for s in shares)],
            ["recall@10 (graph walk alone)", *(f"{h[s]['raw_ann_recall']:.3f}" for s in shares)],
            ["exact scan", *("yes" if h[s]["exact_scan"] else "no" for s in shares)],
            ["ms p50 / p95", *(f"{h[s]['p50']:.1f} / {h[s]['p95']:.1f}" for s in shares)]]
    for ef in h[shares[0]].get("sweep", {}):
        rows.append([f"walk alone, ef_search {ef}: recall / ms",
                     *(f"{h[s]['sweep'][ef]['recall']:.3f} / {h[s]['sweep'][ef]['ms']:.1f}"
                       for s in shares)])
    return table([f"HNSW with filter (unfiltered recall@10 {h['unfiltered_recall']:.3f})",
                  *shares], rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["updates", "filters", "big", "big-inputs", "render"])
    parser.add_argument("--inputs", type=Path, help="big: the 1M corpus's sources from this "
                        ".npz (big-inputs writes it), so that big runs without the models")
    parser.add_argument("--no-render", action="store_true", help="store the numbers only")
    args = parser.parse_args()
    if args.part == "big-inputs":
        big_inputs(args.inputs or ROOT / ".cache" / "big-inputs.npz")
    elif args.part != "render":
        {"updates": updates, "filters": filters,
         "big": lambda: big(inputs=args.inputs)}[args.part]()
    if not args.no_render:
        render()
