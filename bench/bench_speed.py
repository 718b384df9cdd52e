"""Model speed on 2 cores, old and new side by side in one run (issue 35).

    python bench/bench_speed.py [--pairs-queries 20] [--chunk 200] [--no-write]
    python bench/bench_speed.py --queries      # section "query-speed" only

Each way of running a model is timed interleaved with the others, in chunks (wall-clock
medians and CPU seconds per item); the ways compared: bench/sections/speed.md and
bench/sections/query-speed.md.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_latency import index_memory
from report import DATA, header, p_value, publish, table


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Timer:
    """Wall and CPU time of each call of one method, by chunk."""

    def __init__(self, fn: Callable[[Sequence], np.ndarray]) -> None:
        self.fn, self.rates, self.cpu, self.items, self.outputs = fn, [], 0.0, 0, []

    def __call__(self, chunk: Sequence) -> None:
        start, cpu = time.perf_counter(), cpu_seconds()
        out = self.fn(chunk)
        self.rates.append(len(chunk) / (time.perf_counter() - start))
        self.cpu += cpu_seconds() - cpu
        self.items += len(chunk)
        self.outputs.append(out)

    def row(self, name: str, reference: Timer, extra: Sequence[str]) -> list[str]:
        rate, ref = float(np.median(self.rates)), float(np.median(reference.rates))
        return [name, f"{rate:.1f}", f"{np.percentile(self.rates, 25):.1f}-"
                f"{np.percentile(self.rates, 75):.1f}", f"{1000 * self.cpu / self.items:.1f}",
                f"{rate / ref:.2f}x", *extra]


def interleave(timers: Sequence[Timer], items: Sequence, chunk: int) -> list[float]:
    """Run every timer on each chunk in turn; the load average after each round."""
    loads = []
    for start in range(0, len(items), chunk):
        for timer in timers:
            timer(items[start:start + chunk])
        loads.append(os.getloadavg()[0])
        print(f"[bench] {min(start + chunk, len(items))}/{len(items)} load "
              f"{loads[-1]:.1f}", file=sys.stderr, flush=True)
    return loads


def cross_encoder_rows(n_queries: int) -> tuple[list[list[str]], list[float], int]:
    import onnxruntime as ort

    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.models.cross_encoder import load_cross_encoder
    from intentrank.models.onnx_embedder import pad_encodings

    ds = load_dataset(DATA / "scifact")
    texts = {d.id: d.full_text() for d in ds.corpus()}
    queries, _ = ds.split("test")
    queries = random.Random(1).sample(queries, n_queries)
    index = Index.open(Path("indexes/scifact"))
    hits = index.search_bm25([q.text for q in queries], 30)
    pairs = [(q.text, texts[index.ids[r]]) for q, h in zip(queries, hits, strict=True)
             for r in h.rows.tolist()]
    now = load_cross_encoder()  # the bundled model: one pair per run, ItemRunner
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
    two_threads = ort.InferenceSession(str(now.onnx_path), opts,
                                       providers=["CPUExecutionProvider"])

    def run(session: object, encodings: list) -> np.ndarray:
        feeds = pad_encodings(encodings)
        return session.run(None, {n: feeds[n] for n in now.input_names})[0].reshape(-1)

    def before(chunk: Sequence) -> np.ndarray:
        encodings = now.tokenizer.encode_batch([tuple(p) for p in chunk])
        return 1 / (1 + np.exp(-np.array([run(two_threads, [e])[0] for e in encodings])))

    def batched(chunk: Sequence) -> np.ndarray:
        encodings = now.tokenizer.encode_batch([tuple(p) for p in chunk])
        out = np.concatenate([run(two_threads, encodings[i:i + 8])
                              for i in range(0, len(encodings), 8)])
        return 1 / (1 + np.exp(-out))

    timers = {"one pair per run, one 2-thread run at a time (before)": Timer(before),
              "one pair per run, two 1-thread runs at once (now)": Timer(now.predict),
              "batches of 8 (before 2026-11-24; batch-dependent)": Timer(batched)}
    loads = interleave(list(timers.values()), pairs, 60)
    ref = next(iter(timers.values()))
    base = np.concatenate(ref.outputs)
    rows = [t.row(name, ref, [f"{np.abs(np.concatenate(t.outputs) - base).max():.2g}"])
            for name, t in timers.items()]
    return rows, loads, len(pairs)


def embedder_rows(chunk: int) -> tuple[list[list[str]], list[float], str]:
    from intentrank.data.dataset import load_dataset
    from intentrank.measures.metrics import evaluate
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
    timers = {name: Timer(lambda c, m=m: m.encode_passages(c, batch_size=64))
              for name, m in models.items()}
    perm = np.random.default_rng(0).permutation(len(texts))  # chunks mix lengths alike
    loads = interleave(list(timers.values()), [texts[i] for i in perm], chunk)
    results, rows = {}, []
    ref = next(iter(timers.values()))
    vectors = {}
    for name, t in timers.items():
        vectors[name] = np.empty((len(texts), t.outputs[0].shape[1]), dtype=np.float32)
        vectors[name][perm] = np.vstack(t.outputs)
    for name, model in models.items():
        scores = model.encode_queries([x.text for x in queries]) @ vectors[name].T
        run = {}
        for qi, query in enumerate(queries):
            top = np.argsort(-scores[qi])[:100]
            run[query.id] = {ids[j]: float(scores[qi, j]) for j in top}
        results[name] = evaluate(run, qrels, ["nDCG@10"])
    base_name = next(iter(models))
    base = results[base_name]
    for name, t in timers.items():
        cos = (vectors[name] * vectors[base_name]).sum(axis=1)
        p = p_value(base.column("nDCG@10"), results[name].column("nDCG@10"))
        rows.append(t.row(name, ref, [f"{results[name].aggregate['nDCG@10']:.4f}",
                                      p if name != base_name else "-", f"{cos.min():.4f}"]))
    return rows, loads, f"{len(texts):,}"


def query_rows(rounds: int = 4) -> tuple[list[list[str]], list[float]]:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.measures.metrics import evaluate

    queries, qrels = load_dataset(DATA / "scifact").split("test")
    texts = [q.text for q in queries]
    index = Index.open(Path("indexes/scifact"))
    emb = index.embedder
    models = {"fp32 ONNX export (before; `--precision fp32`)": emb.onnx.get(emb, "fp32"),
              "int8 ONNX export (default)": emb.onnx.get(emb, "int8")}
    timers = {name: Timer(lambda c, m=m: np.vstack([m.encode_queries([t]) for t in c]))
              for name, m in models.items()}
    loads = interleave(list(timers.values()), texts * rounds, 100)
    ref, rows, base = next(iter(timers.values())), [], None
    for name, t in timers.items():
        vectors = np.vstack(t.outputs)[:len(texts)]
        hits = index.search_dense(texts, 100, query_vectors=vectors)
        run = {q.id: {index.ids[r]: float(x) for r, x in zip(h.rows, h.scores, strict=True)}
               for q, h in zip(queries, hits, strict=True)}
        result = evaluate(run, qrels, ["nDCG@10"])
        if base is None:
            base, base_vectors, p, cos = result, vectors, "-", "1"
        else:
            p = p_value(base.column("nDCG@10"), result.column("nDCG@10"))
            cos = f"{(vectors * base_vectors).sum(axis=1).min():.4f}"
        rows.append(t.row(name, ref, [f"{result.aggregate['nDCG@10']:.4f}", p, cos]))
    return rows, loads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs-queries", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=200, help="texts per interleaved chunk")
    ap.add_argument("--no-write", action="store_true", help="print, leave the docs alone")
    ap.add_argument("--queries", action="store_true", help="only the query encoders (section "
                    "query-speed)")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.queries:
        rows, loads = query_rows()
        publish("query-speed", "\n\n".join([
            "## Query encoding: fp32 and int8 exports in one run (issue 35)", header().strip(),
            f"SciFact's 300 test queries, each encoded alone (as a search does), four rounds, "
            f"the two encoders interleaved in chunks of 100; dense retrieval against the "
            f"default index's int8 passage vectors (`indexes/scifact`); p: paired "
            f"randomization test against the first row; min cos: the lowest cosine between a "
            f"query's vectors. Load average during the run {min(loads):.1f}-{max(loads):.1f}.",
            table(["query encoder", "queries/s (median)", "interquartile", "CPU ms each",
                   "speed vs first", "dense nDCG@10", "p", "min cos"], rows)]),
            write=not args.no_write)
        return
    ce_rows, ce_loads, n_pairs = cross_encoder_rows(args.pairs_queries)
    emb_rows, emb_loads, n_docs = embedder_rows(args.chunk)
    index = index_memory()
    legs = ", ".join(f"{k} {v:.1f} s" for k, v in index["build_seconds"].items())
    speed = ["method", "per s (median)", "interquartile", "CPU ms each", "speed vs first"]
    md = "\n\n".join([
        "## Speed: models on 2 cores, old and new in one run (issue 35)",
        header().strip(),
        f"Cross-encoder: the bundled int8 model on {n_pairs} pairs (BM25 top 30 of "
        f"{args.pairs_queries} SciFact test queries, seed 1), the three ways interleaved in "
        f"chunks of 60 pairs; load average during the run {min(ce_loads):.1f}-"
        f"{max(ce_loads):.1f}. Max abs diff: sigmoid scores against the first row.",
        table([*speed, "max abs diff"], ce_rows),
        f"Embedder: all {n_docs} SciFact abstracts (title + text, 256 tokens), the three "
        f"ways interleaved in chunks of {args.chunk}; dense retrieval on the 300 test queries "
        f"(each model encodes its own queries, fp32 for the first two); p: paired "
        f"randomization test against the first row; min cos: the lowest cosine between a "
        f"document's vector and its first-row vector. Load average during the run "
        f"{min(emb_loads):.1f}-{max(emb_loads):.1f}.",
        table([*speed, "nDCG@10", "p", "min cos"], emb_rows),
        f"Index: `intentrank index ../shared/data/scifact` with the defaults in a fresh cache "
        f"(the model's ONNX exports made and checked on the way): {index['wall_s']:.0f} s in "
        f"all, per leg {legs}; peak RSS {index['peak_rss_mib']:.0f} MiB.",
    ])
    publish("speed", md, write=not args.no_write)


if __name__ == "__main__":
    main()
