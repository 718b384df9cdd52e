"""Conversational query reformulation (issue 14): the source paper's Tables 1-3 layout, and
nDCG on labelled conversational sets, with the embedded LLMs.

    .venv/bin/python bench/bench_reformulation.py measure cast2021 --n 30 --llm embedded
    .venv/bin/python bench/bench_reformulation.py measure gen:runs/conversations/scifact-3t@scifact
    .venv/bin/python bench/bench_reformulation.py render

Sets: ``cast2019`` / ``cast2020`` (gold rewrites, no corpus: cosine only), ``cast2021`` (its
235 canonical passages as corpus), ``gen:<dir>@<index name>`` (a generated conversational
set). One JSON per set and LLM in runs/reformulation/; ``render`` writes the
``reformulation`` section from every JSON there (what each table means is in its text).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import DATA, ROOT, header, p_value, write_section

from intentrank.query.reformulate import NO_LLM_METHODS

OUT = ROOT / "runs" / "reformulation"
LLM_METHODS = ["rewrite_full", "rewrite_summary", "rewrite_questions", "hyde", "hyde_masked",
               "hyde_doc", "hyde_doc_masked"]
METHODS = ["raw", *NO_LLM_METHODS, *LLM_METHODS, "gold"]
GENRE = {"cast2021": "web passage", "scifact": "scientific abstract",
         "cranfield": "aerodynamics research abstract"}
DEPTH = 100
METRICS = ["nDCG@3", "nDCG@10", "RR@10", "R@100"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("set")
    m.add_argument("--n", type=int, default=30, help="contextual turns sampled (seed 0)")
    m.add_argument("--seed", type=int, default=0)
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
    return p.parse_args(argv)


# -- the sets ------------------------------------------------------------------------------

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
    _, qrels = ds.split("test")
    return list(ds.queries.values()), ds.gold_rewrites(), index, qrels, genre


def sample(queries: list[Any], golds: dict[str, str], qrels: dict, n: int, seed: int
           ) -> list[Any]:
    """``n`` contextual turns (with history and a gold rewrite; judged when there are
    qrels), fixed seed, in id order."""
    pool = [q for q in queries if q.history and q.id in golds and (not qrels or q.id in qrels)]
    if 0 < n < len(pool):
        pool = random.Random(seed).sample(pool, n)
    return sorted(pool, key=lambda q: q.id)


# -- measuring -----------------------------------------------------------------------------

def reformulate(method: str, queries: list[Any], golds: dict[str, str], llm: Any, genre: str
                ) -> tuple[list[Any], dict[str, Any]]:
    from intentrank.core.registry import BuildContext
    from intentrank.pipelines import build_pipeline
    from intentrank.query.reformulate import ConversationalReformulator
    from intentrank.types import Trace

    t0 = time.perf_counter()
    trace = Trace()
    if method == "raw":
        out = list(queries)
    elif method == "gold":
        out = [q.reformulated(golds[q.id], "gold") for q in queries]
    else:
        from intentrank.types import Ranking

        stage = build_pipeline(method, BuildContext()) if method in NO_LLM_METHODS else \
            ConversationalReformulator(llm, method, genre=genre)
        out = [r.query for r in stage([Ranking(q) for q in queries], trace)]
    seconds = time.perf_counter() - t0
    counters = trace.stages[method].counters if method in trace.stages else {}
    llm_seconds = counters.get("llm_seconds", 0.0) + counters.get("llm_cached_seconds", 0.0)
    info = {"s_per_turn": (llm_seconds or seconds) / max(len(queries), 1),
            "fallbacks": int(counters.get("fallbacks", 0)),
            "unchanged": int(counters.get("unchanged", 0)),
            "calls": int(counters.get("llm_calls", 0) + counters.get("llm_cache_hits", 0)),
            "cache_hits": int(counters.get("llm_cache_hits", 0))}
    return out, info


def fused_run(combo: str, index: Any, llm: Any, genre: str, turns: list[Any]
              ) -> tuple[str, list[Any], dict[str, Any]]:
    """The ``fused_reformulations`` stage over ``combo``'s methods ('raw+rewrite_full'):
    its row name, rankings and cost (its LLM replies come from the cache the methods' own
    rows filled)."""
    from intentrank.core.registry import BuildContext
    from intentrank.pipelines import build_pipeline

    methods = [{m: {"genre": genre}} if m in LLM_METHODS and m.startswith("hyde_doc") else m
               for m in combo.split("+")]
    stage = build_pipeline({"fused_reformulations": {
        "methods": methods, "retriever": {"bm25": {"depth": DEPTH}}}},
        BuildContext(index=index, resources={"llm": llm}))
    t0 = time.perf_counter()
    result = stage.run(turns)
    seconds = time.perf_counter() - t0
    return f"fused({combo})", result.rankings, {"s_per_turn": seconds / max(len(turns), 1)}


def bm25_run(index: Any, queries: list[Any]) -> list[Any]:
    from intentrank.retrieve.retrievers import BM25Retriever

    return BM25Retriever(index, DEPTH).run(queries).rankings


def measure(args: argparse.Namespace) -> Path:
    from intentrank.fuse.rrf import rrf
    from intentrank.llm.client import load_llm
    from intentrank.measures.label_free import (
        HYDE,
        PARAPHRASE,
        citation_scores,
        conversation_length,
        cosine_rows,
        length_bucket,
        reranker_support,
    )
    from intentrank.measures.metrics import evaluate
    from intentrank.models.cross_encoder import load_cross_encoder
    from intentrank.models.embedder import load_embedder
    from intentrank.query.reformulate import METHODS as LLM
    from intentrank.types import Trace

    queries, golds, index, qrels, genre = load_set(args.set)
    turns = sample(queries, golds, qrels, args.n, args.seed)
    print(f"[bench] {args.set}: {len(turns)} contextual turns of {len(queries)}",
          file=sys.stderr, flush=True)
    llm = load_llm(args.llm)
    texts: dict[str, dict[str, str]] = {}
    info: dict[str, dict[str, Any]] = {}
    reformulated: dict[str, list[Any]] = {}
    for method in args.methods:
        print(f"[bench] {args.set} {method} ...", file=sys.stderr, flush=True)
        out, info[method] = reformulate(method, turns, golds, llm, genre)
        reformulated[method] = out
        texts[method] = {q.id: q.text for q in out}
    groups = {m: HYDE if m in LLM and LLM[m].group == "hyde" else PARAPHRASE
              for m in args.methods}
    embedder = load_embedder(backend="onnx")
    rows = cosine_rows(embedder, texts, groups, {q.id: golds[q.id] for q in turns},
                       {q.id: q.text for q in turns},
                       {q.id: conversation_length(q) for q in turns})
    result: dict[str, Any] = {
        "set": args.set, "llm": args.llm, "n_turns": len(turns), "n_all": len(queries),
        "seed": args.seed, "genre": genre, "info": info,
        "cosine": [r.flat() for r in rows],
        "buckets": {b: sum(1 for q in turns if length_bucket(conversation_length(q)) == b)
                    for b in ("<5", "5-10", ">=10")},
        "samples": {q.id: {"turn": q.text, "gold": golds[q.id],
                           **{m: texts[m][q.id] for m in args.methods}}
                    for q in turns[:3]},
    }
    if index is not None:
        doc_text: Callable[[str], str] = index.doc_text
        scorer = load_cross_encoder()
        from intentrank.rerank.cross_encoder import CrossEncoderReranker

        ce = CrossEncoderReranker(index, scorer, top_k=DEPTH)
        judged = {q.id: qrels[q.id] for q in turns}
        labelled, rss, robust, per_query, runs = {}, {}, {}, {}, {}
        raw_lists = None
        for method in args.methods:
            ranked = bm25_run(index, reformulated[method])
            runs[method] = ranked
            ev = evaluate({r.query.id: {d.doc_id: d.score for d in r.docs} for r in ranked},
                          judged, METRICS)
            labelled[method] = ev.aggregate
            per_query[method] = ev.column("nDCG@10")
            if args.rss:
                reranked = ce(ranked, Trace())  # the same BM25 lists, reranked
                rss[method] = {
                    "bm25@5": reranker_support(ranked, golds, doc_text, scorer, k=5).mean,
                    "bm25>>ce@5": reranker_support(reranked, golds, doc_text, scorer,
                                                   k=5).mean}
            else:
                rss[method] = {"bm25@5": None, "bm25>>ce@5": None}
            if method == "raw":
                raw_lists = {r.query.id: r.doc_ids for r in ranked}
            if raw_lists is not None and method not in ("raw", "gold"):
                fused = {r.query.id: rrf([r.doc_ids, raw_lists[r.query.id]])
                         for r in ranked}
                ev_fused = evaluate(fused, judged, METRICS)
                robust[method] = ev_fused.aggregate
                per_query[f"RRF(raw, {method})"] = ev_fused.column("nDCG@10")
        fused: dict[str, Any] = {}
        for combo in args.fused:
            name, ranked, info[f"fused:{combo}"] = fused_run(combo, index, llm, genre, turns)
            ev = evaluate({r.query.id: {d.doc_id: d.score for d in r.docs} for r in ranked},
                          judged, METRICS)
            fused[name] = ev.aggregate
            per_query[name] = ev.column("nDCG@10")
        result.update(labelled=labelled, rss=rss, robust=robust, per_query=per_query,
                      fused=fused)
        if args.cite_llm:
            cite_ids = {q.id for q in turns[:args.cite_n]}
            cite_runs = {m: [r for r in runs[m] if r.query.id in cite_ids]
                         for m in (args.cite_methods or args.methods)}
            report = citation_scores([load_llm(s) for s in args.cite_llm], cite_runs, golds,
                                     doc_text, k=5)
            result["citation"] = {
                "llms": args.cite_llm, "n_turns": len(cite_ids),
                "acs": report.scores, "mean_citations": report.mean_citations,
                "per_llm": {name: {"acs": a.scores, "skipped": len(a.skipped)}
                            for name, a in report.per_llm.items()},
                "fallbacks": [run.fallbacks for run in report.runs]}
    OUT.mkdir(parents=True, exist_ok=True)
    slug = args.set.replace("gen:", "").replace("/", "_").replace("@", "-")
    path = OUT / f"{slug}--{args.llm.replace(':', '_')}--n{args.n}.json"
    result["command"] = header()
    path.write_text(json.dumps(result, indent=1, default=float))
    print(f"[bench] wrote {path}", file=sys.stderr)
    return path


# -- rendering -----------------------------------------------------------------------------

def _f(x: Any, nd: int = 3) -> str:
    return "-" if x is None or x != x else f"{x:.{nd}f}"


def render() -> None:
    results = [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))]
    if not results:
        raise SystemExit(f"no results in {OUT}")
    parts = ["## Conversational query reformulation (issue 14)\n",
             "How each reformulation method of the source paper does with the embedded "
             "models, on TREC CAsT 2019-2021 (real conversations, manual gold rewrites) and on "
             "generated conversations over SciFact and Cranfield (the original query is the "
             "gold rewrite, its qrels label the turn). Contextual turns only (turns with "
             "history), sampled with seed 0. Commands and dates per table.\n",
             "Published numbers: CAsT-19 with BM25 over MS MARCO, nDCG@3: raw turn 14.2, T5 "
             "rewriter 33.9, manual rewrite 35.4; the source paper's cosine to gold: about "
             "0.71-0.80 across methods (0.77-0.80 for the best). What is comparable: the "
             "cosine to gold on CAsT uses the track's own manual rewrites as gold, as the "
             "paper's does, but our embedder is the bundled MiniLM (int8) and our LLMs are "
             "0.5B/1.5B; the raw turn already scores about 0.65-0.77 on CAsT because many turns "
             "need no rewrite, so read the delta column. Not comparable: nDCG levels (our "
             "corpus for CAsT 2021 is its 235 canonical passages, not MS MARCO's 8.8M, so "
             "every level is higher; only the order of the rows can be compared), and the "
             "generated SciFact/Cranfield conversations are ours.\n"]
    for r in results:
        parts.append(_render_one(r))
    write_section("reformulation", "\n".join(parts))



def _render_one(r: dict[str, Any]) -> str:
    out = [f"### {r['set']}, reformulation LLM `{r['llm']}`: {r['n_turns']} contextual turns "
           f"(of {r['n_all']}; by length {r['buckets']})\n", r["command"]]
    out.append("Table 1 layout: cosine of the reformulation to the gold rewrite and its "
               "change against the raw turn (delta), by conversation length (turns up to "
               "and including this one); s/turn = LLM seconds per turn (cached replies at "
               "their generation time).\n")
    out.append("| group | method | cos | delta | cos <5 | cos 5-10 | cos >=10 | s/turn | "
               "fallbacks | unchanged |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for row in r["cosine"]:
        i = r["info"][row["method"]]
        out.append(f"| {row['group']} | {row['method']} | {_f(row['cos'])} | "
                   f"{_f(row['delta'])} | {_f(row.get('cos <5'))} | {_f(row.get('cos 5-10'))} "
                   f"| {_f(row.get('cos >=10'))} | {i['s_per_turn']:.1f} | {i['fallbacks']} | "
                   f"{i['unchanged']} |")
    if "labelled" in r:
        lab, rss, robust = r["labelled"], r["rss"], r["robust"]
        out.append("\nLabelled retrieval (BM25 depth 100) and Table 2 layout (Reranker Support "
                   "Score: mean bundled cross-encoder probability of the top 5 against the "
                   "gold query; BM25 alone and BM25 top 100 -> cross-encoder top 5). "
                   "RRF(raw, method) = the method's BM25 list fused with the raw turn's.\n")
        out.append("| method | nDCG@3 | nDCG@10 | MRR@10 | R@100 | RRF(raw, method) nDCG@10 | "
                   "RSS BM25@5 | RSS BM25>>CE@5 |")
        out.append("|---|---|---|---|---|---|---|---|")
        for m, a in lab.items():
            rb = robust.get(m, {}).get("nDCG@10")
            out.append(f"| {m} | {_f(a['nDCG@3'])} | {_f(a['nDCG@10'])} | {_f(a['RR@10'])} | "
                       f"{_f(a['R@100'])} | {_f(rb)} | {_f(rss[m]['bm25@5'])} | "
                       f"{_f(rss[m]['bm25>>ce@5'])} |")
        for m, a in r.get("fused", {}).items():
            out.append(f"| {m} | {_f(a['nDCG@3'])} | {_f(a['nDCG@10'])} | {_f(a['RR@10'])} | "
                       f"{_f(a['R@100'])} | - | - | - |")
        out.append(_gap(r))
        out.append(_agreement(r))
    if "citation" in r:
        c = r["citation"]
        out.append(f"\nTable 3 layout: LLM Citation Score on the first {c['n_turns']} turns, "
                   f"each LLM answering the gold query from the method's BM25 top 5 "
                   f"(Average Citation Score: 0 = the average method); LLMs "
                   f"{', '.join(c['llms'])}; fallbacks {c['fallbacks']}.\n")
        names = list(c["per_llm"])
        out.append("| method | mean citations | ACS (mean) | " +
                   " | ".join(f"ACS {n}" for n in names) + " |")
        out.append("|---|---|---|" + "---|" * len(names))
        for m, acs in c["acs"].items():
            out.append(f"| {m} | {_f(c['mean_citations'][m], 2)} | {_f(acs, 3)} | " +
                       " | ".join(_f(c["per_llm"][n]["acs"][m], 3) for n in names) + " |")
    return "\n".join(out) + "\n"


def _gap(r: dict[str, Any]) -> str:
    lab = r["labelled"]
    if "raw" not in lab or "gold" not in lab:
        return ""
    raw, gold = lab["raw"]["nDCG@10"], lab["gold"]["nDCG@10"]
    cands = {m: a["nDCG@10"] for m, a in lab.items() if m not in ("raw", "gold")}
    cands.update({f"RRF(raw, {m})": a["nDCG@10"] for m, a in r["robust"].items()})
    cands.update({m: a["nDCG@10"] for m, a in r.get("fused", {}).items()})
    best = max(cands, key=cands.get)
    share = (cands[best] - raw) / (gold - raw) if gold != raw else float("nan")
    sig = ""
    if best in r["per_query"]:
        sig = (f" (paired randomization p = {p_value(r['per_query']['raw'], r['per_query'][best])}"
               " against the raw turn)")
    return (f"\nGap closed: raw turn nDCG@10 {raw:.3f}, gold rewrite {gold:.3f}; the best "
            f"method, {best}, {cands[best]:.3f}: {share:.0%} of the gap{sig}. Goal: half.\n")


def _agreement(r: dict[str, Any]) -> str:
    from intentrank.measures.label_free import method_agreement

    methods = [m for m in r["labelled"] if m != "gold"]
    ndcg = {m: r["labelled"][m]["nDCG@10"] for m in methods}
    cos = {row["method"]: row["cos"] for row in r["cosine"]}
    lines = []
    for name, scores in (("cosine to gold", {m: cos[m] for m in methods}),
                         ("RSS BM25@5", {m: r["rss"][m]["bm25@5"] for m in methods}),
                         ("RSS BM25>>CE@5", {m: r["rss"][m]["bm25>>ce@5"] for m in methods})):
        if any(v is None for v in scores.values()):
            continue
        a = method_agreement(scores, ndcg)
        lines.append(f"{name} tau = {a.tau:.2f} (p {a.p_value:.2f})")
    if "citation" in r:
        acs = {m: v for m, v in r["citation"]["acs"].items() if m in ndcg and v == v}
        if len(acs) >= 2:
            a = method_agreement(acs, {m: ndcg[m] for m in acs})
            lines.append(f"ACS tau = {a.tau:.2f} (p {a.p_value:.2f}, n {a.n_methods})")
    return (f"\nAgreement with the ranking of the {len(methods)} methods (gold excluded) by "
            f"nDCG@10, Kendall's tau: " + "; ".join(lines) + ".\n")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cmd == "measure":
        measure(args)
    else:
        render()


if __name__ == "__main__":
    main()
