"""Generated question sets as test sets (issue 13, use 1).

    .venv/bin/python bench/bench_generated.py            # sets in runs/generated/<collection>

Recall of the gold documents per kind of question, and Kendall's tau between the orders of
SciFact pipelines on generated and real queries: bench/sections/generated-sets.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import DATA, ROOT, header, publish, rank_scores, save_json

CUTS = (10, 100, 200, 400, 1000)
DEPTH = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", type=Path, default=ROOT / "runs" / "generated")
    p.add_argument("--collections", nargs="+", default=["scifact", "cranfield", "vaswani"])
    p.add_argument("--split", default="generated")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_generated.json")
    p.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md alone")
    return p.parse_args(argv)


def open_index(name: str) -> Any:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import open_or_build

    ds = load_dataset(DATA / name)
    return open_or_build(ds.corpus, ROOT / "indexes" / name, progress=True,
                         source=str(ds.root))


def legs(idx: Any, texts: list[str], depth: int = DEPTH) -> dict[str, list[list[str]]]:
    """Doc-id lists per query for each single leg."""
    out = {}
    for leg, search in (("bm25", idx.search_bm25), ("dense", idx.search_dense),
                        ("tfidf", idx.search_tfidf), ("graph", idx.search_graph)):
        out[leg] = [[idx.ids[r] for r in h.rows] for h in search(texts, depth)]
    return out


def systems(single: dict[str, list[list[str]]]) -> dict[str, list[dict[str, float]]]:
    """Runs (one {doc: score} per query) of eight pipelines built from the legs."""
    from intentrank.fuse.interleave import interleave
    from intentrank.fuse.rrf import rrf

    n = len(single["bm25"])
    out = {leg: [rank_scores(x) for x in single[leg]] for leg in single}
    for name, parts in (("rrf(bm25,dense)", ("bm25", "dense")),
                        ("rrf(bm25,tfidf)", ("bm25", "tfidf")),
                        ("rrf(all four)", ("bm25", "dense", "tfidf", "graph"))):
        out[name] = [rrf([single[p][q] for p in parts]) for q in range(n)]
    out["interleave(bm25,dense)"] = [
        rank_scores(interleave([single["bm25"][q], single["dense"][q]])) for q in range(n)]
    return out


def evaluate(queries: list[Any], qrels: dict, runs: dict[str, list[dict[str, float]]],
             metrics: list[str]) -> dict[str, dict[str, float]]:
    from intentrank.measures.metrics import evaluate as ev

    return {name: ev({q.id: run[i] for i, q in enumerate(queries)}, qrels, metrics).aggregate
            for name, run in runs.items()}


def recall_table(name: str, root: Path, split: str) -> dict[str, Any]:
    from intentrank.data.dataset import load_dataset

    ds = load_dataset(root)
    queries, qrels = ds.split(split)
    meta = {}
    for line in (root / "queries.jsonl").open(encoding="utf-8"):
        rec = json.loads(line)
        meta[rec["_id"]] = rec["metadata"]
    idx = open_index(name)
    single = legs(idx, [q.text for q in queries])
    runs = systems(single)
    metrics = [f"R@{c}" for c in CUTS]
    out: dict[str, Any] = {"n": {}, "recall": {}}
    for kind in ("single", "pair"):
        sel = [i for i, q in enumerate(queries) if meta[q.id]["kind"] == kind]
        out["n"][kind] = len(sel)
        if not sel:
            continue
        sub_q = [queries[i] for i in sel]
        sub_runs = {s: [runs[s][i] for i in sel] for s in ("bm25", "dense",
                                                            "interleave(bm25,dense)")}
        out["recall"][kind] = evaluate(sub_q, {q.id: qrels[q.id] for q in sub_q}, sub_runs,
                                       metrics)
    out["ndcg_generated"] = evaluate(queries, qrels, runs, ["nDCG@10"])
    return out


def tau_on_scifact(generated: dict[str, dict[str, float]]) -> dict[str, Any]:
    from scipy.stats import kendalltau

    from intentrank.data.dataset import load_dataset

    ds = load_dataset(DATA / "scifact")
    queries, qrels = ds.split("test")
    idx = open_index("scifact")
    real = evaluate(queries, qrels, systems(legs(idx, [q.text for q in queries])), ["nDCG@10"])
    names = sorted(real)
    a = [generated[n]["nDCG@10"] for n in names]
    b = [real[n]["nDCG@10"] for n in names]
    tau = kendalltau(a, b)
    return {"systems": names, "generated": a, "real": b, "tau": float(tau.statistic),
            "p": float(tau.pvalue)}


def generation_summary(root: Path) -> dict[str, Any]:
    """Counts from the attempts log (right while a run is still going) and the recorded
    model and speed from generation.json."""
    from collections import Counter

    attempts = [json.loads(x) for x in (root / "attempts.jsonl").open(encoding="utf-8")]
    status = Counter(a["status"] for a in attempts)
    gen = json.loads((root / "generation.json").read_text())
    samples: dict[str, dict[str, Any]] = {}
    for a in attempts:  # the first kept question of each category, the first of each rejection
        keys = ([f"{k}={v}" for k, v in a["categories"].items()
                 if k in ("phrasing", "factuality", "linguistic-variation")]
                + ([f"two_document={a['pair_type']}"] if a.get("pair_type") else [])
                if a["status"] == "kept" else [f"rejected: {a['status']}"])
        for key in keys:
            samples.setdefault(key, a)
    return {"samples": samples, "attempts": len(attempts), "kept": status.pop("kept", 0),
            "rejected": dict(sorted(status.items())), "model": gen["identity"]["model"],
            "questions_per_minute": gen.get("questions_per_minute"),
            "seconds_per_attempt": round(sum(a["seconds"] for a in attempts) / len(attempts), 2)}


def markdown(results: dict[str, Any], tau: dict[str, Any] | None) -> str:
    lines = [header(), "",
             "Recall of the gold documents (x100) on generated questions, per collection and "
             "question kind; a two-document question counts 0.5 when one of its two gold "
             "documents is found. Sparse = BM25, dense = MiniLM, interleave = alternate the two "
             "lists, skipping repeats.", ""]
    for name, r in results.items():
        info = r["generation"]
        lines += [f"**{name}**: {r['n'].get('single', 0)} single-document and "
                  f"{r['n'].get('pair', 0)} two-document questions kept of "
                  f"{info['attempts']} attempts ({info['model']}; rejected: "
                  + ", ".join(f"{k} {v}" for k, v in info["rejected"].items())
                  + f"; {info['seconds_per_attempt']} s per attempt)", "",
                  "| kind | retriever | " + " | ".join(f"R@{c}" for c in CUTS) + " |",
                  "|---|---|" + "---|" * len(CUTS)]
        for kind, table in r["recall"].items():
            for system, row in table.items():
                lines.append(f"| {kind} | {system} | "
                             + " | ".join(f"{100 * row[f'R@{c}']:.1f}" for c in CUTS) + " |")
        lines += ["", f"<details><summary>{name}: one generated question per category, and one "
                      f"rejected attempt per reason</summary>", ""]
        for key, a in sorted(info["samples"].items()):
            detail = f" ({a['detail']})" if a["detail"] else ""
            lines.append(f"- **{key}** [{a['user']}, docs {', '.join(a['documents'])}]: "
                         f"\"{a['question'] or '-'}\" -> \"{a['answer'][:160]}\"{detail}")
        lines += ["", "</details>", ""]
    if tau is not None:
        lines += ["**Are generated questions a usable proxy?** SciFact, eight retrieval "
                  "pipelines, nDCG@10 x100 on the generated questions and on the 300 real test "
                  "queries:", "", "| pipeline | generated | real test |", "|---|---|---|"]
        for n, g, t in zip(tau["systems"], tau["generated"], tau["real"], strict=True):
            lines.append(f"| {n} | {100 * g:.2f} | {100 * t:.2f} |")
        lines += ["", f"Kendall's tau between the two orders: {tau['tau']:.3f} "
                      f"(p = {tau['p']:.3g}, {len(tau['systems'])} pipelines)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results: dict[str, Any] = {}
    for name in args.collections:
        root = args.sets / name
        if not (root / "queries.jsonl").exists():
            print(f"[bench] no generated set at {root}; skipped", file=sys.stderr)
            continue
        print(f"[bench] {name}", file=sys.stderr, flush=True)
        r = recall_table(name, root, args.split)
        r["generation"] = generation_summary(root)
        results[name] = r
    tau = tau_on_scifact(results["scifact"]["ndcg_generated"]) if "scifact" in results \
        else None
    save_json(args.out, {"results": results, "tau": tau}, indent=2)
    publish("generated-sets", markdown(results, tau), not args.no_write)


if __name__ == "__main__":
    main()
