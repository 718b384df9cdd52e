"""Encoders and the cross-encoder reranker (issue 3): speed on 2 cores and reranking quality.

    nice .venv/bin/python bench/bench_models.py                   # every phase, writes docs
    nice .venv/bin/python bench/bench_models.py --phases eval --no-write

Phases embed, train, speed, eval accumulate in runs/bench_models.json (they can run
separately); what each measures: bench/sections/models.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import DATA, ROOT, header, log, machine, publish_tables, save_json, table

RESULTS = ROOT / "runs" / "bench_models.json"
PHASES = ("embed", "train", "speed", "eval")
COLLECTIONS = ("scifact", "cranfield", "vaswani")
MAX_LENGTH, REPEATS, K = 128, 3, 100  # tokens per pair (training, reranking); BM25 candidates


def run_line() -> tuple[str, str]:
    """The command and UTC date of this run (recorded per phase)."""
    lines = dict(ln[2:].split(": ", 1) for ln in header().splitlines())
    return lines["command"].strip("`"), lines["date"]


def load_avg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def open_index(name: str, tmp: Path) -> Any:
    """``indexes/<name>`` if built (the CLI's default), else a BM25-only index in ``tmp``."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index, IndexSettings, build_index

    path = ROOT / "indexes" / name
    if Index.exists(path):
        return Index.open(path)
    ds = load_dataset(DATA / name)
    return build_index(ds.corpus(), tmp / name, IndexSettings(legs=("bm25",)))


def best_of(fns: dict[str, Callable[[], Any]], repeats: int = REPEATS
            ) -> tuple[dict[str, float], dict[str, Any]]:
    """Each function's best wall seconds over ``repeats`` rounds, the functions interleaved
    in each (fair under background load), and its last output."""
    best, out = dict.fromkeys(fns, float("inf")), {}
    for r in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            out[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t)
        log(f"round {r + 1}/{repeats}: " + ", ".join(f"{k} {v:.2f} s" for k, v in best.items()))
    return best, out


def phase_embed(n: int = 1000) -> dict[str, Any]:
    from intentrank.data.dataset import load_dataset
    from intentrank.models.embedder import load_embedder

    ds = load_dataset(DATA / "scifact")
    texts = [d.full_text() for _, d in zip(range(n), ds.corpus(), strict=False)]
    models = {"sentence-transformers fp32": load_embedder("minilm"),
              "onnx int8": load_embedder("minilm", "onnx")}
    for m in models.values():
        m.encode_passages(texts[:64])  # warm-up
    best = best_of({k: lambda m=m: m.encode_passages(texts, batch_size=64)
                    for k, m in models.items()})[0]
    tokens = models["onnx int8"].tokenizer.encode_batch(texts)
    mean_tokens = sum(min(len(e.ids), 256) for e in tokens) / len(tokens)
    return {"passages": len(texts), "repeats": REPEATS, "mean_tokens": mean_tokens,
            "passages_per_s": {k: len(texts) / v for k, v in best.items()},
            "load": load_avg()}


def phase_train(model_dir: Path, budget_min: float = 15.0) -> dict[str, Any]:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.training.reranker import train_reranker

    index_path = ROOT / "indexes" / "scifact"
    idx = Index.open(index_path) if Index.exists(index_path) else index_path
    res = train_reranker(load_dataset(DATA / "scifact"), model_dir, idx,
                         time_budget_s=budget_min * 60, max_length=MAX_LENGTH, onnx=True,
                         progress=True, log=log)
    return {"load_after": load_avg(), **res.info}


def candidate_pairs(idx: Any, queries: list, k: int) -> list[tuple[str, str]]:
    hits = idx.search_bm25([q.text for q in queries], k)
    return [(q.text, idx.doc_text(idx.ids[row])) for q, h in zip(queries, hits, strict=True)
            for row in h.rows.tolist()]


def phase_speed(model_dir: Path, tmp: Path, n_pairs: int = 200) -> dict[str, Any]:
    import numpy as np

    from intentrank.data.dataset import load_dataset
    from intentrank.models.cross_encoder import load_cross_encoder

    queries = load_dataset(DATA / "scifact").split("test")[0][:5]
    pairs = candidate_pairs(open_index("scifact", tmp), queries, n_pairs // 5)[:n_pairs]
    scorers = {f"{b} @{m}": load_cross_encoder(model_dir, b, m)
               for b in ("torch", "onnx") for m in (256, 128)}
    for s in scorers.values():
        s.predict(pairs[:16])  # warm-up
    best, scores = best_of({k: lambda s=s: s.predict(pairs, 8) for k, s in scorers.items()})
    rows = {}
    for name, score in scores.items():
        ref = scores[f"torch @{name.split('@')[1]}"]
        rows[name] = {"pairs_per_s": len(pairs) / best[name],
                      "max_abs_diff_vs_torch": float(np.abs(score - ref).max()),
                      "pearson_vs_torch": float(np.corrcoef(score, ref)[0, 1])}
    return {"pairs": len(pairs), "repeats": REPEATS, "batch_size": 8, "rows": rows,
            "load": load_avg()}


def rerank_eval(idx: Any, queries: list, qrels: dict, scorer: Any, k: int) -> dict[str, Any]:
    from intentrank.measures.metrics import evaluate
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.retrieve.retrievers import BM25Retriever

    bm25 = BM25Retriever(idx, depth=k)
    first = bm25.run(queries)
    metrics = ["nDCG@10", f"Recall@{k}"]
    base = evaluate(first.to_run(), qrels, metrics).aggregate
    stage = CrossEncoderReranker(idx, scorer, top_k=k)
    t = time.perf_counter()
    reranked = stage(first.rankings, first.trace)
    secs = time.perf_counter() - t
    run = {r.query.id: {d.doc_id: d.score for d in r.docs} for r in reranked}
    pairs = first.trace.stages["cross_encoder"].counters["pairs"]
    return {"queries": len(queries), "bm25": base, "ce": evaluate(run, qrels, metrics).aggregate,
            "rrf": evaluate(rrf_run(reranked), qrels, metrics).aggregate,
            "pairs": pairs, "seconds": secs, "pairs_per_s": pairs / secs, "load": load_avg()}


def rrf_run(rankings: list) -> dict[str, dict[str, float]]:
    """RRF (k=60) of the BM25 and cross-encoder ranks kept in each doc's stage scores."""
    from intentrank.fuse.rrf import rrf

    run = {}
    for r in rankings:
        orders = [[d.doc_id for d in sorted((d for d in r.docs if stage in d.stage_scores),
                                            key=lambda d, s=stage: -d.stage_scores[s])]
                  for stage in ("bm25", "cross_encoder")]
        run[r.query.id] = rrf(orders, rrf_k=60)
    return run


def phase_eval(model_dir: Path, tmp: Path, fp32_queries: int = 50) -> dict[str, Any]:
    """BM25 top-K -> the trained reranker (onnx int8) on each collection's test queries, and
    torch fp32 against int8 on the first ``fp32_queries`` of SciFact's."""
    from intentrank.data.dataset import load_dataset
    from intentrank.models.cross_encoder import load_cross_encoder

    int8 = load_cross_encoder(model_dir, "onnx", MAX_LENGTH)
    out: dict[str, Any] = {"k": K, "max_length": MAX_LENGTH}
    for name in COLLECTIONS:
        queries, qrels = load_dataset(DATA / name).split("test")
        idx = open_index(name, tmp)
        log(f"eval {name}: {len(queries)} queries x {K} candidates, onnx int8")
        out[name] = {"onnx_int8": rerank_eval(idx, queries, qrels, int8, K)}
        if name == "scifact":
            fp32 = load_cross_encoder(model_dir, "torch", MAX_LENGTH)
            sub = queries[:fp32_queries]
            sub_qrels = {q.id: qrels[q.id] for q in sub}
            out[name]["subset"] = {"torch_fp32": rerank_eval(idx, sub, sub_qrels, fp32, K),
                                   "onnx_int8": rerank_eval(idx, sub, sub_qrels, int8, K)}
    return out


def section(res: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The section's header line and tables, and the values its prose
    (bench/sections/models.md) reads."""
    md = [f"- machine: {machine()}", ""]
    values = {f"run.{phase}": f"`{cmd}` ({date})"
              for phase, (cmd, date) in res.get("runs", {}).items()}
    if e := res.get("embed"):
        values |= {"embed.passages": e["passages"], "embed.tokens": f"{e['mean_tokens']:.0f}",
                   "embed.repeats": e["repeats"], "embed.load": e["load"]}
        md += [table(["backend", "passages/s"],
                     [(k, f"{v:.1f}") for k, v in e["passages_per_s"].items()]), ""]
    if t := res.get("train"):
        s = t["settings"]
        values |= {f"train.{k}": v for k, v in {
            "loss": s["loss"], "threads": s["threads"], "split": t["split"],
            "queries": t["n_queries"], "dropped": t["queries_dropped_in_test"],
            "positives": t["positives_per_epoch"], "negatives": t["negatives_per_epoch"],
            "per_query": t["negatives"]["per_query"],
            "sources": " and ".join(t["negatives"]["sources"]),
            "budget": f"{s['time_budget_s'] / 60:.0f}", "steps": t["steps_done"],
            "planned": t["steps_planned"], "batch": s["batch_size"],
            "max_length": s["max_length"], "lr": s["lr"], "pairs": t["pairs_trained"],
            "seconds": f"{t['seconds']['training']:.0f}", "rate": f"{t['pairs_per_s']:.1f}",
            "mining": f"{t['seconds']['mining']:.0f}", "stopped_by": t["stopped_by"],
            "loss_first": t["loss_first50"], "loss_last": t["loss_last50"],
            "export": t.get("onnx", {}).get("seconds", "-")}.items()}
    if sp := res.get("speed"):
        values |= {"speed.pairs": sp["pairs"], "speed.batch": sp["batch_size"],
                   "speed.repeats": sp["repeats"], "speed.load": sp["load"]}
        md += [table(["backend @ max_length", "pairs/s", "max abs score diff vs torch",
                      "Pearson vs torch"],
                     [(k, f"{v['pairs_per_s']:.1f}", f"{v['max_abs_diff_vs_torch']:.4f}",
                       f"{v['pearson_vs_torch']:.4f}") for k, v in sp["rows"].items()]), ""]
    if ev := res.get("eval"):
        values |= {"eval.k": ev["k"], "eval.max_length": ev["max_length"]}
        rows = []
        for name in (c for c in COLLECTIONS if c in ev):
            r = ev[name]["onnx_int8"]
            recall = r["bm25"][f"Recall@{ev['k']}"]
            rows.append([name, r["queries"], *(f"{100 * r[k]['nDCG@10']:.2f}"
                                               for k in ("bm25", "ce", "rrf")),
                         f"{100 * recall:.2f}",
                         f"{r['pairs_per_s']:.1f}", "BM25+CE (ms-marco-MiniLM-L-6-v2) 68.8 "
                         "(BEIR)" if name == "scifact" else ""])
        md.append(table(["collection", "queries", "BM25", "BM25 -> CE", "RRF(BM25, CE)",
                         "Recall@100 (ceiling)", "CE pairs/s", "published"], rows))
        if sub := ev.get("scifact", {}).get("subset"):
            a, b = sub["torch_fp32"], sub["onnx_int8"]
            values |= {"fp32.queries": a["queries"], "fp32.ndcg": f"{100 * a['ce']['nDCG@10']:.2f}",
                       "fp32.rate": f"{a['pairs_per_s']:.1f}",
                       "int8.ndcg": f"{100 * b['ce']['nDCG@10']:.2f}",
                       "int8.rate": f"{b['pairs_per_s']:.1f}",
                       "fp32.bm25": f"{100 * a['bm25']['nDCG@10']:.2f}"}
    return "\n".join(md), {k: str(v) for k, v in values.items()}


def main() -> None:
    from intentrank.models.cross_encoder import default_reranker_dir

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default=",".join(PHASES), help="comma-separated phases")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    model_dir = default_reranker_dir("scifact")
    res = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for phase in filter(None, args.phases.split(",")):  # --phases '' only re-renders
            if phase not in PHASES:
                sys.exit(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
            res.setdefault("runs", {})[phase] = run_line()
            log(f"phase {phase} (load avg {load_avg()})")
            res[phase] = {"embed": lambda: phase_embed(),
                          "train": lambda: phase_train(model_dir),
                          "speed": lambda: phase_speed(model_dir, Path(tmp)),
                          "eval": lambda: phase_eval(model_dir, Path(tmp))}[phase]()
            res[phase].pop("query_ids", None)
            save_json(RESULTS, res)
    publish_tables("models", *section(res), write=not args.no_write)


if __name__ == "__main__":
    main()
