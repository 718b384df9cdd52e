"""Model speed on 2 cores, old and new side by side in one run (issue 35).

    python bench/bench_speed.py
    python bench/bench_speed.py --queries      # section "query-speed" only
    python bench/bench_speed.py --graph        # section "onnx-graph" only

Each way of running a model is timed interleaved with the others, in chunks (wall-clock
medians and CPU seconds per item); the ways compared: bench/sections/speed.md and
bench/sections/query-speed.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from bench_latency import index_memory
from lib.results import DATA, header, p_value, publish_tables, table, test_split
from lib.timing import interleaved

PAIRS_QUERIES, CHUNK = 20, 200  # SciFact test queries whose BM25 top 30 the CE scores; texts
SPEED = ["per s (median)", "interquartile", "CPU ms each", "speed vs first"]


def interleave(fns: dict[str, Callable], items: Sequence, chunk: int) -> tuple[dict, str]:
    """Each function timed on each chunk in turn (:func:`lib.timing.interleaved`), and the
    load average's range over the rounds."""
    loads: list[float] = []
    timed = interleaved(fns, items, chunk, quiet_gc=False, loads=loads)
    return timed, f"{min(loads):.1f}-{max(loads):.1f}"


def row(name: str, t: dict, reference: dict, extra: Sequence[str]) -> list[str]:
    """Items/s (median over chunks, interquartile), CPU ms per item and speed against
    ``reference`` of one way timed by :func:`interleave`."""
    rate, ref = float(np.median(t["rates"])), float(np.median(reference["rates"]))
    return [name, f"{rate:.1f}", f"{np.percentile(t['rates'], 25):.1f}-"
            f"{np.percentile(t['rates'], 75):.1f}", f"{1000 * t['cpu'] / len(t['out']):.1f}",
            f"{rate / ref:.2f}x", *extra]


def dense_rows(timers: dict[str, dict], runs: dict[str, Any], vectors: dict[str, np.ndarray],
               qrels: Any) -> list[list[str]]:
    """Each timer's row with the nDCG@10 of its run, p against the first row and the lowest
    cosine of its vectors to the first row's."""
    from intentrank.measures.metrics import evaluate

    res = {n: evaluate(r, qrels, ["nDCG@10"]) for n, r in runs.items()}
    first = next(iter(timers))
    return [row(n, t, timers[first], [
        f"{res[n].aggregate['nDCG@10']:.4f}",
        "-" if n == first else p_value(res[first].column("nDCG@10"), res[n].column("nDCG@10")),
        f"{(vectors[n] * vectors[first]).sum(axis=1).min():.4f}"]) for n, t in timers.items()]


def cross_encoder_rows() -> tuple[list[list[str]], str, int]:
    import onnxruntime as ort

    from intentrank.models.cross_encoder import load_cross_encoder
    from intentrank.models.onnx_embedder import pad_encodings

    pairs = scifact_pairs()[0]
    now = load_cross_encoder()  # the bundled model: one pair per run, ItemRunner
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
    two_threads = ort.InferenceSession(str(now.onnx_path), opts,
                                       providers=["CPUExecutionProvider"])

    def sigmoid(chunk: Sequence, size: int) -> np.ndarray:
        """The 2-thread session on ``size`` pairs a run."""
        enc = now.tokenizer.encode_batch([tuple(p) for p in chunk])
        out = [two_threads.run(None, {n: f[n] for n in now.input_names})[0].reshape(-1)
               for f in (pad_encodings(enc[i:i + size]) for i in range(0, len(enc), size))]
        return 1 / (1 + np.exp(-np.concatenate(out)))

    timers, load = interleave({
        "one pair per run, one 2-thread run at a time (before)": lambda c: sigmoid(c, 1),
        "one pair per run, two 1-thread runs at once (now)": now.predict,
        "batches of 8 (before 2026-11-24; batch-dependent)": lambda c: sigmoid(c, 8)}, pairs, 60)
    ref = next(iter(timers.values()))
    return [row(n, t, ref, [f"{np.abs(np.asarray(t['out']) - np.asarray(ref['out'])).max():.2g}"])
            for n, t in timers.items()], load, len(pairs)


def embedder_rows() -> tuple[list[list[str]], str, str]:
    from intentrank.data.dataset import load_dataset
    from intentrank.models.embedder import load_embedder

    ds = load_dataset(DATA / "scifact")
    docs = list(ds.corpus())
    ids, texts = [d.id for d in docs], [d.full_text() for d in docs]
    queries, qrels = ds.split("test")
    models = {"torch fp32 (before; --precision fp32)": load_embedder(precision="fp32"),
              "int8 ONNX export, one passage per run, two runs at once (default)":
                  load_embedder(),
              "packaged int8 ONNX, one text per run, two runs at once (--backend onnx)":
                  load_embedder(backend="onnx")}
    perm = np.random.default_rng(0).permutation(len(texts))  # chunks mix lengths alike
    timers, load = interleave({n: lambda c, m=m: m.encode_passages(c, batch_size=64)
                               for n, m in models.items()}, [texts[i] for i in perm], CHUNK)
    vectors, runs = {}, {}
    for name, model in models.items():
        out = np.asarray(timers[name]["out"])
        vectors[name] = np.empty_like(out)
        vectors[name][perm] = out
        scores = model.encode_queries([x.text for x in queries]) @ vectors[name].T
        runs[name] = {q.id: {ids[j]: float(scores[i, j]) for j in np.argsort(-scores[i])[:100]}
                      for i, q in enumerate(queries)}
    return dense_rows(timers, runs, vectors, qrels), load, f"{len(texts):,}"


def query_rows(rounds: int = 4) -> tuple[list[list[str]], str]:
    from intentrank.index import Index

    queries, qrels = test_split("scifact")
    texts = [q.text for q in queries]
    index = Index.open(Path("indexes/scifact"))
    emb = index.embedder
    models = {"fp32 ONNX export (before; `--precision fp32`)": emb.onnx.get(emb, "fp32"),
              "int8 ONNX export (default)": emb.onnx.get(emb, "int8")}
    timers, load = interleave({n: lambda c, m=m: np.vstack([m.encode_queries([t]) for t in c])
                               for n, m in models.items()}, texts * rounds, 100)
    vectors = {n: np.asarray(t["out"])[:len(texts)] for n, t in timers.items()}
    runs = {n: {q.id: {index.ids[r]: float(x) for r, x in zip(h.rows, h.scores, strict=True)}
                for q, h in zip(queries, index.search_dense(texts, 100, query_vectors=v),
                                strict=True)} for n, v in vectors.items()}
    rows = dense_rows(timers, runs, vectors, qrels)
    rows[0][-1] = "1"  # the first row against itself, as published
    return rows, load


@contextlib.contextmanager
def nan_guards_kept() -> Iterator[None]:
    """Models loaded inside keep their softmax NaN guards (the sessions before
    :mod:`intentrank.models.onnx_graph`)."""
    import intentrank.models.onnx_embedder as onnx_embedder

    dropping = onnx_embedder.drop_softmax_nan_guards
    onnx_embedder.drop_softmax_nan_guards = lambda model: model
    try:
        yield
    finally:
        onnx_embedder.drop_softmax_nan_guards = dropping


def graph_rows(n_texts: int = 1000) -> tuple[list[list[str]], str, int, int]:
    """Each model with its softmax NaN guards (before) and without (now), interleaved: the
    bundled reranker at both precisions on :func:`scifact_pairs`, the packaged int8 MiniLM
    (``--backend onnx``) on ``n_texts`` SciFact abstracts."""
    from intentrank.models.cross_encoder import load_cross_encoder
    from intentrank.models.embedder import load_embedder

    pairs, texts = scifact_pairs()
    texts = texts[:n_texts]
    rows, loads = [], []
    for label, load_model, items, chunk in (
            ("reranker int8 (default)", lambda: load_cross_encoder(), pairs, 60),
            ("reranker fp32 (`precision: fp32`)", lambda: load_cross_encoder(precision="fp32"),
             pairs, 60),
            ("packaged int8 MiniLM (`--backend onnx`)", lambda: load_embedder(backend="onnx"),
             texts, CHUNK)):
        with nan_guards_kept():
            before = load_model()
        now = load_model()
        run = (lambda m: m.predict) if "reranker" in label else \
            (lambda m: lambda c: m.encode_passages(c, batch_size=64))
        timers, load = interleave({"guards kept (before)": run(before),
                                   "guards dropped (now)": run(now)}, items, chunk)
        loads.append(load)
        ref = timers["guards kept (before)"]
        for name, timer in timers.items():
            diff = np.abs(np.asarray(timer["out"]) - np.asarray(ref["out"])).max()
            rows.append(row(f"{label}, {name}", timer, ref, [f"{diff:.2g}"]))
    return rows, ", ".join(loads), len(pairs), len(texts)


def scifact_pairs() -> tuple[list[tuple[str, str]], list[str]]:
    """BM25's top 30 of :data:`PAIRS_QUERIES` SciFact test queries (seed 1) as (query,
    passage) pairs, and every abstract's text."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index

    ds = load_dataset(DATA / "scifact")
    texts = {d.id: d.full_text() for d in ds.corpus()}
    queries = random.Random(1).sample(ds.split("test")[0], PAIRS_QUERIES)
    index = Index.open(Path("indexes/scifact"))
    hits = index.search_bm25([q.text for q in queries], 30)
    return [(q.text, texts[index.ids[r]]) for q, h in zip(queries, hits, strict=True)
            for r in h.rows.tolist()], list(texts.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", action="store_true", help="only the query encoders (section "
                    "query-speed)")
    ap.add_argument("--graph", action="store_true", help="only the softmax NaN guards, kept "
                    "and dropped (section onnx-graph)")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.graph:
        rows, load, n_pairs, n_texts = graph_rows()
        publish_tables("onnx-graph", header() + "\n" + table(
            ["model, session", *SPEED, "max abs diff"], rows),
            {"load": load, "pairs": str(n_pairs), "texts": f"{n_texts:,}"})
        return
    if args.queries:
        rows, load = query_rows()
        publish_tables("query-speed", header() + "\n" + table(
            ["query encoder", "queries/s (median)", *SPEED[1:], "dense nDCG@10", "p",
             "min cos"], rows), {"load": load})
        return
    ce_rows, ce_load, n_pairs = cross_encoder_rows()
    emb_rows, emb_load, n_docs = embedder_rows()
    index = index_memory()
    publish_tables("speed", "\n\n".join([
        header(), table(["method", *SPEED, "max abs diff"], ce_rows),
        table(["method", *SPEED, "nDCG@10", "p", "min cos"], emb_rows)]), {
        "ce.pairs": str(n_pairs), "ce.load": ce_load, "emb.docs": n_docs, "emb.load": emb_load,
        "index.wall": f"{index['wall_s']:.0f}", "index.rss": f"{index['peak_rss_mib']:.0f}",
        "index.legs": ", ".join(f"{k} {v:.1f} s" for k, v in index["build_seconds"].items())})


if __name__ == "__main__":
    main()
