"""Conversational query reformulation (issue 14): the source paper's Tables 1-3 layout, and
nDCG on labelled conversational sets, with the embedded LLMs.

    .venv/bin/python bench/bench_reformulation.py measure cast2021 --n 30 --llm embedded
    .venv/bin/python bench/bench_reformulation.py measure gen:runs/conversations/scifact-3t@scifact
    .venv/bin/python bench/bench_reformulation.py render

Sets: ``cast2019`` / ``cast2020`` (gold rewrites, no corpus: cosine only), ``cast2021`` (its
235 canonical passages as corpus), ``gen:<dir>@<index name>`` (a generated conversational
set). One JSON per run in runs/reformulation/; ``render`` puts every one into the section's
template, bench/sections/reformulation.md (its values keyed by the JSON's name).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from lib.results import DATA, ROOT, header, log, p_value, publish_tables, save_json, table

from intentrank.query.reformulate import METHODS as LLM
from intentrank.query.reformulate import NO_LLM_METHODS

OUT = ROOT / "runs" / "reformulation"
METHODS = ["raw", *NO_LLM_METHODS, *LLM, "gold"]
GENRE = {"cast2021": "web passage", "scifact": "scientific abstract",
         "cranfield": "aerodynamics research abstract"}
DEPTH = 100
METRICS = ["nDCG@3", "nDCG@10", "RR@10", "R@100"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("set")
    m.add_argument("--n", type=int, default=30, help="contextual turns sampled (seed 0)")
    m.add_argument("--llm", default="embedded", help="the reformulation LLM")
    m.add_argument("--methods", nargs="+", default=METHODS)
    m.add_argument("--no-rss", dest="rss", action="store_false",
                   help="skip the Reranker Support Score (a cross-encoder pass over every "
                        "method's BM25 top 100)")
    m.add_argument("--fused", nargs="*", default=[],
                   help="fused_reformulations rows, each methods joined by '+' (e.g. "
                        "raw+rewrite_full): the stage's RRF over their BM25 lists")
    m.add_argument("--cite-llm", nargs="*", default=[],
                   help="LLMs for the citation score (none: skipped)")
    m.add_argument("--cite-n", type=int, default=10)
    m.add_argument("--cite-methods", nargs="+", default=None,
                   help="methods compared by the citation score (default: all measured)")
    sub.add_parser("render")
    args = p.parse_args(argv)
    if args.cmd == "measure":
        measure(args)
        return
    results = {p.stem: json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))}
    if not results:
        raise SystemExit(f"no results in {OUT}")
    publish_tables("reformulation", *section(results))


# -- measuring -----------------------------------------------------------------------------

def load_set(name: str) -> tuple[list[Any], dict[str, str], Any, dict[str, dict[str, int]],
                                 str]:
    """(queries of every turn, gold rewrites, index or None, qrels or {}, genre)."""
    from intentrank.data.conversations import load_cast, write_cast2021_passages
    from intentrank.data.dataset import load_dataset
    from intentrank.index import IndexSettings, open_or_build

    if name in ("cast2019", "cast2020"):
        conversations = load_cast(int(name[4:]), DATA / "trec-cast")
        queries = [q for c in conversations for q in c.queries()]
        golds = {t.id: t.rewrite for c in conversations for t in c.turns if t.rewrite}
        return queries, golds, None, {}, "web passage"
    if name == "cast2021":
        root = write_cast2021_passages(ROOT / "runs" / "cast2021-passages", DATA / "trec-cast")
        ds = load_dataset(root)
        index = open_or_build(ds.corpus, ROOT / "indexes" / "cast2021-passages",
                              IndexSettings(legs=("bm25",)), source=str(root))
        genre = GENRE["cast2021"]
    elif name.startswith("gen:"):
        path, index_name = name[4:].rsplit("@", 1)
        ds = load_dataset(ROOT / path)
        index = open_or_build(ds.corpus, ROOT / "indexes" / index_name, source=str(ds.root))
        genre = GENRE.get(index_name, "passage")
    else:
        raise SystemExit(f"unknown set {name!r}")
    return list(ds.queries.values()), ds.gold_rewrites(), index, ds.split("test")[1], genre


def reformulate(method: str, queries: list[Any], golds: dict[str, str], llm: Any, genre: str
                ) -> tuple[list[Any], dict[str, Any]]:
    """The turns as ``method`` reformulates them, and its cost."""
    from intentrank.core.registry import BuildContext
    from intentrank.pipelines import build_pipeline
    from intentrank.query.reformulate import ConversationalReformulator
    from intentrank.types import Ranking, Trace

    t0, trace = time.perf_counter(), Trace()
    if method == "raw":
        out = list(queries)
    elif method == "gold":
        out = [q.reformulated(golds[q.id], "gold") for q in queries]
    else:
        stage = build_pipeline(method, BuildContext()) if method in NO_LLM_METHODS else \
            ConversationalReformulator(llm, method, genre=genre)
        out = [r.query for r in stage([Ranking(q) for q in queries], trace)]
    seconds = time.perf_counter() - t0
    c = trace.stages[method].counters if method in trace.stages else {}
    llm_seconds = c.get("llm_seconds", 0.0) + c.get("llm_cached_seconds", 0.0)
    return out, {"s_per_turn": (llm_seconds or seconds) / max(len(queries), 1),
                 "fallbacks": int(c.get("fallbacks", 0)),
                 "unchanged": int(c.get("unchanged", 0))}


def labelled(args: argparse.Namespace, result: dict[str, Any], reformulated: dict[str, list],
             turns: list[Any], golds: dict[str, str], index: Any, qrels: dict, llm: Any
             ) -> None:
    """BM25 nDCG of each method, alone and fused with the raw turn (RRF), its Reranker
    Support Score and the fused_reformulations rows (``--fused``: that stage's RRF of the
    methods' BM25 lists); with ``--cite-llm``, the citation score."""
    from intentrank.core.registry import BuildContext
    from intentrank.fuse.rrf import rrf
    from intentrank.llm.client import load_llm
    from intentrank.measures.label_free import citation_scores, reranker_support
    from intentrank.measures.metrics import evaluate
    from intentrank.models.cross_encoder import load_cross_encoder
    from intentrank.pipelines import build_pipeline
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.retrieve.retrievers import BM25Retriever
    from intentrank.types import Trace

    scorer = load_cross_encoder()
    ce = CrossEncoderReranker(index, scorer, top_k=DEPTH)
    judged = {q.id: qrels[q.id] for q in turns}
    scores, rss, robust, per_query, runs, fused = {}, {}, {}, {}, {}, {}

    def measured(name: str, rankings: Any, into: dict[str, Any], row: str = "") -> None:
        ev = evaluate(rankings if isinstance(rankings, dict) else {
            r.query.id: {d.doc_id: d.score for d in r.docs} for r in rankings}, judged, METRICS)
        into[name], per_query[row or name] = ev.aggregate, ev.column("nDCG@10")

    for method in args.methods:
        runs[method] = ranked = BM25Retriever(index, DEPTH).run(reformulated[method]).rankings
        measured(method, ranked, scores)
        rss[method] = {"bm25@5": None, "bm25>>ce@5": None}
        if args.rss:  # the same BM25 lists, and reranked
            rss[method] = {k: reranker_support(rs, golds, index.doc_text, scorer, k=5).mean
                           for k, rs in (("bm25@5", ranked), ("bm25>>ce@5", ce(ranked, Trace())))}
        if "raw" in runs and method not in ("raw", "gold"):
            raw = {r.query.id: r.doc_ids for r in runs["raw"]}
            measured(method, {r.query.id: rrf([r.doc_ids, raw[r.query.id]]) for r in ranked},
                     robust, f"RRF(raw, {method})")
    for combo in args.fused:  # its LLM replies come from the cache the methods' rows filled
        stage = build_pipeline({"fused_reformulations": {"methods": [
            {m: {"genre": result["genre"]}} if m.startswith("hyde_doc") else m
            for m in combo.split("+")], "retriever": {"bm25": {"depth": DEPTH}}}},
            BuildContext(index=index, resources={"llm": llm}))
        t0 = time.perf_counter()
        measured(f"fused({combo})", stage.run(turns).rankings, fused)
        result["info"][f"fused:{combo}"] = {
            "s_per_turn": (time.perf_counter() - t0) / max(len(turns), 1)}
    result.update(labelled=scores, rss=rss, robust=robust, per_query=per_query, fused=fused)
    if args.cite_llm:
        cite_ids = {q.id for q in turns[:args.cite_n]}
        report = citation_scores([load_llm(s) for s in args.cite_llm], {
            m: [r for r in runs[m] if r.query.id in cite_ids]
            for m in (args.cite_methods or args.methods)}, golds, index.doc_text, k=5)
        result["citation"] = {
            "llms": args.cite_llm, "n_turns": len(cite_ids),
            "acs": report.scores, "mean_citations": report.mean_citations,
            "per_llm": {name: {"acs": a.scores, "skipped": len(a.skipped)}
                        for name, a in report.per_llm.items()},
            "fallbacks": [run.fallbacks for run in report.runs]}


def measure(args: argparse.Namespace) -> Path:
    from intentrank.llm.client import load_llm
    from intentrank.measures import label_free as lf
    from intentrank.models.embedder import load_embedder

    queries, golds, index, qrels, genre = load_set(args.set)
    pool = [q for q in queries if q.history and q.id in golds and (not qrels or q.id in qrels)]
    if 0 < args.n < len(pool):  # contextual turns with a gold rewrite (judged: with qrels)
        pool = random.Random(0).sample(pool, args.n)
    turns = sorted(pool, key=lambda q: q.id)
    log(f"{args.set}: {len(turns)} contextual turns of {len(queries)}")
    llm = load_llm(args.llm)
    info, reformulated = {}, {}
    for method in args.methods:
        log(f"{args.set} {method} ...")
        reformulated[method], info[method] = reformulate(method, turns, golds, llm, genre)
    texts = {m: {q.id: q.text for q in out} for m, out in reformulated.items()}
    rows = lf.cosine_rows(
        load_embedder(backend="onnx"), texts,
        {m: lf.HYDE if m in LLM and LLM[m].group == "hyde" else lf.PARAPHRASE
         for m in args.methods}, {q.id: golds[q.id] for q in turns},
        {q.id: q.text for q in turns}, {q.id: lf.conversation_length(q) for q in turns})
    result: dict[str, Any] = {
        "set": args.set, "llm": args.llm, "n_turns": len(turns), "n_all": len(queries),
        "seed": 0, "genre": genre, "info": info, "cosine": [r.flat() for r in rows],
        "buckets": {b: sum(1 for q in turns if lf.length_bucket(lf.conversation_length(q)) == b)
                    for b in ("<5", "5-10", ">=10")}}
    if index is not None:
        labelled(args, result, reformulated, turns, golds, index, qrels, llm)
    slug = args.set.replace("gen:", "").replace("/", "_").replace("@", "-")
    path = OUT / f"{slug}--{args.llm.replace(':', '_')}--n{args.n}.json"
    save_json(path, {**result, "command": header()}, default=float)
    log(f"wrote {path}")
    return path


# -- rendering -----------------------------------------------------------------------------

def _f(x: Any, nd: int = 3) -> str:
    return "-" if x is None or x != x else f"{x:.{nd}f}"


def section(results: dict[str, dict[str, Any]]) -> tuple[str, dict[str, str]]:
    """The header lines and tables of each result (by its file's name) and the values the
    template reads."""
    from intentrank.measures.label_free import method_agreement

    out, values = [], {}
    for key, r in results.items():
        v = {"turns": r["n_turns"], "all": r["n_all"], "buckets": r["buckets"]}
        out += [r["command"], table(
            ["group", "method", "cos", "delta", "cos <5", "cos 5-10", "cos >=10", "s/turn",
             "fallbacks", "unchanged"],
            [[row["group"], row["method"], *(_f(row.get(c)) for c in (
                "cos", "delta", "cos <5", "cos 5-10", "cos >=10")),
              f"{r['info'][row['method']]['s_per_turn']:.1f}",
              r["info"][row["method"]]["fallbacks"], r["info"][row["method"]]["unchanged"]]
             for row in r["cosine"]])]
        if "labelled" in r:  # the methods measured include the raw turn and the gold rewrite
            lab, rss = r["labelled"], r["rss"]
            out.append(table(
                ["method", "nDCG@3", "nDCG@10", "MRR@10", "R@100", "RRF(raw, method) nDCG@10",
                 "RSS BM25@5", "RSS BM25>>CE@5"],
                [[m, *(_f(a[k]) for k in METRICS), _f(r["robust"].get(m, {}).get("nDCG@10")),
                  _f(rss[m]["bm25@5"]), _f(rss[m]["bm25>>ce@5"])] for m, a in lab.items()]
                + [[m, *(_f(a[k]) for k in METRICS), "-", "-", "-"]
                   for m, a in r.get("fused", {}).items()]))
            cands = {m: a["nDCG@10"] for m, a in lab.items() if m not in ("raw", "gold")}
            cands.update({f"RRF(raw, {m})": a["nDCG@10"] for m, a in r["robust"].items()})
            cands.update({m: a["nDCG@10"] for m, a in r.get("fused", {}).items()})
            best = max(cands, key=cands.get)
            raw, gold = lab["raw"]["nDCG@10"], lab["gold"]["nDCG@10"]
            share = (cands[best] - raw) / (gold - raw) if gold != raw else float("nan")
            v.update(raw=f"{raw:.3f}", gold=f"{gold:.3f}", best=best,
                     score=f"{cands[best]:.3f}", share=f"{share:.0%}",
                     p=p_value(r["per_query"]["raw"], r["per_query"][best]))
            methods = [m for m in lab if m != "gold"]
            ndcg = {m: lab[m]["nDCG@10"] for m in methods}
            cos = {row["method"]: row["cos"] for row in r["cosine"]}
            taus = []
            for name, by in (("cosine to gold", {m: cos[m] for m in methods}),
                             ("RSS BM25@5", {m: rss[m]["bm25@5"] for m in methods}),
                             ("RSS BM25>>CE@5", {m: rss[m]["bm25>>ce@5"] for m in methods})):
                if all(x is not None for x in by.values()):
                    a = method_agreement(by, ndcg)
                    taus.append(f"{name} tau = {a.tau:.2f} (p {a.p_value:.2f})")
            acs = {m: x for m, x in r.get("citation", {}).get("acs", {}).items()
                   if m in ndcg and x == x}
            if len(acs) >= 2:
                a = method_agreement(acs, {m: ndcg[m] for m in acs})
                taus.append(f"ACS tau = {a.tau:.2f} (p {a.p_value:.2f}, n {a.n_methods})")
            v.update(methods=len(methods), tau="; ".join(taus))
        if "citation" in r:
            c, names = r["citation"], list(r["citation"]["per_llm"])
            v.update(cite_turns=c["n_turns"], cite_llms=", ".join(c["llms"]),
                     cite_fallbacks=c["fallbacks"])
            out.append(table(["method", "mean citations", "ACS (mean)",
                              *(f"ACS {n}" for n in names)],
                             [[m, _f(c["mean_citations"][m], 2), _f(score, 3),
                               *(_f(c["per_llm"][n]["acs"][m], 3) for n in names)]
                              for m, score in c["acs"].items()]))
        values.update({f"{key}.{k}": str(x) for k, x in v.items()})
    return "\n\n".join(out), values


if __name__ == "__main__":
    main()
