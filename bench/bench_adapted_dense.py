"""The dense encoder fine-tuned per corpus (issue 13, use 2): zero-shot vs fine-tuned MiniLM.

    .venv/bin/python bench/bench_adapted_dense.py --collections scifact

Training data, pipelines and tests: bench/sections/adapted-dense.md; `intentrank bench
adapted-dense` runs every collection and merges the runs (``--merge``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import run_line
from report import DATA, ROOT, log, machine, publish_tables, save_json, table

RUNS = ROOT / "runs"
CE_CACHE = RUNS / "bench_adapted_dense_ce.json"  # bundled-CE scores, shared by rows and runs

DENSE = {"dense": {"depth": 100}}
SPARSE = {"sparse": {"depth": 100}}
GRAPH = {"graph": {"depth": 100}}
CE = {"cross_encoder": {"top_k": 100, "backend": "onnx", "max_length": 128}}
CE_RRF = [{"cutoff": 30}, {"rrf_with_input": {"stage": CE, "rrf_k": 60, "name": "ce_rrf"}},
          {"cutoff": 10}]
# name -> (parent name or None, pipeline steps after the parent's output)
PIPELINES: dict[str, tuple[str | None, list[Any]]] = {
    "Dense only": (None, [DENSE]),
    "RRF(BM25, dense)": (None, [{"fuse": {"method": "rrf", "rrf_k": 60, "inputs": [
        {"bm25": {"depth": 100}}, DENSE]}}, {"cutoff": 100}]),
    "RRF(BM25, dense) + CE": ("RRF(BM25, dense)", CE_RRF),
    "Tri-modal": (None, [{"fuse": {"method": "weighted", "weights": [0.50, 0.35, 0.15],
                                   "inputs": [DENSE, SPARSE, GRAPH]}}, {"cutoff": 100}]),
    "Tri-modal + CE": ("Tri-modal", CE_RRF),
}
# (labelled split trained on besides the generated set, epochs): SciFact's train labels too
TRAINING = {"scifact": ("train", 2), "cranfield": (None, 3), "vaswani": (None, 3)}
SETTINGS = dict(negatives_per_query=1, depth=30, batch_size=32, max_seq_length=128, lr=3e-5)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collections", nargs="*", default=["scifact"],
                   help="collections to measure (none: only render --out and --merge)")
    p.add_argument("--set", default="", help="train on runs/generated/<collection>-SET "
                   "(e.g. 'train', made with --config search-queries) instead of "
                   "runs/generated/<collection>")
    p.add_argument("--budget-minutes", type=float, default=25.0)
    p.add_argument("--pipelines", nargs="+", default=list(PIPELINES),
                   help=f"rows to measure (of {list(PIPELINES)})")
    p.add_argument("--out", type=Path, default=RUNS / "bench_adapted_dense.json")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--merge", nargs="*", type=Path, default=[],
                   help="result files of earlier runs to add to --out before rendering")
    return p.parse_args()


def train(name: str, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The fine-tuned model of ``name`` (trained unless there)."""
    from intentrank.training.embedder import train_embedder
    from intentrank.training.reranker import TRAINING_JSON

    split, epochs = TRAINING[name]
    out = RUNS / "models" / f"emb-{name}-{split or args.set or 'generated'}"
    if not (out / TRAINING_JSON).exists():
        source = RUNS / "generated" / (f"{name}-{args.set}" if args.set else name)
        gen = (source, json.loads((source / "generation.json").read_text())["settings"]["split"])
        first, extra = ((DATA / name, split), [gen]) if split else (gen, [])
        log(f"training {out.name}")
        train_embedder(first[0], out, ROOT / "indexes" / name, split=first[1], extra=extra,
                       epochs=epochs, time_budget_s=args.budget_minutes * 60, progress=False,
                       log=log, **SETTINGS)
    return out, json.loads((out / TRAINING_JSON).read_text())


def tuned_index(name: str, model: Path, info: dict[str, Any]) -> tuple[Any, float]:
    """The collection indexed with the fine-tuned encoder (rebuilt when the model changed;
    no embedding cache: a retrained model keeps its directory name)."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index, IndexSettings, build_index
    from intentrank.index.settings import DenseSettings

    path = RUNS / "indexes" / f"{name}-{model.name}"
    stamp = path.parent / f"{path.name}.model.json"
    want = {"model": str(model), "created": info["created"]}
    old = json.loads(stamp.read_text()) if stamp.exists() else {}
    if Index.exists(path) and {k: old.get(k) for k in want} == want:
        return Index(path), old.get("build_s", 0.0)
    log(f"building {path}")
    start = time.perf_counter()
    build_index(load_dataset(DATA / name).corpus(), path,
                IndexSettings(dense=DenseSettings(model=str(model))), overwrite=True,
                embedding_cache=False, log=log)
    seconds = round(time.perf_counter() - start, 1)
    stamp.write_text(json.dumps({**want, "build_s": seconds}))
    return Index(path), seconds


class CachedScorer:
    """The bundled CE with its scores kept by (query, passage) in ``CE_CACHE``: the zero-shot
    and fine-tuned rows share most candidates. Exact: the bundled scorer scores one pair at a
    time."""

    max_length = 128

    def __init__(self) -> None:
        from intentrank.models.cross_encoder import load_cross_encoder

        self.inner = load_cross_encoder(None, "onnx", 128)
        self.name, self.scores = getattr(self.inner, "name", "-"), {}

    def predict(self, pairs: list[tuple[str, str]], batch_size: int = 8) -> Any:
        import hashlib

        import numpy as np

        if CE_CACHE.exists():  # other runs may have scored some meanwhile
            self.scores.update(json.loads(CE_CACHE.read_text()))
        keys = [hashlib.sha1("\x00".join(p).encode()).hexdigest() for p in pairs]
        todo = {k: p for k, p in zip(keys, pairs, strict=True) if k not in self.scores}
        if todo:
            new = self.inner.predict(list(todo.values()), batch_size)
            self.scores.update(zip(todo, map(float, new), strict=True))
            tmp = CE_CACHE.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self.scores))
            tmp.replace(CE_CACHE)
        return np.asarray([self.scores[k] for k in keys], dtype=np.float32)


def run_all(idx: Any, queries: list[Any], wanted: list[str], scorer: CachedScorer,
            pipelines: dict[str, tuple[str | None, list[Any]]] = PIPELINES
            ) -> dict[str, dict[str, Any]]:
    """Each pipeline's run on ``queries`` (a child continues from its parent's rankings, which
    ``wanted`` lists before it)."""
    from intentrank.core.config import build_pipeline
    from intentrank.pipelines import build_context
    from intentrank.types import Trace

    ctx = build_context(idx, **{"cross_encoder:None:onnx:128": scorer})
    rankings: dict[str, list[Any]] = {}
    runs = {}
    for name in wanted:
        parent, steps = pipelines[name]
        stage, start = build_pipeline(steps, ctx), time.perf_counter()
        if parent is None:
            rankings[name] = out = stage.run(queries).rankings
        else:
            rankings[name] = out = stage(list(rankings[parent]), Trace())
        runs[name] = {"run": {r.query.id: {d.doc_id: d.score for d in r.docs} for r in out},
                      "seconds": time.perf_counter() - start}
        log(f"  {name}: {runs[name]['seconds']:.0f}s")
    return runs


def one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.measures.metrics import evaluate
    from intentrank.measures.significance import paired_test

    scorer = CachedScorer()
    model, info = train(name, args)
    tuned, build_s = tuned_index(name, model, info)
    queries, qrels = load_dataset(DATA / name).split("test")
    wanted = [p for p in PIPELINES if p in args.pipelines and (name == "scifact"
                                                                or "Tri-modal" not in p)]
    rows: dict[str, Any] = {}
    per: dict[str, dict[str, dict[str, float]]] = {}
    for label, idx in (("zero-shot", Index(ROOT / "indexes" / name)), ("fine-tuned", tuned)):
        log(f"{name} {label}")
        for p, r in run_all(idx, queries, wanted, scorer).items():
            res = evaluate(r["run"], qrels, ["nDCG@10", "Recall@100"])
            per.setdefault(p, {})[label] = res.column("nDCG@10")
            rows.setdefault(p, {})[label] = {
                "nDCG@10": res.aggregate["nDCG@10"], "Recall@100": res.aggregate["Recall@100"],
                "ms_per_query": round(1000 * r["seconds"] / len(queries), 1)}
    for p, both in per.items():
        t = paired_test(both["zero-shot"], both["fine-tuned"], "nDCG@10")
        rows[p]["delta"], rows[p]["p"] = t.delta, t.p_randomization
    return {"n_queries": len(queries), "rows": rows, "model": str(model.relative_to(RUNS.parent)),
            "training": {"sources": [f"{s['dataset']} {s['split']} ({s['queries']} queries)"
                                     for s in info["sources"]],
                         "queries": info["n_queries"], "rows_per_epoch": info["rows_per_epoch"],
                         "rows_trained": info["rows_trained"], "steps": info["steps_done"],
                         "epochs": info["settings"]["epochs"], "stopped_by": info["stopped_by"],
                         "minutes": round((info["seconds"]["training"]
                                           + info["seconds"]["mining"]) / 60, 1),
                         "index_minutes": round(build_s / 60, 1),
                         "loss": [info["loss_first10"], info["loss_last10"]]}}


def slug(name: str) -> str:
    """A collection's row name as a value name: 'cranfield (train set)' -> 'cranfield-train-set'."""
    return name.replace(" (", "-").rstrip(")").replace(" ", "-")


def section(results: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The section's header line and table, and the values its prose
    (bench/sections/adapted-dense.md: the runs, whether each goal of issue 13 is met) reads."""
    rows, values = [], {}
    for name, r in results.items():
        t, key = r["training"], slug(name)
        done = t["rows_trained"] / max(t["rows_per_epoch"], 1)
        cost = (f"{'; '.join(t['sources'])}: {t['rows_trained']} examples, {t['steps']} "
                f"steps ({done:.1f} of {t['epochs']} epochs planned, stopped by "
                f"{t['stopped_by']}), {t['minutes']} min + {t['index_minutes']} min "
                f"re-indexing")
        for i, (p, row) in enumerate(r["rows"].items()):
            z, f = row["zero-shot"], row["fine-tuned"]
            rows.append([name if i == 0 else "", p, f"{100 * z['nDCG@10']:.2f}",
                         f"{100 * f['nDCG@10']:.2f}",
                         f"{100 * row['delta']:+.2f}" + ("†" if row["p"] < 0.05 else ""),
                         f"{row['p']:.3f}",
                         f"{100 * z['Recall@100']:.1f} / {100 * f['Recall@100']:.1f}",
                         cost if i == 0 else ""])
        best_p, best = max(((p, 100 * row["fine-tuned"]["nDCG@10"])
                            for p, row in r["rows"].items()), key=lambda x: x[1])
        dense = r["rows"]["Dense only"]
        goal = SCIFACT_GOAL if name == "scifact" else BM25.get(name.split(" ")[0], 0) + 8
        gains = [p for p, row in r["rows"].items() if row["p"] < 0.05 and row["delta"] > 0]
        losses = [p for p, row in r["rows"].items() if row["p"] < 0.05 and row["delta"] < 0]
        values |= {f"{key}.{k}": str(v) for k, v in {
            "run": f"`{r['run']['command']}` ({r['run']['date']})",
            "met": "met" if best >= goal else "not met", "goal": f"{goal:.2f}",
            "best": f"{best_p} {best:.2f}",
            "dense": f"{100 * dense['zero-shot']['nDCG@10']:.2f} -> "
                     f"{100 * dense['fine-tuned']['nDCG@10']:.2f} (p = {dense['p']:.3f})",
            "examples": t["rows_trained"], "steps": t["steps"], "queries": t.get("queries"),
            "minutes": t["minutes"], "index_minutes": t["index_minutes"],
            "moved": (f"significant gains in {', '.join(gains)}" if gains else
                      "no row gains significantly") + (
                f", significant losses in {', '.join(losses)}" if losses else "")}.items()}
    md = table(["collection", "pipeline", "zero-shot", "fine-tuned", "Δ", "p",
                "recall zero-shot / fine-tuned", "training"], rows)
    return f"- machine: {machine()}, no GPU; shared with other jobs while measured\n\n{md}", values


# nDCG@10 x100 of BM25 on the test queries (section `retrieval`) and the goals of issue 13
BM25 = {"cranfield": 37.27, "vaswani": 42.80}
SCIFACT_GOAL = 76.0


def main() -> None:
    args = parse_args()
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    for path in args.merge:
        results.update(json.loads(path.read_text()))
    for collection in args.collections:
        name = f"{collection} ({args.set} set)" if args.set else collection
        log(name)
        command, date = run_line()
        results[name] = {**one(collection, args), "run": {"command": command, "date": date}}
        save_json(args.out, results, indent=2)
    save_json(args.out, results, indent=2)
    publish_tables("adapted-dense", *section(results), write=not args.no_write)


if __name__ == "__main__":
    main()
