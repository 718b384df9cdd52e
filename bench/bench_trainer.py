"""The cross-encoder's hand-written training loop against sentence-transformers'
``CrossEncoderTrainer`` (issue 12): same data, same optimiser steps, same seed.

    nice -n 10 .venv/bin/python bench/bench_trainer.py                 # 200 train queries
    nice -n 10 .venv/bin/python bench/bench_trainer.py --train-queries 20 --eval-queries 5

The old loop is ``src/intentrank/training/reranker.py`` at ``--old-rev`` (read with ``git
show``, so it can be rerun after its deletion); the new one is the current
``train_reranker``. Both train on the same SciFact train sample (1 epoch, no time budget,
negatives mined from ``indexes/scifact``), export int8 ONNX, and rerank BM25's top ``--k``
of a fixed-seed sample of SciFact test queries with the ``cross_encoder`` stage (onnx
backend); nDCG@10 against BM25 alone. A 4-query run of each trainer warms up first.
Prints a markdown table and writes ``runs/bench_trainer.json``; docs/benchmarks.md is not
touched.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import DATA, ROOT, header, save_json  # noqa: E402

OLD_REV = "dba91ca"  # the last commit with the hand-written loop
OLD_PATH = "src/intentrank/training/reranker.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-queries", type=int, default=200)
    p.add_argument("--eval-queries", type=int, default=100)
    p.add_argument("--k", type=int, default=100, help="BM25 candidates reranked")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seeds", type=int, nargs="+", default=[13, 14, 15],
                   help="training seeds; both trainers train once per seed, in alternating "
                        "order (AB, BA, ...), so the machine's load falls on both")
    p.add_argument("--old-rev", default=OLD_REV)
    p.add_argument("--index", type=Path, default=ROOT / "indexes" / "scifact")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_trainer.json")
    return p.parse_args(argv)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def old_module(rev: str, tmp: Path) -> ModuleType:
    source = subprocess.run(["git", "show", f"{rev}:{OLD_PATH}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = tmp / "reranker_old.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("reranker_old", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def evaluate_reranker(idx: Any, queries: list, qrels: dict, model_dir: Path, k: int
                      ) -> dict[str, Any]:
    from intentrank.measures.metrics import evaluate
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.retrieve.retrievers import BM25Retriever

    first = BM25Retriever(idx, depth=k).run(queries)
    stage = CrossEncoderReranker(idx, model_dir, top_k=k, backend="onnx")
    t = time.perf_counter()
    reranked = stage(first.rankings, first.trace)
    secs = time.perf_counter() - t
    run = {r.query.id: {d.doc_id: d.score for d in r.docs} for r in reranked}
    return {"bm25": evaluate(first.to_run(), qrels, ["nDCG@10"]).aggregate["nDCG@10"],
            "nDCG@10": evaluate(run, qrels, ["nDCG@10"]).aggregate["nDCG@10"],
            "rerank_seconds": round(secs, 1), "load": load_avg()}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index, IndexSettings, build_index
    from intentrank.training.reranker import train_reranker

    ds = load_dataset(DATA / "scifact")
    tmp = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    idx = (Index.open(args.index) if Index.exists(args.index) else
           build_index(ds.corpus(), tmp / "index", IndexSettings(legs=("bm25", "dense"))))
    trainers = {"hand-written loop": old_module(args.old_rev, tmp).train_reranker,
                "CrossEncoderTrainer": train_reranker}
    common = dict(max_queries=args.train_queries, epochs=1, time_budget_s=None,
                  max_length=args.max_length, onnx=True, progress=False)
    queries, qrels = ds.sample("test", args.eval_queries, seed=0)
    res: dict[str, Any] = {"header": header(), "settings": {**vars(args), **common},
                           "eval_queries": [q.id for q in queries], "runs": []}
    for train in trainers.values():  # warm-up: imports, first kernels, caches
        train(ds, tmp / "warm-up", idx, **{**common, "max_queries": 4, "onnx": False})
    for i, seed in enumerate(args.seeds):
        for name in list(trainers)[:: 1 if i % 2 == 0 else -1]:
            print(f"seed {seed}: training with the {name} (load {load_avg()})", flush=True)
            info = trainers[name](ds, tmp / "model", idx, seed=seed, **common).info
            run = {"trainer": name, "seed": seed, "load_after_training": load_avg(),
                   **{key: info[key] for key in (
                       "steps_done", "steps_planned", "pairs_trained", "pairs_per_s",
                       "seconds", "loss_first50", "loss_last50", "query_ids")}}
            run.update(evaluate_reranker(idx, queries, qrels, tmp / "model", args.k))
            print(f"  {name}: {run['steps_done']} steps, {run['pairs_trained']} pairs in "
                  f"{info['seconds']['training']} s ({run['pairs_per_s']} pairs/s); loss "
                  f"{run['loss_first50']} -> {run['loss_last50']}; nDCG@10 "
                  f"{run['nDCG@10']:.4f}", flush=True)
            res["runs"].append(run)
        same = [r for r in res["runs"] if r["seed"] == seed]
        assert same[0]["query_ids"] == same[1]["query_ids"], "the trainers saw other queries"
        assert same[0]["pairs_trained"] == same[1]["pairs_trained"], "other pairs or steps"
    save_json(args.out, res, default=str)
    print(to_markdown(res, list(trainers)))
    shutil.rmtree(tmp, ignore_errors=True)


def to_markdown(res: dict[str, Any], names: list[str]) -> str:
    s, runs = res["settings"], res["runs"]
    lines = [res["header"], f"SciFact train sample of {s['train_queries']} queries, 1 epoch, "
             f"no budget, max_length {s['max_length']}, listwise, int8 ONNX; BM25 top-{s['k']} "
             f"of {len(res['eval_queries'])} SciFact test queries (seed-0 sample): BM25 alone "
             f"nDCG@10 {runs[0]['bm25']:.4f}.", "",
             "| trainer | seed | nDCG@10 | training s | pairs/s | steps | pairs | loss first/"
             "last 50 | load after |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['trainer']} | {r['seed']} | {r['nDCG@10']:.4f} | "
                     f"{r['seconds']['training']} | {r['pairs_per_s']} | {r['steps_done']}/"
                     f"{r['steps_planned']} | {r['pairs_trained']} | {r['loss_first50']} / "
                     f"{r['loss_last50']} | {r['load_after_training']} |")
    for name in names:
        mine = [r for r in runs if r["trainer"] == name]
        lines.append(f"| **{name}, mean** | | {mean(r['nDCG@10'] for r in mine):.4f} | "
                     f"{mean(r['seconds']['training'] for r in mine):.1f} | "
                     f"{mean(r['pairs_per_s'] for r in mine):.2f} | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
