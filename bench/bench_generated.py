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

from report import DATA, ROOT, header, log, publish, rank_scores, save_json, table

CUTS = (10, 100, 200, 400, 1000)
RRF = {"rrf(bm25,dense)": ("bm25", "dense"), "rrf(bm25,tfidf)": ("bm25", "tfidf"),
       "rrf(all four)": ("bm25", "dense", "tfidf", "graph")}


def open_index(name: str) -> Any:
    from intentrank.data.dataset import load_dataset
    from intentrank.index import open_or_build

    ds = load_dataset(DATA / name)
    return open_or_build(ds.corpus, ROOT / "indexes" / name, progress=True,
                         source=str(ds.root))


def systems(idx: Any, texts: list[str]) -> dict[str, list[dict[str, float]]]:
    """Runs of the four single legs at depth 1000 and four fusions of them."""
    from intentrank.fuse.interleave import interleave
    from intentrank.fuse.rrf import rrf

    legs = {leg: [[idx.ids[r] for r in h.rows] for h in getattr(idx, f"search_{leg}")(texts, 1000)]
            for leg in ("bm25", "dense", "tfidf", "graph")}
    out = {leg: [rank_scores(x) for x in ids] for leg, ids in legs.items()}
    for name, parts in RRF.items():
        out[name] = [rrf([legs[p][q] for p in parts]) for q in range(len(texts))]
    out["interleave(bm25,dense)"] = [rank_scores(interleave(pair))
                                     for pair in zip(legs["bm25"], legs["dense"], strict=True)]
    return out


def evaluate(queries: list[Any], qrels: dict, runs: dict[str, list[dict[str, float]]],
             metrics: list[str]) -> dict[str, dict[str, float]]:
    from intentrank.measures.metrics import evaluate as ev

    return {name: ev({q.id: run[i] for i, q in enumerate(queries)}, qrels, metrics).aggregate
            for name, run in runs.items()}


def recall_table(name: str, root: Path) -> dict[str, Any]:
    """Recall per question kind and nDCG@10 per system on a generated set."""
    from intentrank.data.dataset import load_dataset

    ds = load_dataset(root)
    queries, qrels = ds.split("generated")
    meta = ds.query_metadata()
    runs = systems(open_index(name), [q.text for q in queries])
    out: dict[str, Any] = {"n": {}, "recall": {}}
    for kind in ("single", "pair"):
        sel = [i for i, q in enumerate(queries) if meta[q.id]["kind"] == kind]
        out["n"][kind] = len(sel)
        if sel:
            sub = [queries[i] for i in sel]
            out["recall"][kind] = evaluate(sub, {q.id: qrels[q.id] for q in sub}, {
                s: [runs[s][i] for i in sel] for s in ("bm25", "dense", "interleave(bm25,dense)")
            }, [f"R@{c}" for c in CUTS])
    out["ndcg_generated"] = evaluate(queries, qrels, runs, ["nDCG@10"])
    return out


def tau_on_scifact(generated: dict[str, dict[str, float]]) -> dict[str, Any]:
    from scipy.stats import kendalltau

    from intentrank.data.dataset import load_dataset

    queries, qrels = load_dataset(DATA / "scifact").split("test")
    real = evaluate(queries, qrels, systems(open_index("scifact"), [q.text for q in queries]),
                    ["nDCG@10"])
    names = sorted(real)
    a, b = [generated[n]["nDCG@10"] for n in names], [real[n]["nDCG@10"] for n in names]
    tau = kendalltau(a, b)
    return {"systems": names, "generated": a, "real": b, "tau": float(tau.statistic),
            "p": float(tau.pvalue)}


def generation_summary(root: Path) -> dict[str, Any]:
    """Counts from the attempts log (right while a run is still going), the recorded model
    and speed from generation.json, and the first kept question of each category and the
    first attempt of each rejection."""
    from collections import Counter

    attempts = [json.loads(x) for x in (root / "attempts.jsonl").open(encoding="utf-8")]
    status = Counter(a["status"] for a in attempts)
    gen = json.loads((root / "generation.json").read_text())
    samples: dict[str, dict[str, Any]] = {}
    for a in attempts:
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
                  table(["kind", "retriever", *(f"R@{c}" for c in CUTS)],
                        [[kind, system, *(f"{100 * row[f'R@{c}']:.1f}" for c in CUTS)]
                         for kind, rows in r["recall"].items() for system, row in rows.items()]),
                  "", f"<details><summary>{name}: one generated question per category, and one "
                      f"rejected attempt per reason</summary>", ""]
        for key, a in sorted(info["samples"].items()):
            detail = f" ({a['detail']})" if a["detail"] else ""
            lines.append(f"- **{key}** [{a['user']}, docs {', '.join(a['documents'])}]: "
                         f"\"{a['question'] or '-'}\" -> \"{a['answer'][:160]}\"{detail}")
        lines += ["", "</details>", ""]
    if tau is not None:
        lines += ["**Are generated questions a usable proxy?** SciFact, eight retrieval "
                  "pipelines, nDCG@10 x100 on the generated questions and on the 300 real test "
                  "queries:", "", table(["pipeline", "generated", "real test"], [
                      [n, f"{100 * g:.2f}", f"{100 * t:.2f}"] for n, g, t in
                      zip(tau["systems"], tau["generated"], tau["real"], strict=True)]),
                  "", f"Kendall's tau between the two orders: {tau['tau']:.3f} "
                      f"(p = {tau['p']:.3g}, {len(tau['systems'])} pipelines)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    results: dict[str, Any] = {}
    for name in ("scifact", "cranfield", "vaswani"):
        root = ROOT / "runs" / "generated" / name
        if not (root / "queries.jsonl").exists():
            log(f"no generated set at {root}; skipped")
            continue
        log(name)
        results[name] = {**recall_table(name, root), "generation": generation_summary(root)}
    tau = tau_on_scifact(results["scifact"]["ndcg_generated"]) if "scifact" in results \
        else None
    save_json(ROOT / "runs" / "bench_generated.json", {"results": results, "tau": tau}, indent=2)
    publish("generated-sets", markdown(results, tau))


if __name__ == "__main__":
    main()
