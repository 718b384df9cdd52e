"""Coverage-aware list ranking (RichRAG, method 4) against RAG-Fusion, MMR, the max-score
pool and the plain pipeline, on aspect-labelled question sets, through the experiment
harness (``src/intentrank/experiments/coverage.yaml``).

    python bench/bench_coverage.py sets       # runs/aspects/<corpus>-<how>.jsonl
    python bench/bench_coverage.py run --sample 40 --ordinary 40   # docs/benchmarks.md

The sets are built as ``generate/aspect_sets.py`` says; the runs: `intentrank bench
coverage-0.5b` (and coverage-1.5b, coverage-oracle, coverage-oracle-bare). The prose of each
section is its template, bench/sections/coverage-<explorer>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import DATA, ROOT, header, publish_tables, rank_scores, table

RUNS = ROOT / "runs" / "aspects"
METRICS = ("NCOM@10", "alpha_nDCG@10", "ERR_IA@10", "StRecall@10", "nDCG@10")
COVERAGE = ("coverage", "coverage (aspect)", "coverage (calibrated)", "coverage (cosine)")
SYSTEMS = ("plain", "dense", "RAG-Fusion", "MMR", "max-score pool", "pool + CE", *COVERAGE)
LLMS = {"0.5b": "embedded", "1.5b": "llamacpp:qwen2.5-coder-1.5b"}
# oracle: no explorer; each question's labelled aspects (on composed sets the two real
# queries it was made of) are its aspects; oracle-bare: the same without their trailing full
# stop, as the 0.5B writes them (the cross-encoder's coverage scores turned out to depend on it)
ORACLES = ("oracle", "oracle-bare")


def make_sets(n: int = 100, seed: int = 0) -> None:
    from intentrank.data.aspects import write_aspect_set
    from intentrank.data.dataset import load_dataset
    from intentrank.generate.aspect_sets import compose_pairs, from_generated, restyled
    from intentrank.index import Index

    params: dict[str, Any] = {"n": n, "seed": seed, "split": "test", "min_cosine": 0.3,
                              "max_cosine": 0.9, "made": time.strftime("%Y-%m-%d %H:%M")}
    for corpus in ("scifact", "cranfield"):
        ds, index = load_dataset(DATA / corpus), Index.open(ROOT / "indexes" / corpus)
        queries, qrels = ds.split("test")
        vecs = index.encode_queries([q.text for q in queries])
        composed = compose_pairs(queries, qrels, vecs, index.doc_text, n, seed)
        write_aspect_set(composed, RUNS / f"{corpus}-composed.jsonl")
        write_aspect_set(restyled(composed, "sentence"),
                         RUNS / f"{corpus}-composed-sentence.jsonl")
        params[f"{corpus}-composed"] = len(composed)
        generated = []  # this runs, then the generated-questions issue's
        for gen in (RUNS / f"gen-{corpus}", ROOT / "runs" / "generated" / corpus):
            if (gen / "queries.jsonl").exists():
                found = from_generated(gen / "queries.jsonl", index.doc_text,
                                       index.row_of.__contains__)
                generated += [replace(q, id=f"{gen.name}:{q.id}") for q in found]
                params[f"{corpus}-generated-from-{gen.relative_to(ROOT)}"] = len(found)
        if generated:
            write_aspect_set(generated, RUNS / f"{corpus}-generated.jsonl")
        print(corpus, {k: v for k, v in params.items() if k.startswith(corpus)})
    (RUNS / "sets.json").write_text(json.dumps(params, indent=2) + "\n")


def run_set(name: str, explorer: str, sample: int, llm: Any) -> dict[str, Any]:
    """The experiment on one aspect set; per-question scores of every measure."""
    from intentrank.data.aspects import load_aspect_set
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment
    from intentrank.index import Index
    from intentrank.measures.diversity import evaluate_diversity
    from intentrank.measures.ncom import NcomScorer
    from intentrank.types import Query

    questions = load_aspect_set(RUNS / f"{name}.jsonl")[:sample or None]
    corpus = name.split("-")[0]
    index = Index.open(ROOT / "indexes" / corpus)
    spec = load_experiment("coverage").replace(dataset=corpus, sample=0,
                                               title=f"coverage on {name}")
    queries = [Query(q.id, q.text) for q in questions]
    if explorer in ORACLES:  # the labelled aspects, the pipelines without their explorer
        spec = spec.replace(pipelines=[replace(p, node=[
            s for s in p.node if not (isinstance(s, dict) and set(s) == {"aspects"})])
            if isinstance(p.node, list) else p for p in spec.pipelines])
        queries = [Query(q.id, q.text).with_derived("aspect", [
            a.text.rstrip(". ") if explorer == "oracle-bare" else a.text for a in q.aspects],
            explorer) for q in questions]
    started = time.perf_counter()
    result = run_experiment(spec, index=index, queries=queries,
                            qrels={q.id: q.qrels() for q in questions}, llm=llm)
    tops = {r.name: {x.query.id: x.doc_ids[:10] for x in r.rankings} for r in result.pipelines}
    scorers = {q.id: NcomScorer([a.answer for a in q.aspects], index.doc_text)
               for q in questions}
    pools = {q.id: [d for t in tops.values() for d in t.get(q.id, [])] + list(q.qrels())
             for q in questions}  # NCOM's silver list: every system's top 10 and the gold
    per: dict[str, dict[str, dict[str, float]]] = {}
    for r in result.pipelines:
        top = tops[r.name]
        div = evaluate_diversity({q: rank_scores(ids) for q, ids in top.items()}, questions)
        per[r.name] = {q.id: {
            **div.per_query[q.id],
            "NCOM@10": scorers[q.id].ncom(top.get(q.id, []), pools[q.id], 10),
            "nDCG@10": r.scores.per_query.get(q.id, {}).get("nDCG@10", 0.0)} for q in questions}
    explore = result.result("max-score pool")
    asp = [len(x.query.derived_of("aspect")) for x in explore.rankings]
    counters = explore.trace.stages.get("aspects")
    return {"set": name, "corpus": corpus, "llm": explorer, "n": len(questions),
            "seconds": time.perf_counter() - started, "per_query": per,
            "latency": {r.name: r.latency for r in result.pipelines},
            "aspects_mean": sum(asp) / max(len(asp), 1),
            "aspects_hist": {str(k): asp.count(k) for k in sorted(set(asp))},
            "fallbacks": counters.counters.get("fallbacks", 0) if counters else 0,
            "describe": {r.name: r.describe for r in result.pipelines}}


def run_ordinary(sample: int, llm: Any) -> dict[str, Any]:
    """The cost on ordinary single-aspect queries: the experiment file as it stands."""
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment

    result = run_experiment(load_experiment("coverage").replace(sample=sample), llm=llm,
                            data_root=DATA)
    return {"per_query": {r.name: {q: {"nDCG@10": s["nDCG@10"]} for q, s in
                                   r.scores.per_query.items()} for r in result.pipelines},
            "latency": {r.name: r.latency for r in result.pipelines}, "n": result.n_queries}


def _test(per: dict, a: str, b: str, metric: str) -> Any:
    from intentrank.measures.significance import paired_test

    return paired_test({q: v[metric] for q, v in per[a].items()},
                       {q: v[metric] for q, v in per[b].items()}, metric, 10_000, 0)


def scores(res: dict[str, Any], metrics: tuple[str, ...] = METRICS, base: str = "plain") -> str:
    """Mean of each metric, with ``*`` and the p of the test against ``base``; ms/query."""
    per, rows = res["per_query"], []
    for name in [s for s in SYSTEMS if s in per]:
        cells = [f"{sum(v[m] for v in per[name].values()) / max(len(per[name]), 1):.4f}"
                 for m in metrics]
        if name != base:
            ps = [_test(per, base, name, m).p_randomization for m in metrics]
            cells = [f"{c}{'*' if p < 0.05 else ''} ({p:.3f})" for c, p in zip(cells, ps,
                                                                                strict=True)]
        rows.append([name, *cells, f"{sum(res['latency'][name].values()):.0f}"])
    return table(["system", *metrics, "ms/query"], rows, "|---|" + "---:|" * (len(metrics) + 1))


def goal(res: dict[str, Any], key: str) -> dict[str, str]:
    """The goal lines (each coverage system against RAG-Fusion and MMR on alpha-nDCG@10 and
    NCOM@10) and whether it is met (better on all four, each with p < 0.05)."""
    per, lines, met = res["per_query"], [], {}
    for mine in [c for c in COVERAGE if c in per]:
        met[mine] = "yes"
        for other in ("RAG-Fusion", "MMR"):
            for m in ("alpha_nDCG@10", "NCOM@10"):
                t = _test(per, other, mine, m)
                better = "not better" if t.delta <= 0 else "better, significant" if (
                    t.p_randomization < 0.05) else "better, not significant"
                met[mine] = met[mine] if better == "better, significant" else "no"
                lines.append(f"- {mine} vs {other} on {m}: {t.mean_b:.4f} vs {t.mean_a:.4f} "
                             f"(delta {t.delta:+.4f}, randomization p "
                             f"{t.p_randomization:.3f}): {better}")
    return {f"{key}.goal": "\n".join(lines),
            f"{key}.met": ", ".join(f"{c}: {v}" for c, v in met.items())}


def section(results: list[dict[str, Any]], ordinary: dict[str, Any] | None
            ) -> tuple[str, dict[str, str]]:
    """The header lines and tables of the section and the values its template reads."""
    out, values = [header()], {}
    for res in results:
        key = res["set"]
        out += [scores(res), scores(res, METRICS, "dense"), table(
            ["system", "stage: ms/query"],
            [[s, ", ".join(f"{k} {v:.0f}" for k, v in res["latency"][s].items() if v >= 0.5)]
             for s in SYSTEMS if s in res["latency"]])]
        values.update({f"{key}.n": str(res["n"]), f"{key}.mean": f"{res['aspects_mean']:.2f}",
                       f"{key}.hist": str(res["aspects_hist"]),
                       f"{key}.fallbacks": f"{res['fallbacks']:.0f}",
                       f"{key}.seconds": f"{res['seconds']:.0f}", **goal(res, key)})
    for res in results:  # another explorer: the 0.5B's numbers on the same questions
        base = RUNS / f"bench-{res['set']}-0.5b.json"
        if res["llm"] == "0.5b" or not base.exists():
            continue
        other, ids = json.loads(base.read_text()), list(res["per_query"]["plain"])
        values[f"{res['set']}.same"] = str(len(ids))
        out.append(table(["system", res["llm"], "0.5b"], [[name, *(" / ".join(
            f"{sum(r['per_query'][name][q][m] for q in ids) / len(ids):.4f}"
            for m in ("alpha_nDCG@10", "NCOM@10")) for r in (res, other))]
            for name in SYSTEMS if name in res["per_query"] and name in other["per_query"]],
            "|---|---:|---:|"))
    if ordinary:
        values["ordinary.n"] = str(ordinary["n"])
        out += [scores(ordinary, ("nDCG@10",)), scores(ordinary, ("nDCG@10",), "dense")]
    return "\n\n".join(out), values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sets")
    r = sub.add_parser("run")
    r.add_argument("--sample", type=int, default=40)
    r.add_argument("--sets", default="scifact-composed,cranfield-composed,"
                                      "scifact-generated,cranfield-generated")
    r.add_argument("--llm", default="0.5b", choices=[*LLMS, *ORACLES],
                   help="the explorer; oracle = the set's labelled aspects, no LLM; "
                        "oracle-bare = the same without their trailing full stop")
    r.add_argument("--ordinary", type=int, default=0, help="SciFact test queries (0: skip)")
    r.add_argument("--render-only", action="store_true", help="from the runs/aspects results")
    args = ap.parse_args()
    if args.cmd == "sets":
        return make_sets()
    from intentrank.llm.client import load_llm

    llm = None if args.llm in ORACLES or args.render_only else load_llm(LLMS[args.llm])
    results = []
    for name in args.sets.split(","):
        out = RUNS / f"bench-{name}-{args.llm}.json"
        if not args.render_only and (RUNS / f"{name}.jsonl").exists():
            out.write_text(json.dumps(run_set(name, args.llm, args.sample, llm)) + "\n")
        if out.exists():
            results.append(json.loads(out.read_text()))
    path = RUNS / f"bench-ordinary-{args.llm}.json"
    if args.ordinary and not args.render_only:
        path.write_text(json.dumps(run_ordinary(args.ordinary, llm)))
    markdown, values = section(results, json.loads(path.read_text()) if path.exists() else None)
    publish_tables(f"coverage-{args.llm}", markdown, values)


if __name__ == "__main__":
    main()
