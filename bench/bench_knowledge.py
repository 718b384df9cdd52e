"""Knowledge-aware diverse reranking, grounded answers and the answer judge (issue 16,
method 5), in the paper's layout.

    .venv/bin/python bench/bench_knowledge.py measure vaswani --llm embedded
    .venv/bin/python bench/bench_knowledge.py measure-real ../shared/data/scifact --n 40
    .venv/bin/python bench/bench_knowledge.py judge-check vaswani --llm qwen2.5-coder-1.5b
    .venv/bin/python bench/bench_knowledge.py render

``measure`` (a generated set), ``measure-real`` (labelled test queries) and
``measure-aspects`` (composed two-aspect questions) rank the same systems (``rank_systems``);
``judge-check`` runs the judge on answers of known quality, ``stream`` times the chain
streamed. Results go to ``runs/knowledge/``; ``render`` writes the ``knowledge`` section
(what each table means: bench/sections/knowledge.md).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import BENCHMARKS, ROOT, header, p_value, rank_scores, save_json, write_section

OUT = ROOT / "runs" / "knowledge"
CUTS = (3, 5, 10, 20, 50)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from intentrank.query.knowledge import FORMS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("set")
    m.add_argument("--llm", default="embedded")
    m.add_argument("--judge-llm", default=None, help="default: --llm")
    m.add_argument("--n-know", type=int, nargs="+", default=[5, 0, 2, 8])
    m.add_argument("--n-ans", type=int, nargs="+", default=[3, 5, 10, 20])
    m.add_argument("--answer-n", type=int, default=20)
    m.add_argument("--limit", type=int, default=0, help="questions (0: all)")
    m.add_argument("--kinds", nargs="+", default=["pair", "single"])
    m.add_argument("--index", type=Path, default=None,
                   help="the collection's index (default: indexes/<SET>)")
    j = sub.add_parser("judge-check")
    j.add_argument("set")
    j.add_argument("--llm", default="embedded")
    j.add_argument("--n", type=int, default=20)
    r = sub.add_parser("measure-real", help="labelled test queries of a collection")
    r.add_argument("dataset", type=Path, help="a BEIR-layout collection, e.g. "
                   "../shared/data/scifact (index: indexes/<its name>, built if missing)")
    r.add_argument("--split", default="test")
    r.add_argument("--n", type=int, default=40, help="fixed-seed sample size (0: all)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--llm", default="embedded")
    r.add_argument("--n-know", type=int, nargs="+", default=[5, 0])
    r.add_argument("--index", type=Path, default=None, help="default: indexes/<dataset>")
    r.add_argument("--out", type=Path, default=None,
                   help="default: runs/knowledge/real-<dataset>-<llm>[-<form>].json")
    a = sub.add_parser("measure-aspects", help="composed two-aspect questions with real labels")
    a.add_argument("set", help="an aspect set: a name in runs/aspects (e.g. cranfield-"
                   "composed) or a .jsonl path")
    a.add_argument("--n", type=int, default=100, help="the set's first N questions (0: all)")
    a.add_argument("--llm", default="embedded")
    a.add_argument("--n-know", type=int, nargs="+", default=[0, 2])
    a.add_argument("--oracle-elements", action="store_true",
                   help="also rerank with the set's labelled aspects as the elements (no LLM)")
    a.add_argument("--index", type=Path, default=None,
                   help="default: indexes/<the set's name before the first dash>")
    a.add_argument("--out", type=Path, default=None,
                   help="default: runs/knowledge/aspects-<set>-<llm>.json")
    for sp in (m, r, a):
        sp.add_argument("--element-alone", action="store_true", help="also rerank against "
                        "each element alone (per_element against: element)")
        sp.add_argument("--form", default=FORMS[0], choices=FORMS,
                        help="knowledge elements as short phrases (the paper's) or "
                             "self-contained sub-questions (knowledge form: questions)")
        sp.add_argument("--with-question", action="store_true",
                        help="with --element-alone, also the element-alone lists with the "
                             "cross-encoder's own list interleaved first (per_element "
                             "with_question: true)")
        sp.add_argument("--split-auto", action="store_true",
                        help="with --with-question, also the same over split: auto's "
                             "elements (one-part questions keep the cross-encoder's order)")
    for sp in (r, a):
        sp.add_argument("--reuse", action="store_true",
                        help="keep the knowledge-aware systems already in the output file "
                             "(same questions, LLM and form) and rank only the missing ones; "
                             "the elements and the CE rows must come out as stored")
    s = sub.add_parser("stream")
    s.add_argument("set")
    s.add_argument("--llm", default="embedded")
    s.add_argument("--n", type=int, default=8)
    s.add_argument("--batch-size", type=int, default=2)
    w = sub.add_parser("render")
    w.add_argument("--out", type=Path, default=BENCHMARKS,
                   help="the markdown file whose knowledge section is written (a copy of "
                        "docs/benchmarks.md for a dry run)")
    args = p.parse_args(argv)
    if getattr(args, "with_question", False) and not args.element_alone:
        p.error("--with-question needs --element-alone")
    if getattr(args, "split_auto", False) and not args.with_question:
        p.error("--split-auto needs --with-question")
    return args


def file_part(llm: str) -> str:
    """An LLM name as a file name part (``llamacpp:qwen2.5-coder-1.5b`` ->
    ``llamacpp_qwen2.5-coder-1.5b``; an endpoint URL loses its slashes)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", llm)


def form_suffix(form: str, sep: str = "-") -> str:
    """What a result file's name adds for the knowledge element form (nothing for the
    paper's phrases)."""
    return "" if form == "phrases" else f"{sep}{form}"


def recall(ranked: list[str], gold: set[str], k: int) -> float:
    return len(gold & set(ranked[:k])) / len(gold) if gold else 0.0


def _llm_cost(trace: Any, prefix: str) -> dict[str, float]:
    """LLM requests and cold seconds recorded under stage ids starting with ``prefix``."""
    calls = seconds = 0.0
    fallbacks: dict[str, float] = {}
    for name, st in trace.stages.items():
        if not name.startswith(prefix):
            continue
        c = st.counters
        calls += c.get("llm_calls", 0) + c.get("llm_cache_hits", 0)
        seconds += c.get("llm_seconds", 0.0) + c.get("llm_cached_seconds", 0.0)
        for key, value in c.items():
            if key.startswith("fallback.") or key in ("subset_violations", "summary_fallbacks",
                                                       "no_elements"):
                fallbacks[key] = fallbacks.get(key, 0) + value
    return {"calls": calls, "seconds": seconds, **fallbacks}


def load_set(name: str, limit: int, kinds: list[str]) -> tuple[Any, list[Any], dict, dict,
                                                               dict]:
    from intentrank.data.dataset import load_dataset

    ds = load_dataset(ROOT / "runs" / "generated" / name)
    queries, qrels = ds.split("generated")
    meta = ds.query_metadata()
    queries = [q for q in queries if meta.get(q.id, {}).get("kind") in kinds]
    queries = queries[:limit] if limit else queries
    gold = {q.id: {d for d, g in qrels[q.id].items() if g > 0} for q in queries}
    kind = {q.id: meta[q.id]["kind"] for q in queries}
    return ds, queries, gold, kind, ds.reference_answers()


def open_index(name: str) -> Any:
    from intentrank.index import Index

    return Index.open(ROOT / "indexes" / name)


class MemoScorer:
    """A pair scorer that scores each distinct (query, passage) pair once per run and
    answers repeats from memory. The bundled cross-encoder scores one pair at a time (a
    pair's score does not depend on the pairs beside it), so this changes no score; it
    spares the systems that rerank the same (element, document) pairs again (element alone
    with and without the CE list first; ``split: auto``'s two-part questions). Their
    ``rerank_seconds`` then count only the pairs not scored before."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.scores = inner, {}
        self.name, self.max_length = getattr(inner, "name", "-"), getattr(inner, "max_length",
                                                                          None)

    def predict(self, pairs: list[tuple[str, str]], batch_size: int = 8) -> Any:
        import numpy as np

        missing = list(dict.fromkeys(p for p in pairs if p not in self.scores))
        if missing:
            self.scores.update(zip(missing, self.inner.predict(missing, batch_size).tolist(),
                                   strict=True))
        return np.array([self.scores[p] for p in pairs], dtype=np.float32)


def rank_systems(idx: Any, llm: Any, queries: list[Any], n_knows: list[int],
                 result: dict[str, Any], save: Callable[[dict[str, list[Any]]], None],
                 element_alone: bool = False,
                 oracle: dict[str, list[str]] | None = None,
                 form: str = "phrases", with_question: bool = False,
                 skip: frozenset[str] = frozenset(), split_auto: bool = False
                 ) -> dict[str, list[Any]]:
    """The three systems over ``queries``: ``none`` (BM25 and dense interleaved to 100
    unique), ``ce`` (the bundled cross-encoder over those) and ``ka<N>`` (knowledge-aware
    rerank at each N_know; with ``element_alone`` also ``ka<N>:element``, the same elements
    reranked against the element alone; with ``oracle``, ``kaoracle``: those elements given
    per query id, no LLM); ``form``: the knowledge stage's element form; ``with_question``:
    also ``ka<N>:element+question``, the element-alone lists with the CE's own list
    interleaved first; ``split_auto``: also ``ka<N>:element+question+auto``, the same over
    ``split: auto``'s elements (one-part questions keep the CE's order). Systems in ``skip``
    (kept from an earlier run) are not ranked, and elements already in
    ``result["elements"]`` must come out the same. Fills
    ``result["cost"]`` (per query) and ``result["elements"]``, calls ``save(systems)`` after
    each system and returns ``{system: rankings}``."""
    from intentrank.core.config import build_pipeline
    from intentrank.pipelines import build_context
    from intentrank.query.knowledge import KIND, KnowledgeElements, knowledge_of
    from intentrank.rerank.per_element import PerElementRerank
    from intentrank.types import Ranking, Trace

    ctx = build_context(idx)
    first = build_pipeline([{"fuse": {"method": "interleave", "inputs": [
        {"bm25": {"depth": 100}}, {"dense": {"depth": 100}}]}}, {"cutoff": 100}], ctx, "first")
    ce = build_pipeline({"cross_encoder": {"top_k": 100, "backend": "onnx",
                                           "max_length": 128}}, ctx, "ce")
    ce.scorer = MemoScorer(ce.scorer)
    result.setdefault("cost", {})
    result.setdefault("elements", {})
    trace = Trace()
    t0 = time.perf_counter()
    base = first([Ranking(q) for q in queries], trace)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    reranked = ce(base, trace)
    t_ce = time.perf_counter() - t0
    systems = {"none": base, "ce": reranked}

    def per_element(known: list[Any], against: str, system: str, cost: dict[str, Any],
                    question: bool = False) -> None:
        """``system``: ``known`` reranked per element ``against`` (``question``: the CE's
        list interleaved first); its cost is ``cost`` (the elements') plus its own rerank
        seconds per query."""
        if system in skip:
            return
        t0 = time.perf_counter()
        systems[system] = PerElementRerank(ce, top_k=100, against=against,
                                           with_question=question)(known, Trace())
        result["cost"][system[2:]] = {
            **cost, "rerank_seconds": (time.perf_counter() - t0) / len(queries)}

    result["cost"]["none"] = {"seconds": t_first / len(queries), "calls": 0}
    result["cost"]["ce"] = {"seconds": (t_first + t_ce) / len(queries), "calls": 0}
    save(systems)
    for n_know in n_knows:
        t = Trace()
        t0 = time.perf_counter()
        known = KnowledgeElements(llm, idx, n_know=n_know, doc_words=150,
                                  form=form)(reranked, t)
        keep_elements(result, str(n_know), known, f"N_know={n_know}")
        paper = f"ka{n_know}" not in skip
        if paper:
            systems[f"ka{n_know}"] = PerElementRerank(ce, top_k=100)(known, t)
        wall = time.perf_counter() - t0
        cost = knowledge_cost(t, len(queries))
        ce_seconds = sum(st.seconds for n, st in t.stages.items() if n.startswith("per_element"))
        if paper or str(n_know) not in result["cost"]:
            result["cost"][str(n_know)] = {
                **cost, "rerank_seconds": ce_seconds / len(queries),
                "wall": wall / len(queries), "base_seconds": (t_first + t_ce) / len(queries)}
        if element_alone:
            per_element(known, "element", f"ka{n_know}:element", result["cost"][str(n_know)])
        if with_question:
            per_element(known, "element", f"ka{n_know}:element+question",
                        result["cost"][str(n_know)], question=True)
        if split_auto:
            gated, gated_cost = known_by_parts(llm, idx, n_know, form, reranked, result)
            per_element(gated, "element", f"ka{n_know}:element+question+auto", gated_cost,
                        question=True)
        save(systems)
        print(f"  N_know={n_know}: {wall / len(queries):.1f} s/q, "
              f"{cost['calls']:.1f} calls/q", flush=True)
    if oracle is not None:
        known = [Ranking(r.query.with_derived(KIND, oracle[r.query.id], "oracle"), r.docs)
                 for r in reranked]
        result["elements"]["oracle"] = {r.query.id: knowledge_of(r) for r in known}
        no_llm = {"calls": 0, "seconds": 0.0}
        per_element(known, "question+element", "kaoracle", no_llm)
        if element_alone:
            per_element(known, "element", "kaoracle:element", no_llm)
        if with_question:
            per_element(known, "element", "kaoracle:element+question", no_llm, question=True)
        save(systems)
    return systems


def known_by_parts(llm: Any, idx: Any, n_know: int, form: str, reranked: list[Any],
                   result: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """``reranked`` through the knowledge stage with ``split: auto`` (the declarations are
    the plain run's, from the reply cache); its elements go to ``result["elements"]`` under
    ``<n_know>:auto`` (checked against a reused run's), and its LLM cost (the parts question
    included) per query is returned with the rankings."""
    from intentrank.query.knowledge import KnowledgeElements
    from intentrank.types import Trace

    t = Trace()
    known = KnowledgeElements(llm, idx, n_know=n_know, doc_words=150, form=form,
                              split="auto")(reranked, t)
    keep_elements(result, f"{n_know}:auto", known, f"N_know={n_know}, split auto")
    return known, {**knowledge_cost(t, len(reranked)),
                   "single_part": sum(st.counters.get("single_part", 0)
                                      for name, st in t.stages.items()
                                      if name.startswith("knowledge"))}


def keep_elements(result: dict[str, Any], key: str, known: list[Any], what: str) -> None:
    """Record the elements of ``known`` under ``result["elements"][key]``; SystemExit when a
    reused run recorded others there (``what`` names the run in the message)."""
    from intentrank.query.knowledge import knowledge_of

    elements = {r.query.id: knowledge_of(r) for r in known}
    if result["elements"].setdefault(key, elements) != elements:
        raise SystemExit(f"{what}: the elements differ from the reused run's (another LLM "
                         "reply cache?); run without --reuse")


def knowledge_cost(trace: Any, n: int) -> dict[str, Any]:
    """The knowledge stage's LLM requests and seconds per query (of ``n``) and its fallback
    counts, from ``trace``."""
    cost = _llm_cost(trace, "knowledge")
    return {"calls": cost["calls"] / n, "seconds": cost["seconds"] / n,
            "fallbacks": {k: v for k, v in cost.items() if k not in ("calls", "seconds")}}


def measure(args: argparse.Namespace) -> None:
    from intentrank.answer.generate import AnswerGenerator
    from intentrank.eval.answer_judge import JudgeItem, judge_answers, summarize
    from intentrank.index import Index
    from intentrank.llm.client import load_llm
    from intentrank.types import Trace

    ds, queries, gold, kind, refs = load_set(args.set, args.limit, args.kinds)
    idx = Index.open(args.index) if args.index else open_index(args.set)
    llm = load_llm(args.llm)
    path = OUT / (f"{args.set}--{file_part(args.llm)}--{'+'.join(args.kinds)}"
                  f"{form_suffix(args.form, '--')}.json")
    result: dict[str, Any] = {"set": args.set, "llm": args.llm, "form": args.form,
                              "n": len(queries),
                              "kinds": {k: sum(v == k for v in kind.values()) for k in args.kinds},
                              "kind": kind, "recall": {}, "cost": {}, "elements": {}}
    print(f"{args.set}: {len(queries)} questions {result['kinds']}", flush=True)

    def save(systems: dict[str, list[Any]]) -> None:
        result["recall"] = {name: {r.query.id: {str(k): recall(r.doc_ids, gold[r.query.id], k)
                                                for k in CUTS} for r in rankings}
                            for name, rankings in systems.items()}
        save_json(path, result)

    systems = rank_systems(idx, llm, queries, args.n_know, result, save,
                           args.element_alone, form=args.form,
                           with_question=args.with_question, split_auto=args.split_auto)
    if not args.answer_n or 5 not in args.n_know:
        return
    judge = load_llm(args.judge_llm) if args.judge_llm else llm
    result["judge_llm"] = args.judge_llm or args.llm
    subset = [r for r in systems["ka5"] if r.query.id in refs][:args.answer_n]
    result["answers"] = {}
    for n_ans in args.n_ans:
        t = Trace()
        t0 = time.perf_counter()
        answered = AnswerGenerator(llm, idx, top_k=n_ans)(subset, t)
        wall = time.perf_counter() - t0
        items = [JudgeItem(r.query.id, r.query.text, refs[r.query.id],
                           tuple(idx.doc_text(d) for d in sorted(gold[r.query.id])),
                           r.query.answer.text) for r in answered]
        jt = Trace()
        judged = judge_answers(judge, items, jt)
        s = summarize(judged)
        c = t.stage("answer").counters
        result["answers"][str(n_ans)] = {
            "n": len(subset), "relevance": s.relevance, "faithfulness": s.faithfulness,
            "n_relevance": s.n_relevance, "n_faithfulness": s.n_faithfulness,
            "judge_fallbacks": s.fallbacks,
            "answer_fallbacks": {k: v for k, v in c.items() if k.startswith("fallback.")},
            "abstentions": c.get("abstentions", 0),
            "citations": c.get("citations", 0) / len(subset),
            "seconds": _llm_cost(t, "answer")["seconds"] / len(subset), "wall": wall / len(subset),
            "per_query": {r.query.id: {"answer": r.query.answer.text, "kind": kind[r.query.id],
                                       "cited": r.query.answer.cited_ids,
                                       "relevance": j.relevance, "faithfulness": j.faithfulness}
                          for r, j in zip(answered, judged, strict=True)}}
        save(systems)
        print(f"  N_ans={n_ans}: relevance {s.relevance}, faithfulness {s.faithfulness}",
              flush=True)


REAL_METRICS = (*(f"R@{k}" for k in CUTS), "nDCG@10")
REAL_TESTS = ("R@10", "nDCG@10")


def reused(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """``--reuse``: the per-query scores of the earlier run at ``path``; ``result`` takes over
    its costs and elements. SystemExit when there is none or it ran other questions, another
    LLM or form."""
    if not path.exists():
        raise SystemExit(f"--reuse: no earlier run at {path}")
    old = json.loads(path.read_text())
    for key in ("queries", "llm", "form"):
        if old.get(key, "phrases" if key == "form" else None) != result[key]:
            raise SystemExit(f"--reuse: {path} was run with another {key}; run without --reuse")
    result["cost"], result["elements"] = old["cost"], old["elements"]
    return old["per_query"]


def same_scores(stored: dict[str, float], fresh: dict[str, float]) -> bool:
    """Whether ``stored`` has every metric of ``fresh`` with the same value (1e-9; NaN is
    never the same)."""
    return all(m in stored and math.isclose(v, stored[m], rel_tol=0, abs_tol=1e-9)
               for m, v in fresh.items())


def merge_reused(old: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """``fresh`` per-query scores over the kept ``old`` ones; the systems ranked again
    (none, CE) must score as stored (SystemExit otherwise: the reused rows would not be
    comparable)."""
    for system in set(old) & set(fresh):
        for qid, scores in fresh[system].items():
            if not same_scores(old[system].get(qid, {}), scores):
                raise SystemExit(f"--reuse: {system} scores query {qid} differently from the "
                                 "reused run; run without --reuse")
    return {**old, **fresh}


def skipped(old: dict[str, Any]) -> frozenset[str]:
    """The knowledge-aware systems of a reused run (not ranked again)."""
    return frozenset(s for s in old if s.startswith("ka"))


def rank_run(rankings: list[Any]) -> dict[str, dict[str, float]]:
    """``{query id: {doc id: score}}`` with the score falling with the rank (n, n-1, ...), so
    ir-measures sees each system's order exactly, without score ties."""
    return {r.query.id: rank_scores(r.doc_ids) for r in rankings}


def measure_labelled(args: argparse.Namespace, idx: Any, queries: list[Any],
                     qrels: dict[str, dict[str, int]], path: Path, result: dict[str, Any],
                     score: Callable[[dict[str, dict[str, float]]], dict[str, Any]],
                     oracle: dict[str, list[str]] | None = None) -> None:
    """What ``measure-real`` and ``measure-aspects`` share: ``result`` (their own keys) gets
    the common ones, the systems of ``measure`` are ranked over ``queries`` (``--reuse``:
    keeping an earlier run's knowledge-aware systems), each system's run scored by ``score``
    (per query) and saved to ``path`` after each, and the rows printed."""
    from intentrank.llm.client import load_llm

    result.update({"llm": args.llm, "form": args.form, "n": len(queries), "sample": args.n,
                   "relevant_per_query": sum(sum(g > 0 for g in qrels[q.id].values())
                                             for q in queries) / len(queries),
                   "queries": [q.id for q in queries], "per_query": {}, "cost": {},
                   "elements": {}})
    print(f"{result['dataset']} {result['split']}: {len(queries)} queries (seed "
          f"{result['seed']}), {result['relevant_per_query']:.2f} relevant per query",
          flush=True)
    old = reused(path, result) if args.reuse else {}

    def save(systems: dict[str, list[Any]]) -> None:
        result["per_query"] = merge_reused(old, {s: score(rank_run(r))
                                                 for s, r in systems.items()})
        save_json(path, result)

    rank_systems(idx, load_llm(args.llm), queries, args.n_know, result, save,
                 args.element_alone, oracle, args.form, args.with_question, skipped(old),
                 args.split_auto)
    for row in real_rows(result):
        print(f"  {row['label']}: " + ", ".join(f"{m} {row['means'][m]:.3f}"
                                                  for m in result["metrics"]) +
              "".join(f", p {m} {row['p'][m]:.3f}" for m in row["p"]), flush=True)
    print(f"wrote {path}", flush=True)


def measure_real(args: argparse.Namespace) -> None:
    """``measure-real DATASET``: the three systems of ``measure`` on a fixed-seed sample of a
    collection's labelled queries, scored against its qrels (R@k, nDCG@10 by ir-measures)."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import open_or_build
    from intentrank.measures.metrics import evaluate

    ds = load_dataset(args.dataset)
    name = ds.root.name
    queries, qrels = ds.sample(args.split, args.n, args.seed)
    idx = open_or_build(ds.corpus, args.index or ROOT / "indexes" / name, progress=True,
                        source=str(ds.root))
    path = args.out or OUT / (f"real-{name}-{file_part(args.llm)}"
                              f"{form_suffix(args.form)}.json")
    result = {"dataset": name, "source": str(ds.root), "split": args.split, "seed": args.seed,
              "metrics": list(REAL_METRICS)}
    measure_labelled(args, idx, queries, qrels, path, result,
                     lambda run: evaluate(run, qrels, REAL_METRICS).per_query)


ASPECT_METRICS = (*REAL_METRICS, "StRecall@10", "alpha_nDCG@10")
ASPECT_TESTS = ("R@10", "StRecall@10")


def measure_aspects(args: argparse.Namespace) -> None:
    """``measure-aspects SET``: the three systems of ``measure`` on an aspect-labelled set of
    ``bench/bench_coverage.py`` (composed: two real labelled queries joined into one
    question, each query's relevant documents one aspect): R@k and nDCG@10 against the
    union of the aspects' judgments, S-recall@10 (share of aspects with a relevant document
    in the top 10) and alpha-nDCG@10 (ndeval), written to
    ``runs/knowledge/aspects-<set>-<llm>.json``."""
    from intentrank.data.aspects import load_aspect_set
    from intentrank.index import Index
    from intentrank.measures.diversity import evaluate_diversity
    from intentrank.measures.metrics import evaluate
    from intentrank.types import Query

    source = Path(args.set)
    if source.suffix != ".jsonl":
        source = ROOT / "runs" / "aspects" / f"{args.set}.jsonl"
    questions = load_aspect_set(source)[:args.n or None]
    name = source.stem
    idx = (Index.open(args.index) if args.index else open_index(name.split("-")[0]))
    qrels = {q.id: q.qrels() for q in questions}
    path = args.out or OUT / (f"aspects-{name}-{file_part(args.llm)}"
                              f"{form_suffix(args.form)}.json")
    result = {"dataset": name, "split": "composed", "seed": "first",
              "aspects_per_query": sum(len(q.aspects) for q in questions) / len(questions),
              "metrics": list(ASPECT_METRICS), "tests": list(ASPECT_TESTS)}

    def score(run: dict[str, dict[str, float]]) -> dict[str, Any]:
        rel = evaluate(run, qrels, REAL_METRICS).per_query
        div = evaluate_diversity(run, questions, ASPECT_METRICS[len(REAL_METRICS):])
        return {q: {**rel.get(q, dict.fromkeys(REAL_METRICS, 0.0)), **div.per_query[q]}
                for q in qrels}

    oracle = ({q.id: [a.text for a in q.aspects] for q in questions}
              if args.oracle_elements else None)
    measure_labelled(args, idx, [Query(q.id, q.text) for q in questions], qrels, path, result,
                     score, oracle)


def real_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per system of a ``measure-real`` result: label, metric means, and for the
    knowledge-aware systems the paired randomization p against CE on R@10 and nDCG@10."""
    from intentrank.measures.significance import paired_test

    per_query = result["per_query"]
    metrics, tests = result.get("metrics", REAL_METRICS), result.get("tests", REAL_TESTS)
    rows = []
    for system in _system_order(per_query):
        scores = per_query[system]
        qids = sorted(scores)
        means = {m: sum(scores[q][m] for q in qids) / len(qids) for m in metrics}
        p = {}
        if system.startswith("ka") and "ce" in per_query:
            for m in tests:
                p[m] = paired_test({q: v[m] for q, v in per_query["ce"].items()},
                                   {q: v[m] for q, v in scores.items()}, m).p_randomization
        cost = result["cost"].get(system[2:] if system.startswith("ka") else system, {})
        rows.append({"system": system, "label": _label(system), "n": len(qids),
                     "means": means, "p": p, "cost": cost})
    return rows


def _system_order(systems: Any) -> list[str]:
    """``none``, ``ce``, then ``ka<N>`` by N, of the systems present."""
    kas = sorted((s for s in systems if s.startswith("ka")),
                 key=lambda s: (int(n) if (n := s[2:].split(":")[0]).isdigit() else 10**6, s))
    return [s for s in ("none", "ce") if s in systems] + kas


def _label(system: str) -> str:
    """``KA <N>``, with ``(element alone)`` for ``:element``, ``(element alone, CE list
    first)`` for ``:element+question`` and ``(..., split auto)`` for ``...+auto``."""
    n_know, _, rest = system[2:].partition(":")
    against, *extras = rest.split("+")
    notes = ([f"{against} alone"] + ["CE list first"] * ("question" in extras)
             + ["split auto"] * ("auto" in extras))
    return {"none": "none", "ce": "CE"}.get(system, f"KA {n_know}" + (
        f" ({', '.join(notes)})" if against else ""))


def _fallbacks(cost: dict[str, Any]) -> str:
    """The fallback counts of a row (and, for ``split: auto``, the one-part questions)."""
    parts = [f"{k.removeprefix('fallback.')} {int(v)}"
             for k, v in cost.get("fallbacks", {}).items() if v]
    if "single_part" in cost:
        parts.append(f"one part {int(cost['single_part'])}")
    return ", ".join(parts) or "-"


def one_part(res: dict[str, Any], system: str, qids: list[str]) -> int:
    """How many of ``qids`` the ``split: auto`` system ``system`` (``ka<N>:...+auto``) left
    without elements that the plain run of the same N_know gave elements: the questions its
    LLM judged one part."""
    n_know = system[2:].split(":")[0]
    plain, auto = res["elements"].get(n_know, {}), res["elements"].get(f"{n_know}:auto", {})
    return sum(bool(plain.get(q)) and not auto.get(q) for q in qids)


def judge_check(args: argparse.Namespace) -> None:
    from intentrank.eval.answer_judge import (
        JudgeItem,
        judge_agreement,
        judge_answers,
        known_quality_answers,
    )
    from intentrank.llm.client import load_llm
    from intentrank.types import Trace

    ds, queries, gold, kind, refs = load_set(args.set, 0, ["single", "pair"])
    idx = open_index(args.set)
    queries = [q for q in queries if q.id in refs][:args.n]
    llm = load_llm(args.llm)
    items, keys = [], []
    for i, q in enumerate(queries):
        other = refs[queries[(i + 1) % len(queries)].id]
        for k, answer in known_quality_answers(refs[q.id], other).items():
            items.append(JudgeItem(q.id, q.text, refs[q.id],
                                   tuple(idx.doc_text(d) for d in sorted(gold[q.id])), answer))
            keys.append((q.id, k))
    trace = Trace()
    t0 = time.perf_counter()
    judged = judge_answers(llm, items, trace)
    wall = time.perf_counter() - t0
    table: dict[str, dict[str, Any]] = {}
    for (qid, k), j in zip(keys, judged, strict=True):
        table.setdefault(qid, {})[k] = j
    a = judge_agreement(table)
    out = {"set": args.set, "llm": args.llm, "n": len(queries), "pairs": a.pairs,
           "agreement": a.agreement, "mean_relevance": a.mean_relevance,
           "mean_faithfulness": a.mean_faithfulness, "fallbacks": a.fallbacks,
           "seconds_per_answer": wall / max(1, sum(bool(i.answer.strip()) for i in items))}
    save_json(OUT / f"judge-check--{args.set}--{args.llm}.json", out)
    print(json.dumps(out, indent=1))


def stream(args: argparse.Namespace) -> None:
    """Throughput of the method-5 chain run stage after stage over all questions against
    streamed (one thread per stage, micro-batches), both cold (no LLM reply cache), in turn."""
    from intentrank.core.config import build_pipeline
    from intentrank.core.streaming import run_streamed
    from intentrank.llm.client import load_llm
    from intentrank.pipelines import build_context

    ds, queries, gold, kind, refs = load_set(args.set, args.n, ["pair", "single"])
    idx = open_index(args.set)
    node = [{"fuse": {"method": "interleave", "inputs": [{"bm25": {"depth": 100}},
                                                         {"dense": {"depth": 100}}]}},
            {"cutoff": 100}, {"cross_encoder": {"top_k": 100, "backend": "onnx",
                                                "max_length": 128}},
            {"knowledge": {"n_know": 2, "doc_words": 150}},
            {"per_element": {"top_k": 50}}, {"answer": {"top_k": 3}}]
    runs: dict[str, list[float]] = {"sequential": [], "streamed": []}
    answers: dict[str, list[str]] = {}
    for mode in ("sequential", "streamed", "sequential", "streamed"):
        pipe = build_pipeline(node, build_context(idx, llm=load_llm(args.llm, cache=None)),
                              "stream")
        t0 = time.perf_counter()
        result = pipe.run(queries) if mode == "sequential" else \
            run_streamed(pipe, queries, batch_size=args.batch_size)
        runs[mode].append(len(queries) / (time.perf_counter() - t0))
        answers[mode] = [r.query.answer.text for r in result.rankings]
        print(f"  {mode}: {runs[mode][-1]:.3f} questions/s", flush=True)
    out = {"set": args.set, "llm": args.llm, "n": len(queries), "batch_size": args.batch_size,
           "qps": runs, "same_answers": sum(a == b for a, b in zip(
               answers["sequential"], answers["streamed"], strict=True)),
           "pipeline": "interleave(bm25, dense) % 100 >> cross_encoder >> knowledge(n_know=2)"
                       " >> per_element(top_k=50) >> answer(top_k=3)"}
    save_json(OUT / f"stream--{args.set}--{args.llm}.json", out)
    print(json.dumps(out))


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _means(result: dict, system: str, qids: list[str]) -> dict[str, float]:
    rows = result["recall"].get(system, {})
    return {str(k): sum(rows[q][str(k)] for q in qids) / len(qids) for k in CUTS} if qids \
        and all(q in rows for q in qids) else {}


NAMES = {"scifact": "SciFact", "cranfield": "Cranfield", "vaswani": "Vaswani"}


def _row_cells(row: dict[str, Any], metrics: tuple[str, ...], tests: tuple[str, ...]) -> str:
    """A ``real_rows`` row's cells after its label: metric means x100, p-values, LLM cost."""
    cost = row["cost"]
    p = [f"{row['p'][m]:.3f}" if m in row["p"] else "-" for m in tests]
    spent = (f"{cost.get('calls', 0):.1f} | {cost.get('seconds', 0):.1f} | {_fallbacks(cost)}"
             if cost else "- | - | -")  # pooled rows: see each run's own row
    return (" | ".join(f"{100 * row['means'][m]:.1f}" for m in metrics) +
            f" | {' | '.join(p)} | {spent} |")


def _llm_label(res: dict[str, Any]) -> str:
    """The LLM column of a result: its LLM, and the element form when not the paper's."""
    form = res.get("form", "phrases")
    return res["llm"] if form == "phrases" else f"{res['llm']} ({form})"


def real_section(results: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: the ``measure-real`` results, one table per dataset and split, with
    the paper's single-document R@10 beside them (empty when there are none; the prose
    around them is bench/sections/knowledge.md's)."""
    lines: list[str] = []
    for key in sorted({(r["dataset"], r["split"]) for r in results}):
        name = NAMES.get(key[0], key[0])
        lines += ["| dataset | LLM | n (seed) | system | " + " | ".join(f"R@{k}" for k in CUTS)
                  + " | nDCG@10 | p R@10 | p nDCG@10 | calls/q | s/q | fallbacks |",
                  "|---|---|---|---|" + "---|" * len(CUTS) + "---|---|---|---|---|---|"]
        group = [r for r in results if (r["dataset"], r["split"]) == key]
        for res in group:
            for row in real_rows(res):
                lines.append(f"| {name} | {_llm_label(res)} | {row['n']} ({res['seed']}) | "
                             f"{row['label']} | {_row_cells(row, REAL_METRICS, REAL_TESTS)}")
        lines += pooled_lines(group, name)
        lines += ["| paper (LiveRAG, single-document) | Falcon3-10B | - | CE / KA 5 | - | - | "
                  "85.0 / 85.0 | - | - | - | - | - | - | - | - |", ""]
    return lines



def _run_kind(res: dict[str, Any]) -> tuple[str, str]:
    """A result's LLM and element form: the runs that ``pooled`` may pool together."""
    return res["llm"], res.get("form", "phrases")


def pooled(group: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``measure-real`` runs of ``group`` with the same LLM and form over several seeds,
    pooled: every query once, with the systems all of its runs have (None when fewer than
    two such runs). A query in two runs must score the same in both (SystemExit otherwise)."""
    if len(group) < 2 or len({_run_kind(r) for r in group}) > 1:
        return None
    group = sorted(group, key=lambda r: r["seed"])
    systems = set.intersection(*(set(r["per_query"]) for r in group))
    per_query: dict[str, dict[str, Any]] = {s: {} for s in systems}
    for res in group:
        for system in systems:
            for qid, scores in res["per_query"][system].items():
                if not same_scores(per_query[system].setdefault(qid, scores), scores):
                    raise SystemExit(f"pooling {res['llm']} runs: {system} scores query {qid} "
                                     "differently in two runs")
    return {**group[0], "per_query": per_query, "cost": {},
            "seed": "+".join(str(r["seed"]) for r in group)}


def pooled_lines(group: list[dict[str, Any]], name: str) -> list[str]:
    """Table rows for the runs of ``group`` pooled per LLM and form (``pooled``)."""
    lines = []
    for kind in sorted({_run_kind(r) for r in group}):
        pool = pooled([r for r in group if _run_kind(r) == kind])
        if pool is None:
            continue
        for row in real_rows(pool):
            lines.append(f"| {name} | {_llm_label(pool)} | {row['n']} (seeds {pool['seed']}, "
                         f"pooled) | {row['label']} | "
                         f"{_row_cells(row, REAL_METRICS, REAL_TESTS)}")
    return lines


def aspect_section(results: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: the ``measure-aspects`` results (composed two-aspect questions with
    real judgments), one table for all sets (empty when there are none)."""
    if not results:
        return []
    cols = [*(f"R@{k}" for k in CUTS), "nDCG@10", "S-recall@10", "alpha-nDCG@10"]
    lines = ["| set | LLM | n | relevant/q | system | " + " | ".join(cols) +
             " | p R@10 | p S-recall@10 | calls/q | s/q | fallbacks |",
             "|---|---|---|---|---|" + "---|" * len(cols) + "---|---|---|---|---|"]
    for res in results:
        for row in real_rows(res):
            lines.append(f"| {res['dataset']} | {_llm_label(res)} | {row['n']} | "
                         f"{res['relevant_per_query']:.1f} | {row['label']} | "
                         f"{_row_cells(row, ASPECT_METRICS, ASPECT_TESTS)}")
    return [*lines, ""]


def _runs(pattern: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(OUT.glob(pattern))]


def render(out: Path = BENCHMARKS) -> None:
    """The knowledge section from every result in runs/knowledge/: its tables (the prose
    that explains and reads them is bench/sections/knowledge.md's)."""
    lines = [header(), ""]
    results = [r for p in sorted(OUT.glob("*.json"))
               if not p.name.startswith(("judge-check", "stream", "real-", "aspects-"))
               for r in [json.loads(p.read_text())]]
    for kind in ("pair", "single"):
        lines += ["| set | LLM | n | system | " + " | ".join(f"R@{k}" for k in CUTS) +
                  " | p (R@10 vs CE) | calls/q | s/q | fallbacks |",
                  "|---|---|---|---|" + "---|" * len(CUTS) + "---|---|---|---|"]
        for res in results:
            qids = sorted(q for q, k in res["kind"].items() if k == kind)
            if not qids:
                continue
            ce = {q: res["recall"]["ce"][q]["10"] for q in qids}
            for system in _system_order(res["recall"]):
                means = _means(res, system, qids)
                if not means:
                    continue
                cost = res["cost"].get(system[2:] if system.startswith("ka") else system, {})
                if "single_part" in cost:
                    cost = {**cost, "single_part": one_part(res, system, qids)}
                p = p_value(ce, {q: res["recall"][system][q]["10"] for q in qids}, "R@10") \
                    if system.startswith("ka") else "-"
                lines.append(f"| {res['set']} | {_llm_label(res)} | {len(qids)} | "
                             f"{_label(system)} | " +
                             " | ".join(f"{100 * means[str(k)]:.1f}" for k in CUTS) +
                             f" | {p} | {cost.get('calls', 0):.1f} | "
                             f"{cost.get('seconds', 0):.1f} | {_fallbacks(cost)} |")
        lines.append("")
    lines += real_section(_runs("real-*.json")) + aspect_section(_runs("aspects-*.json"))
    lines += ["| set | LLM | judge | n | N_ans | relevance | faithfulness | judged | "
              "abstentions | citations/answer | answer fallbacks | judge fallbacks | s/answer |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for n_ans, a in res.get("answers", {}).items():
            afb = ", ".join(f"{k.removeprefix('fallback.')} {int(v)}"
                            for k, v in a["answer_fallbacks"].items()) or "-"
            jfb = ", ".join(f"{k} {v}" for k, v in a["judge_fallbacks"].items()) or "-"
            lines.append(f"| {res['set']} | {res['llm']} | {res.get('judge_llm')} | {a['n']} | "
                         f"{n_ans} | {_f(a['relevance'])} | {_f(a['faithfulness'])} | "
                         f"{a['n_relevance']} | {int(a['abstentions'])} | "
                         f"{a['citations']:.1f} | {afb} | {jfb} | {a['seconds']:.1f} |")
    if checks := _runs("judge-check--*.json"):
        kinds = ["reference", "abstention", "empty", "wrong_document", "contradicted"]
        lines += ["", "| set | judge | questions | pairs | agreement | " + " | ".join(kinds) +
                  " | fallbacks | s/answer |", "|---|---|---|---|---|" + "---|" * len(kinds) +
                  "---|---|"]
        for c in checks:
            cells = [f"{_f(c['mean_relevance'][k])} / {_f(c['mean_faithfulness'][k])}"
                     for k in kinds]
            lines.append(f"| {c['set']} | {c['llm']} | {c['n']} | {c['pairs']} | "
                         f"{c['agreement']:.2f} | " + " | ".join(cells) +
                         f" | {c['fallbacks']} | {c['seconds_per_answer']:.1f} |")
    if streams := _runs("stream--*.json"):
        lines += ["", "| set | LLM | questions | batch | pipeline | sequential q/s | "
                  "streamed q/s | ratio (mean) | same answers |", "|---|---|---|---|---|---|---|"
                  "---|---|"]
        for st in streams:
            seq, par = st["qps"]["sequential"], st["qps"]["streamed"]
            ratio = (sum(par) / len(par)) / (sum(seq) / len(seq))
            lines.append(f"| {st['set']} | {st['llm']} | {st['n']} | {st['batch_size']} | "
                         f"`{st['pipeline']}` | {', '.join(f'{x:.3f}' for x in seq)} | "
                         f"{', '.join(f'{x:.3f}' for x in par)} | {ratio:.2f}x | "
                         f"{st['same_answers']}/{st['n']} |")
    write_section("knowledge", "\n".join(lines), out, template=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    commands = {"measure": measure, "measure-real": measure_real,
                "measure-aspects": measure_aspects, "judge-check": judge_check,
                "stream": stream}
    commands.get(args.cmd, lambda a: render(a.out))(args)


if __name__ == "__main__":
    main()
