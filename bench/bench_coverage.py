"""Coverage-aware list ranking (RichRAG, method 4) against RAG-Fusion, MMR, the max-score
pool and the plain pipeline, on aspect-labelled question sets, through the experiment
harness (``src/intentrank/experiments/coverage.yaml``).

    python bench/bench_coverage.py sets       # runs/aspects/<corpus>-<how>.jsonl
    python bench/bench_coverage.py run --sample 40 --ordinary 50   # docs/benchmarks.md

The sets are built as ``generate/aspect_sets.py`` says; the runs: `intentrank bench
coverage-0.5b` (and coverage-1.5b, coverage-oracle, coverage-oracle-bare).
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

from report import DATA, ROOT, header, write_section

RUNS = ROOT / "runs" / "aspects"
CORPORA = ("scifact", "cranfield")
METRICS = ("NCOM@10", "alpha_nDCG@10", "ERR_IA@10", "StRecall@10", "nDCG@10")
SYSTEMS = ("plain", "dense", "RAG-Fusion", "MMR", "max-score pool", "pool + CE", "coverage",
           "coverage (aspect)", "coverage (calibrated)", "coverage (cosine)")
COVERAGE = ("coverage", "coverage (aspect)", "coverage (calibrated)", "coverage (cosine)")
LLM_OF = "0.5b"
LLMS = {"0.5b": "embedded", "1.5b": "llamacpp:qwen2.5-coder-1.5b"}
# ``--llm oracle``: no explorer; each question's labelled aspects (on composed sets the two
# real queries it was made of) are its aspects, to separate the explorer from the ranking.
ORACLE = "oracle"
# ``--llm oracle-bare``: the same aspects with their trailing full stop dropped, as the 0.5B
# writes them (the cross-encoder's coverage scores turned out to depend on it)
BARE = "oracle-bare"


def without_explorer(node: Any) -> Any:
    """A pipeline node with its ``aspects`` steps removed (the oracle run's aspects are given)."""
    if isinstance(node, list):
        return [without_explorer(s) for s in node
                if not (isinstance(s, dict) and set(s) == {"aspects"})]
    return node


def make_sets(n: int, seed: int) -> None:
    from intentrank.data.aspects import write_aspect_set
    from intentrank.data.dataset import load_dataset
    from intentrank.generate.aspect_sets import compose_pairs, from_generated, restyled
    from intentrank.index import Index

    params: dict[str, Any] = {"n": n, "seed": seed, "split": "test", "min_cosine": 0.3,
                              "max_cosine": 0.9, "made": time.strftime("%Y-%m-%d %H:%M")}
    for corpus in CORPORA:
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


def run_set(name: str, corpus: str, llm_name: str, sample: int, llm: Any) -> dict[str, Any]:
    """The experiment on one aspect set; per-question scores of every measure."""
    from intentrank.data.aspects import load_aspect_set
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment
    from intentrank.index import Index
    from intentrank.measures.diversity import evaluate_diversity
    from intentrank.measures.ncom import NcomScorer
    from intentrank.types import Query

    questions = load_aspect_set(RUNS / f"{name}.jsonl")[:sample or None]
    index = Index.open(ROOT / "indexes" / corpus)
    spec = load_experiment("coverage").replace(dataset=corpus, sample=0,
                                               title=f"coverage on {name}")
    queries = [Query(q.id, q.text) for q in questions]
    if llm_name in (ORACLE, BARE):
        spec = spec.replace(pipelines=[replace(p, node=without_explorer(p.node))
                                       for p in spec.pipelines])
        queries = [Query(q.id, q.text).with_derived(
            "aspect", [a.text.rstrip(". ") if llm_name == BARE else a.text for a in q.aspects],
            llm_name) for q in questions]
    qrels = {q.id: q.qrels() for q in questions}
    started = time.perf_counter()
    result = run_experiment(spec, index=index, queries=queries, qrels=qrels, llm=llm)
    per: dict[str, dict[str, dict[str, float]]] = {}
    tops = {r.name: {x.query.id: x.doc_ids[:10] for x in r.rankings} for r in result.pipelines}
    scorers = {q.id: NcomScorer([a.answer for a in q.aspects], index.doc_text)
               for q in questions}
    for r in result.pipelines:
        div = evaluate_diversity({x.query.id: {d: float(10 - i) for i, d in enumerate(ids)}
                                  for x in r.rankings for ids in [x.doc_ids[:10]]}, questions)
        per[r.name] = {}
        for q in questions:
            pool = [d for t in tops.values() for d in t.get(q.id, [])] + list(q.qrels())
            row = dict(div.per_query[q.id])
            row["NCOM@10"] = scorers[q.id].ncom(tops[r.name].get(q.id, []), pool, 10)
            row["nDCG@10"] = r.scores.per_query.get(q.id, {}).get("nDCG@10", 0.0)
            per[r.name][q.id] = row
    explore = result.result("max-score pool")
    asp = [len(x.query.derived_of("aspect")) for x in explore.rankings]
    counters = explore.trace.stages.get("aspects")
    return {
        "set": name, "corpus": corpus, "llm": llm_name, "n": len(questions),
        "seconds": time.perf_counter() - started, "per_query": per,
        "latency": {r.name: r.latency for r in result.pipelines},
        "aspects_mean": sum(asp) / max(len(asp), 1),
        "aspects_hist": {str(k): asp.count(k) for k in sorted(set(asp))},
        "fallbacks": (counters.counters.get("fallbacks", 0) if counters else 0),
        "describe": {r.name: r.describe for r in result.pipelines},
    }


def run_ordinary(sample: int, llm: Any) -> dict[str, Any]:
    """The cost on ordinary single-aspect queries: the experiment file as it stands."""
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment

    spec = load_experiment("coverage").replace(sample=sample)
    result = run_experiment(spec, llm=llm, data_root=DATA)
    return {"per_query": {r.name: {q: {"nDCG@10": s["nDCG@10"]} for q, s in
                                   r.scores.per_query.items()} for r in result.pipelines},
            "latency": {r.name: r.latency for r in result.pipelines}, "n": result.n_queries}


def _means(per: dict[str, dict[str, float]], metric: str) -> float:
    return sum(v[metric] for v in per.values()) / max(len(per), 1)


def _test(a: dict, b: dict, metric: str) -> Any:
    from intentrank.measures.significance import paired_test

    return paired_test({q: v[metric] for q, v in a.items()},
                       {q: v[metric] for q, v in b.items()}, metric, 10_000, 0)


def table(res: dict[str, Any], metrics: tuple[str, ...] = METRICS, base: str = "plain") -> str:
    per = res["per_query"]
    lines = ["| system | " + " | ".join(metrics) + " | ms/query |",
             "|---|" + "---:|" * (len(metrics) + 1)]
    for name in [s for s in SYSTEMS if s in per]:
        cells = []
        for m in metrics:
            mean = _means(per[name], m)
            if name == base:
                cells.append(f"{mean:.4f}")
                continue
            t = _test(per[base], per[name], m)
            mark = "*" if t.p_randomization < 0.05 else ""
            cells.append(f"{mean:.4f}{mark} ({t.p_randomization:.3f})")
        total = sum(res["latency"][name].values())
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {total:.0f} |")
    return "\n".join(lines)


def goal_lines(res: dict[str, Any]) -> list[str]:
    per, out = res["per_query"], []
    for mine, other in [(c, o) for c in COVERAGE if c in per for o in ("RAG-Fusion", "MMR")]:
        for m in ("alpha_nDCG@10", "NCOM@10"):
            t = _test(per[other], per[mine], m)
            verdict = "better, significant" if t.delta > 0 and t.p_randomization < 0.05 else (
                "better, not significant" if t.delta > 0 else "not better")
            out.append(f"{mine} vs {other} on {m}: {t.mean_b:.4f} vs {t.mean_a:.4f} "
                       f"(delta {t.delta:+.4f}, randomization p {t.p_randomization:.3f}): "
                       f"{verdict}")
    return out


def goal_met(res: dict[str, Any], mine: str = "coverage") -> bool:
    """Whether ``mine`` beats RAG-Fusion and MMR on alpha-nDCG@10 and NCOM@10, each with a
    paired randomization p < 0.05."""
    per = res["per_query"]
    return all((t := _test(per[o], per[mine], m)).delta > 0 and t.p_randomization < 0.05
               for o in ("RAG-Fusion", "MMR") for m in ("alpha_nDCG@10", "NCOM@10"))


def latency_table(res: dict[str, Any]) -> str:
    rows = ["| system | stage: ms/query |", "|---|---|"]
    for name in [s for s in SYSTEMS if s in res["latency"]]:
        parts = ", ".join(f"{k} {v:.0f}" for k, v in res["latency"][name].items() if v >= 0.5)
        rows.append(f"| {name} | {parts} |")
    return "\n".join(rows)


def render(results: list[dict[str, Any]], ordinary: dict[str, Any] | None,
           rendered_only: bool = False) -> str:
    head = header()
    if rendered_only:  # the numbers come from the runs' JSON files: say which run made them
        made = {"0.5b": "run --sample 100",
                "1.5b": "run --llm 1.5b --sample 20 --sets cranfield-composed",
                ORACLE: "run --llm oracle --sample 100 --sets scifact-composed,"
                        "cranfield-composed",
                BARE: "run --llm oracle-bare --sample 100 --sets scifact-composed"}[LLM_OF]
        ordinary_cmd = ("; the ordinary-query rows: `python bench/bench_coverage.py run "
                        "--sample 40 --ordinary 40`" if LLM_OF == "0.5b" else "")
        lines = head.splitlines()
        lines[0] = (f"- command: `python bench/bench_coverage.py {made}`{ordinary_cmd} (per-set "
                    f"results in runs/aspects/bench-*-{LLM_OF}.json; this text re-rendered from "
                    f"them with `--render-only`)")
        stamps = sorted(f.stat().st_mtime for f in RUNS.glob(f"bench-*-{LLM_OF}.json"))
        if stamps:
            lines[2] += " (rendered; the runs finished " + ", ".join(
                time.strftime("%H:%M", time.gmtime(t)) for t in stamps) + " UTC)"
        head = "\n".join(lines) + "\n"
    out = [f"## Coverage-aware list ranking (method 4, RichRAG), explorer {LLM_OF}", "", head,
           "Systems (`src/intentrank/experiments/coverage.yaml`, run by the harness): plain = "
           "dense top-100 + the bundled cross-encoder, top 10; the others start from "
           + ("the set's labelled aspects (no explorer, no LLM: on a composed question the "
              "two real queries it was made of" + (", each without its trailing full stop"
                                                   if LLM_OF == BARE else "") + ") "
              if LLM_OF in (ORACLE, BARE) else
              "LLM aspects (`aspects: {n: 4}`) ") + "and dense top-20 per `query + aspect`: "
           "max-score pool, RAG-Fusion (RRF of the aspect lists), pool + CE (the pool "
           "reranked against the query), MMR (lambda 0.5), coverage (greedy, phi = "
           "CE(query + aspect, doc)), coverage (aspect) (phi = CE(aspect, doc)), coverage "
           "(calibrated) (per-aspect min-max of the CE logits over the pool) and coverage "
           "(cosine). Cells: mean, `*` "
           "when the paired randomization test against "
           "plain gives p < 0.05, the p-value in brackets. NCOM@10: sub-answer = key sentence "
           "of the aspect's best gold document, silver list over the union of every system's "
           "top 10 and the gold documents (docs/coverage.md). Sets: docs/coverage.md "
           "\"Aspect-labelled sets\". What the numbers say (the goal is not met): "
           "docs/coverage.md, \"Results\".", ""]
    for res in results:
        out += [f"### {res['set']} ({res['n']} questions, explorer {res['llm']})", "",
                table(res), "",
                *(["The same against dense alone (p-values of the paired randomization "
                   "test against `dense`):", "", table(res, METRICS, "dense"), ""]
                  if "dense" in res["per_query"] else []),
                f"Aspects per question: mean {res['aspects_mean']:.2f}, histogram "
                f"{res['aspects_hist']}, explorer fallbacks {res['fallbacks']:.0f}. "
                f"Wall time {res['seconds']:.0f} s.", "", "Goal (coverage beats RAG-Fusion "
                "and MMR on alpha-nDCG@10 and NCOM, significantly):", "",
                *[f"- {line}" for line in goal_lines(res)], "",
                "Goal met: " + ", ".join(f"{c}: {'yes' if goal_met(res, c) else 'no'}"
                                         for c in COVERAGE if c in res["per_query"]) + ".",
                "",
                "Latency per stage (ms/query; `multi_faceted` includes its "
                "`multi_faceted/dense`):", "",
                latency_table(res), ""]
    for res in results:  # another explorer: the 0.5B's numbers on the same questions
        base = RUNS / f"bench-{res['set']}-0.5b.json"
        if res["llm"] == "0.5b" or not base.exists():
            continue
        other, ids = json.loads(base.read_text()), list(res["per_query"]["plain"])
        out += [f"Explorers on the same {len(ids)} {res['set']} questions (alpha-nDCG@10 / "
                f"NCOM@10; NCOM's pool is each run's own):", "",
                f"| system | {res['llm']} | 0.5b |", "|---|---:|---:|"]
        for name in [s for s in SYSTEMS if s in res["per_query"] and s in other["per_query"]]:
            cells = [" / ".join(f"{sum(r['per_query'][name][q][m] for q in ids) / len(ids):.4f}"
                                for m in ("alpha_nDCG@10", "NCOM@10"))
                     for r in (res, other)]
            out.append(f"| {name} | {cells[0]} | {cells[1]} |")
        out.append("")
    if ordinary:
        out += [f"### Cost on ordinary SciFact test queries ({ordinary['n']}, seed-0 sample)",
                "", table(ordinary, ("nDCG@10",)), "",
                *(["Against dense alone:", "", table(ordinary, ("nDCG@10",), "dense"), ""]
                  if "dense" in ordinary["per_query"] else [])]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sets")
    s.add_argument("--n", type=int, default=100)
    s.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("--sample", type=int, default=40)
    r.add_argument("--sets", default="scifact-composed,cranfield-composed,"
                                      "scifact-generated,cranfield-generated")
    r.add_argument("--llm", default="0.5b", choices=sorted(LLMS) + [ORACLE, BARE],
                   help="the explorer; oracle = the set's labelled aspects, no LLM; "
                        "oracle-bare = the same without their trailing full stop")
    r.add_argument("--ordinary", type=int, default=0, help="SciFact test queries (0: skip)")
    r.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    if args.cmd == "sets":
        make_sets(args.n, args.seed)
        return
    from intentrank.llm.client import load_llm

    results = []
    for name in args.sets.split(","):
        out = RUNS / f"bench-{name}-{args.llm}.json"
        if not args.render_only and (RUNS / f"{name}.jsonl").exists():
            llm = None if args.llm in (ORACLE, BARE) else load_llm(LLMS[args.llm])
            res = run_set(name, name.split("-")[0], args.llm, args.sample, llm)
            out.write_text(json.dumps(res) + "\n")
        if out.exists():
            results.append(json.loads(out.read_text()))
    ordinary = None
    path = RUNS / f"bench-ordinary-{args.llm}.json"
    if args.ordinary and not args.render_only:
        path.write_text(json.dumps(run_ordinary(args.ordinary, load_llm(LLMS[args.llm]))))
    if path.exists():
        ordinary = json.loads(path.read_text())
    global LLM_OF
    LLM_OF = args.llm
    md = render(results, ordinary, args.render_only)
    (RUNS / f"bench-{args.llm}.md").write_text(md + "\n")
    write_section(f"coverage-{args.llm}", md)
    print(md)


if __name__ == "__main__":
    main()
