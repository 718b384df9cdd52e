"""Knowledge-aware diverse reranking, grounded answers and the answer judge (issue 16,
method 5), in the paper's layout.

    .venv/bin/python bench/bench_knowledge.py measure vaswani --llm embedded
    .venv/bin/python bench/bench_knowledge.py measure-real ../shared/data/scifact --n 40
    .venv/bin/python bench/bench_knowledge.py judge-check vaswani --llm qwen2.5-coder-1.5b
    .venv/bin/python bench/bench_knowledge.py render

``measure`` (a generated set), ``measure-real`` (labelled test queries) and
``measure-aspects`` (composed two-aspect questions) rank the same systems (``rank_systems``);
``judge-check`` runs the judge on answers of known quality, ``stream`` times the chain
streamed. Results go to runs/knowledge/; ``render`` writes the ``knowledge`` section (what
each table means: bench/sections/knowledge.md).
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

from report import BENCHMARKS, ROOT, header, rank_scores, save_json, table, write_section

OUT = ROOT / "runs" / "knowledge"
CUTS = (3, 5, 10, 20, 50)
KINDS = ("pair", "single")
R_AT = [f"R@{k}" for k in CUTS]
REAL_METRICS = (*R_AT, "nDCG@10")
REAL_TESTS = ("R@10", "nDCG@10")
ASPECT_METRICS = (*REAL_METRICS, "StRecall@10", "alpha_nDCG@10")
ASPECT_TESTS = ("R@10", "StRecall@10")
FIRST = [{"fuse": {"method": "interleave", "inputs": [{"bm25": {"depth": 100}},
                                                      {"dense": {"depth": 100}}]}},
         {"cutoff": 100}]
CE = {"cross_encoder": {"top_k": 100, "backend": "onnx", "max_length": 128}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from intentrank.query.knowledge import FORMS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m, j, r, a, s, _ = (sub.add_parser(c) for c in ("measure", "judge-check", "measure-real",
                                                     "measure-aspects", "stream", "render"))
    r.add_argument("dataset", type=Path, help="a BEIR-layout collection (its index: "
                   "indexes/<its name>, built if missing)")
    for sp, n in ((m, 0), (j, 20), (r, 40), (a, 100), (s, 8)):
        if sp is not r:
            sp.add_argument("set", help="generated: runs/generated/SET; aspects: a name in "
                            "runs/aspects or a .jsonl path")
        sp.add_argument("--llm", default="embedded")
        sp.add_argument("--n", type=int, default=n, help="questions (0: all)")
    m.add_argument("--judge-llm", default=None, help="default: --llm")
    m.add_argument("--answer-n", type=int, default=20)
    r.add_argument("--seed", type=int, default=0)
    a.add_argument("--oracle-elements", action="store_true",
                   help="also rerank with the set's labelled aspects as the elements (no LLM)")
    for sp, n_know in ((m, [5, 0, 2, 8]), (r, [5, 0]), (a, [0, 2])):
        sp.add_argument("--n-know", type=int, nargs="+", default=n_know)
        sp.add_argument("--index", type=Path, default=None, help="default: indexes/<collection>")
        sp.add_argument("--form", default=FORMS[0], choices=FORMS, help="knowledge elements")
        sp.add_argument("--element-alone", action="store_true",
                        help="also per_element against: element")
        sp.add_argument("--with-question", action="store_true",
                        help="with --element-alone: also with_question: true")
        sp.add_argument("--split-auto", action="store_true",
                        help="with --with-question: also over knowledge split: auto")
    for sp in (m, r, a):
        sp.add_argument("--out", type=Path, default=None,
                        help="default: a file in runs/knowledge named by set, LLM and form")
        sp.add_argument("--reuse", action="store_true", help="keep the KA systems of --out "
                        "(same questions, LLM, form), rank only the missing ones")
    args = p.parse_args(argv)
    if getattr(args, "with_question", False) and not args.element_alone:
        p.error("--with-question needs --element-alone")
    if getattr(args, "split_auto", False) and not args.with_question:
        p.error("--split-auto needs --with-question")
    return args


def result_path(stem: str, llm: str, form: str, sep: str = "-", kinds: str = "") -> Path:
    """runs/knowledge/STEM<sep>LLM<kinds>[<sep>FORM].json, the LLM as a file name part."""
    llm = re.sub(r"[^A-Za-z0-9._-]+", "_", llm)
    return OUT / f"{stem}{sep}{llm}{kinds}{'' if form == 'phrases' else sep + form}.json"


def llm_cost(trace: Any, n: int, prefix: str = "knowledge") -> dict[str, Any]:
    """LLM requests, cold seconds (per query of ``n``) and fallbacks of stages ``prefix*``."""
    calls = seconds = 0.0
    fallbacks: dict[str, float] = {}
    for c in (st.counters for name, st in trace.stages.items() if name.startswith(prefix)):
        calls += c.get("llm_calls", 0) + c.get("llm_cache_hits", 0)
        seconds += c.get("llm_seconds", 0.0) + c.get("llm_cached_seconds", 0.0)
        for key, value in c.items():
            if key.startswith("fallback.") or key in ("subset_violations", "summary_fallbacks",
                                                       "no_elements"):
                fallbacks[key] = fallbacks.get(key, 0) + value
    return {"calls": calls / n, "seconds": seconds / n, "fallbacks": fallbacks}


def load_set(name: str, limit: int = 0) -> tuple[list[Any], dict, dict, dict]:
    """A generated set's first ``limit`` questions; qrels, kind and reference answer by id."""
    from intentrank.data.dataset import load_dataset

    ds = load_dataset(ROOT / "runs" / "generated" / name)
    queries, qrels = ds.split("generated")
    meta = ds.query_metadata()
    queries = [q for q in queries if meta.get(q.id, {}).get("kind") in KINDS][:limit or None]
    return (queries, {q.id: qrels[q.id] for q in queries},
            {q.id: meta[q.id]["kind"] for q in queries}, ds.reference_answers())


def judge_item(idx: Any, qrels: dict, refs: dict[str, str], q: Any, answer: str) -> Any:
    """What the judge sees of an answer to ``q``: the reference answer and gold documents."""
    from intentrank.eval.answer_judge import JudgeItem

    gold = sorted(d for d, g in qrels[q.id].items() if g > 0)
    return JudgeItem(q.id, q.text, refs[q.id], tuple(idx.doc_text(d) for d in gold), answer)


def open_index(name: str, path: Path | None = None) -> Any:
    from intentrank.index import Index

    return Index.open(path or ROOT / "indexes" / name)


class MemoScorer:
    """A pair scorer scoring each distinct pair once per run (the CE scores pairs alone)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.scores = inner, {}
        self.name = getattr(inner, "name", "-")
        self.max_length = getattr(inner, "max_length", None)

    def predict(self, pairs: list[tuple[str, str]], batch_size: int = 8) -> Any:
        import numpy as np

        missing = list(dict.fromkeys(p for p in pairs if p not in self.scores))
        if missing:
            self.scores.update(zip(missing, self.inner.predict(missing, batch_size).tolist(),
                                   strict=True))
        return np.array([self.scores[p] for p in pairs], dtype=np.float32)


def rank_systems(idx: Any, llm: Any, queries: list[Any], args: argparse.Namespace,
                 result: dict[str, Any], save: Callable[[dict[str, list[Any]]], None],
                 oracle: dict[str, list[str]] | None = None,
                 skip: frozenset[str] = frozenset()) -> dict[str, list[Any]]:
    """``none`` (BM25 and dense interleaved to 100 unique), ``ce`` (the bundled
    cross-encoder over those), ``ka<N>`` (knowledge-aware rerank at each ``--n-know``) and
    the variants the options ask for (``ka<N>:element``, ``:element+question``,
    ``:element+question+auto``; ``kaoracle``: ``oracle``'s elements, no LLM), except those in
    ``skip``. Fills ``result["cost"]`` and ``result["elements"]``, calls ``save`` after each
    system and returns ``{system: rankings}``."""
    from intentrank.core.config import build_pipeline
    from intentrank.pipelines import build_context
    from intentrank.query.knowledge import KIND, KnowledgeElements, knowledge_of
    from intentrank.rerank.per_element import PerElementRerank
    from intentrank.types import Ranking, Trace

    ctx = build_context(idx)
    first, ce = build_pipeline(FIRST, ctx, "first"), build_pipeline(CE, ctx, "ce")
    ce.scorer = MemoScorer(ce.scorer)
    n, trace = len(queries), Trace()
    t0 = time.perf_counter()
    base = first([Ranking(q) for q in queries], trace)
    t_first = time.perf_counter() - t0
    reranked = ce(base, trace)
    t_base = time.perf_counter() - t0
    systems = {"none": base, "ce": reranked}
    result["cost"].update({"none": {"seconds": t_first / n, "calls": 0},
                           "ce": {"seconds": t_base / n, "calls": 0}})

    def per_element(known: list[Any], system: str, cost: dict[str, Any],
                    against: str = "element", question: bool = False) -> None:
        if system not in skip:
            t0 = time.perf_counter()
            systems[system] = PerElementRerank(ce, top_k=100, against=against,
                                               with_question=question)(known, Trace())
            result["cost"][system[2:]] = {**cost,
                                          "rerank_seconds": (time.perf_counter() - t0) / n}

    def elements(key: str, split: str = "always") -> tuple[list[Any], Any]:
        t = Trace()
        known = KnowledgeElements(llm, idx, n_know=int(key), doc_words=150, form=args.form,
                                  split=split)(reranked, t)
        found = {r.query.id: knowledge_of(r) for r in known}
        key += ":auto" if split == "auto" else ""
        if result["elements"].setdefault(key, found) != found:
            raise SystemExit(f"N_know={key}: the elements differ from the reused run's "
                             "(another LLM reply cache?); run without --reuse")
        return known, t

    save(systems)
    for n_know in map(str, args.n_know):
        t0 = time.perf_counter()
        known, t = elements(n_know)
        if paper := f"ka{n_know}" not in skip:
            systems[f"ka{n_know}"] = PerElementRerank(ce, top_k=100)(known, t)
        wall = time.perf_counter() - t0
        cost = llm_cost(t, n)
        if paper or n_know not in result["cost"]:
            rerank = sum(st.seconds for k, st in t.stages.items() if k.startswith("per_element"))
            result["cost"][n_know] = {**cost, "rerank_seconds": rerank / n, "wall": wall / n,
                                      "base_seconds": t_base / n}
        if args.element_alone:
            per_element(known, f"ka{n_know}:element", result["cost"][n_know])
        if args.with_question:
            per_element(known, f"ka{n_know}:element+question", result["cost"][n_know],
                        question=True)
        if args.split_auto:
            gated, t = elements(n_know, "auto")
            parts = sum(st.counters.get("single_part", 0) for k, st in t.stages.items()
                        if k.startswith("knowledge"))
            per_element(gated, f"ka{n_know}:element+question+auto",
                        {**llm_cost(t, n), "single_part": parts}, question=True)
        save(systems)
        print(f"  N_know={n_know}: {wall / n:.1f} s/q, {cost['calls']:.1f} calls/q", flush=True)
    if oracle is not None:
        known = [Ranking(r.query.with_derived(KIND, oracle[r.query.id], "oracle"), r.docs)
                 for r in reranked]
        result["elements"]["oracle"] = {r.query.id: knowledge_of(r) for r in known}
        no_llm = {"calls": 0, "seconds": 0.0}
        per_element(known, "kaoracle", no_llm, "question+element")
        if args.element_alone:
            per_element(known, "kaoracle:element", no_llm)
        if args.with_question:
            per_element(known, "kaoracle:element+question", no_llm, question=True)
        save(systems)
    return systems


def measure(args: argparse.Namespace) -> None:
    """A generated set: R@k per question kind; with N_know 5, judged answers (Table 5)."""
    from intentrank.answer.generate import AnswerGenerator
    from intentrank.eval.answer_judge import judge_answers, summarize
    from intentrank.llm.client import load_llm
    from intentrank.measures.metrics import evaluate
    from intentrank.types import Trace

    queries, qrels, kind, refs = load_set(args.set, args.n)
    idx = open_index(args.set, args.index)
    path = args.out or result_path(args.set, args.llm, args.form, "--", "--pair+single")
    result: dict[str, Any] = {
        "set": args.set, "dataset": args.set, "split": "generated", "seed": "first",
        "metrics": R_AT, "tests": ["R@10"], "kind": kind,
        "kinds": {k: sum(v == k for v in kind.values()) for k in KINDS}}
    systems, llm = measure_labelled(args, idx, queries, qrels, path, result,
                                    lambda run: evaluate(run, qrels, R_AT).per_query)
    if not args.answer_n or 5 not in args.n_know:
        return
    judge = load_llm(args.judge_llm) if args.judge_llm else llm
    result["judge_llm"] = args.judge_llm or args.llm
    subset = [r for r in systems["ka5"] if r.query.id in refs][:args.answer_n]
    result["answers"] = {}
    for n_ans in (3, 5, 10, 20):
        t = Trace()
        t0 = time.perf_counter()
        answered = AnswerGenerator(llm, idx, top_k=n_ans)(subset, t)
        wall = time.perf_counter() - t0
        judged = judge_answers(judge, [judge_item(idx, qrels, refs, r.query, r.query.answer.text)
                                       for r in answered], Trace())
        s = summarize(judged)
        c = t.stage("answer").counters
        result["answers"][str(n_ans)] = {
            "n": len(subset), "relevance": s.relevance, "faithfulness": s.faithfulness,
            "n_relevance": s.n_relevance, "n_faithfulness": s.n_faithfulness,
            "judge_fallbacks": s.fallbacks,
            "answer_fallbacks": {k: v for k, v in c.items() if k.startswith("fallback.")},
            "abstentions": c.get("abstentions", 0),
            "citations": c.get("citations", 0) / len(subset),
            "seconds": llm_cost(t, len(subset), "answer")["seconds"],
            "wall": wall / len(subset),
            "per_query": {r.query.id: {"answer": r.query.answer.text, "kind": kind[r.query.id],
                                       "cited": r.query.answer.cited_ids,
                                       "relevance": j.relevance, "faithfulness": j.faithfulness}
                          for r, j in zip(answered, judged, strict=True)}}
        save_json(path, result)
        print(f"  N_ans={n_ans}: relevance {s.relevance}, faithfulness {s.faithfulness}",
              flush=True)


def same_scores(stored: dict[str, float], fresh: dict[str, float]) -> bool:
    """Whether ``stored`` has every metric of ``fresh`` with the same value (NaN never)."""
    return all(m in stored and math.isclose(v, stored[m], rel_tol=0, abs_tol=1e-9)
               for m, v in fresh.items())


def merge_reused(old: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """``fresh`` over ``old``; systems ranked again must score as stored (SystemExit)."""
    for system in set(old) & set(fresh):
        for qid, scores in fresh[system].items():
            if not same_scores(old[system].get(qid, {}), scores):
                raise SystemExit(f"--reuse: {system} scores query {qid} differently from the "
                                 "reused run; run without --reuse")
    return {**old, **fresh}


def rank_run(rankings: list[Any]) -> dict[str, dict[str, float]]:
    return {r.query.id: rank_scores(r.doc_ids) for r in rankings}


def measure_labelled(args: argparse.Namespace, idx: Any, queries: list[Any],
                     qrels: dict[str, dict[str, int]], path: Path, result: dict[str, Any],
                     score: Callable[[dict[str, dict[str, float]]], dict[str, Any]],
                     oracle: dict[str, list[str]] | None = None) -> tuple[dict, Any]:
    """What the measure commands share: rank, score per query, save; (rankings, LLM)."""
    from intentrank.llm.client import load_llm

    result.update({"llm": args.llm, "form": args.form, "n": len(queries), "sample": args.n,
                   "relevant_per_query": sum(sum(g > 0 for g in qrels[q.id].values())
                                             for q in queries) / len(queries),
                   "queries": [q.id for q in queries], "per_query": {}, "cost": {},
                   "elements": {}})
    print(f"{result['dataset']} {result['split']}: {len(queries)} queries (seed "
          f"{result['seed']}), {result['relevant_per_query']:.2f} relevant per query",
          flush=True)
    old: dict[str, Any] = {}
    if args.reuse:  # the earlier run's scores; result takes over its costs and elements
        if not path.exists():
            raise SystemExit(f"--reuse: no earlier run at {path}")
        stored = json.loads(path.read_text())
        for key in ("queries", "llm", "form"):
            if stored.get(key, "phrases" if key == "form" else None) != result[key]:
                raise SystemExit(f"--reuse: {path} was run with another {key}; "
                                 "run without --reuse")
        result["cost"], result["elements"], old = (stored["cost"], stored["elements"],
                                                   stored["per_query"])

    def save(systems: dict[str, list[Any]]) -> None:
        result["per_query"] = merge_reused(old, {s: score(rank_run(r))
                                                 for s, r in systems.items()})
        save_json(path, result)

    llm = load_llm(args.llm)
    systems = rank_systems(idx, llm, queries, args, result, save, oracle,
                           frozenset(s for s in old if s.startswith("ka")))
    for row in real_rows(result):
        print(f"  {row['label']}: " + ", ".join(f"{m} {row['means'][m]:.3f}"
                                                  for m in result["metrics"]) +
              "".join(f", p {m} {row['p'][m]:.3f}" for m in row["p"]), flush=True)
    print(f"wrote {path}", flush=True)
    return systems, llm


def measure_real(args: argparse.Namespace) -> None:
    """A fixed-seed sample of a collection's labelled test queries against its qrels."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import open_or_build
    from intentrank.measures.metrics import evaluate

    ds = load_dataset(args.dataset)
    name = ds.root.name
    queries, qrels = ds.sample("test", args.n, args.seed)
    idx = open_or_build(ds.corpus, args.index or ROOT / "indexes" / name, progress=True,
                        source=str(ds.root))
    result = {"dataset": name, "source": str(ds.root), "split": "test", "seed": args.seed,
              "metrics": list(REAL_METRICS)}
    measure_labelled(args, idx, queries, qrels,
                     args.out or result_path(f"real-{name}", args.llm, args.form), result,
                     lambda run: evaluate(run, qrels, REAL_METRICS).per_query)


def measure_aspects(args: argparse.Namespace) -> None:
    """Composed two-aspect questions: R@k, nDCG@10, S-recall@10 and alpha-nDCG@10."""
    from intentrank.data.aspects import load_aspect_set
    from intentrank.measures.diversity import evaluate_diversity
    from intentrank.measures.metrics import evaluate
    from intentrank.types import Query

    source = Path(args.set)
    if source.suffix != ".jsonl":
        source = ROOT / "runs" / "aspects" / f"{args.set}.jsonl"
    questions = load_aspect_set(source)[:args.n or None]
    name = source.stem
    idx = open_index(name.split("-")[0], args.index)
    qrels = {q.id: q.qrels() for q in questions}
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
    measure_labelled(args, idx, [Query(q.id, q.text) for q in questions], qrels,
                     args.out or result_path(f"aspects-{name}", args.llm, args.form), result,
                     score, oracle)


def judge_check(args: argparse.Namespace) -> None:
    from intentrank.eval.answer_judge import judge_agreement, judge_answers, known_quality_answers
    from intentrank.llm.client import load_llm
    from intentrank.types import Trace

    queries, qrels, _, refs = load_set(args.set)
    idx = open_index(args.set)
    queries = [q for q in queries if q.id in refs][:args.n]
    items, keys = [], []
    for i, q in enumerate(queries):
        other = refs[queries[(i + 1) % len(queries)].id]
        for k, answer in known_quality_answers(refs[q.id], other).items():
            items.append(judge_item(idx, qrels, refs, q, answer))
            keys.append((q.id, k))
    t0 = time.perf_counter()
    judged = judge_answers(load_llm(args.llm), items, Trace())
    wall = time.perf_counter() - t0
    by_query: dict[str, dict[str, Any]] = {}
    for (qid, k), j in zip(keys, judged, strict=True):
        by_query.setdefault(qid, {})[k] = j
    a = judge_agreement(by_query)
    out = {"set": args.set, "llm": args.llm, "n": len(queries), "pairs": a.pairs,
           "agreement": a.agreement, "mean_relevance": a.mean_relevance,
           "mean_faithfulness": a.mean_faithfulness, "fallbacks": a.fallbacks,
           "seconds_per_answer": wall / max(1, sum(bool(i.answer.strip()) for i in items))}
    save_json(OUT / f"judge-check--{args.set}--{args.llm}.json", out)
    print(json.dumps(out, indent=1))


def stream(args: argparse.Namespace) -> None:
    """The method-5 chain stage after stage against streamed, cold, twice in turn."""
    from intentrank.core.config import build_pipeline
    from intentrank.core.streaming import run_streamed
    from intentrank.llm.client import load_llm
    from intentrank.pipelines import build_context

    queries = load_set(args.set, args.n)[0]
    idx = open_index(args.set)
    node = [*FIRST, CE, {"knowledge": {"n_know": 2, "doc_words": 150}},
            {"per_element": {"top_k": 50}}, {"answer": {"top_k": 3}}]
    runs: dict[str, list[float]] = {"sequential": [], "streamed": []}
    answers: dict[str, list[str]] = {}
    for mode in ("sequential", "streamed", "sequential", "streamed"):
        pipe = build_pipeline(node, build_context(idx, llm=load_llm(args.llm, cache=None)),
                              "stream")
        t0 = time.perf_counter()
        result = pipe.run(queries) if mode == "sequential" else \
            run_streamed(pipe, queries, batch_size=2)
        runs[mode].append(len(queries) / (time.perf_counter() - t0))
        answers[mode] = [r.query.answer.text for r in result.rankings]
        print(f"  {mode}: {runs[mode][-1]:.3f} questions/s", flush=True)
    out = {"set": args.set, "llm": args.llm, "n": len(queries), "batch_size": 2,
           "qps": runs, "same_answers": sum(a == b for a, b in zip(
               answers["sequential"], answers["streamed"], strict=True)),
           "pipeline": "interleave(bm25, dense) % 100 >> cross_encoder >> knowledge(n_know=2)"
                       " >> per_element(top_k=50) >> answer(top_k=3)"}
    save_json(OUT / f"stream--{args.set}--{args.llm}.json", out)
    print(json.dumps(out))


# -- the section ------------------------------------------------------------------------


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _fallbacks(cost: dict[str, Any]) -> str:
    """The fallback counts of a row (and, for ``split: auto``, the one-part questions)."""
    parts = [f"{k.removeprefix('fallback.')} {int(v)}"
             for k, v in cost.get("fallbacks", {}).items() if v]
    if "single_part" in cost:
        parts.append(f"one part {int(cost['single_part'])}")
    return ", ".join(parts) or "-"


def one_part(res: dict[str, Any], system: str, qids: list[str]) -> int:
    """How many of ``qids`` the split-auto ``system``'s LLM judged one part."""
    n_know = system[2:].split(":")[0]
    plain, auto = res["elements"].get(n_know, {}), res["elements"].get(f"{n_know}:auto", {})
    return sum(bool(plain.get(q)) and not auto.get(q) for q in qids)


def _system_order(systems: Any) -> list[str]:
    """``none``, ``ce``, then ``ka<N>`` by N, of the systems present."""
    kas = sorted((s for s in systems if s.startswith("ka")),
                 key=lambda s: (int(n) if (n := s[2:].split(":")[0]).isdigit() else 10**6, s))
    return [s for s in ("none", "ce") if s in systems] + kas


def _label(system: str) -> str:
    """``KA <N>``, with ``(element alone[, CE list first][, split auto])`` for its variants."""
    n_know, _, rest = system[2:].partition(":")
    against, *extras = rest.split("+")
    notes = ([f"{against} alone"] + ["CE list first"] * ("question" in extras)
             + ["split auto"] * ("auto" in extras))
    return {"none": "none", "ce": "CE"}.get(system, f"KA {n_know}" + (
        f" ({', '.join(notes)})" if against else ""))


def _llm_label(res: dict[str, Any]) -> str:
    """A result's LLM, and the element form when not the paper's."""
    form = res.get("form", "phrases")
    return res["llm"] if form == "phrases" else f"{res['llm']} ({form})"


def generated_rows(res: dict[str, Any], kind: str) -> list[list[Any]]:
    """The rows of a ``measure`` result for one kind of question."""
    qids = {q for q, k in res["kind"].items() if k == kind}
    part = {**res, "per_query": {s: {q: v for q, v in scores.items() if q in qids}
                                 for s, scores in res["per_query"].items()}}
    rows = []
    for row in real_rows(part) if qids else []:
        if "single_part" in row["cost"]:
            row["cost"] = {**row["cost"], "single_part": one_part(res, row["system"], qids)}
        rows.append([res["set"], _llm_label(res), row["n"], row["label"],
                     *_cells(row, tuple(R_AT), ("R@10",))])
    return rows


def real_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per system: label, n, metric means, the KA systems' paired p against CE, cost."""
    from intentrank.measures.significance import paired_test

    per_query = result["per_query"]
    metrics, tests = result.get("metrics", REAL_METRICS), result.get("tests", REAL_TESTS)
    rows = []
    for system in _system_order(per_query):
        scores = per_query[system]
        qids = sorted(scores)
        p = {m: paired_test({q: v[m] for q, v in per_query["ce"].items()},
                            {q: v[m] for q, v in scores.items()}, m).p_randomization
             for m in tests if system.startswith("ka") and "ce" in per_query}
        rows.append({"system": system, "label": _label(system), "n": len(qids), "p": p,
                     "means": {m: sum(scores[q][m] for q in qids) / len(qids) for m in metrics},
                     "cost": result["cost"].get(system[2:] if system.startswith("ka")
                                                else system, {})})
    return rows


def _cells(row: dict[str, Any], metrics: tuple[str, ...], tests: tuple[str, ...]) -> list[str]:
    """A row's means x100, p-values and LLM cost (none for pooled rows)."""
    cost = row["cost"]
    return [*(f"{100 * row['means'][m]:.1f}" for m in metrics),
            *(f"{row['p'][m]:.3f}" if m in row["p"] else "-" for m in tests),
            *([f"{cost.get('calls', 0):.1f}", f"{cost.get('seconds', 0):.1f}", _fallbacks(cost)]
              if cost else ["-"] * 3)]


def _run_kind(res: dict[str, Any]) -> tuple[str, str]:
    return res["llm"], res.get("form", "phrases")


def pooled(group: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Runs of one LLM and form over several seeds, pooled: every query once, with the
    systems all runs have (None for fewer than two runs); a query must score the same in
    every run (SystemExit otherwise)."""
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


def pooled_rows(group: list[dict[str, Any]], name: str) -> list[list[str]]:
    """Table rows for the runs of ``group`` pooled per LLM and form."""
    pools = [pooled([r for r in group if _run_kind(r) == kind])
             for kind in sorted({_run_kind(r) for r in group})]
    return [[name, _llm_label(pool), f"{row['n']} (seeds {pool['seed']}, pooled)",
             row["label"], *_cells(row, REAL_METRICS, REAL_TESTS)]
            for pool in pools if pool for row in real_rows(pool)]


NAMES = {"scifact": "SciFact", "cranfield": "Cranfield", "vaswani": "Vaswani"}
PAPER = ["paper (LiveRAG, single-document)", "Falcon3-10B", "-", "CE / KA 5", "-", "-",
         "85.0 / 85.0", *["-"] * 8]


def real_section(results: list[dict[str, Any]]) -> list[str]:
    """The ``measure-real`` tables, one per dataset and split, with the paper's R@10."""
    lines: list[str] = []
    for key in sorted({(r["dataset"], r["split"]) for r in results}):
        name, group = NAMES.get(key[0], key[0]), [r for r in results
                                                  if (r["dataset"], r["split"]) == key]
        rows = [[name, _llm_label(res), f"{row['n']} ({res['seed']})", row["label"],
                 *_cells(row, REAL_METRICS, REAL_TESTS)] for res in group for row in real_rows(res)]
        lines += [*table(["dataset", "LLM", "n (seed)", "system", *REAL_METRICS, "p R@10",
                          "p nDCG@10", "calls/q", "s/q", "fallbacks"],
                         [*rows, *pooled_rows(group, name), PAPER]).splitlines(), ""]
    return lines


def aspect_section(results: list[dict[str, Any]]) -> list[str]:
    """The ``measure-aspects`` table, all sets in one."""
    if not results:
        return []
    rows = [[res["dataset"], _llm_label(res), row["n"], f"{res['relevant_per_query']:.1f}",
             row["label"], *_cells(row, ASPECT_METRICS, ASPECT_TESTS)]
            for res in results for row in real_rows(res)]
    return [*table(["set", "LLM", "n", "relevant/q", "system", *REAL_METRICS, "S-recall@10",
                    "alpha-nDCG@10", "p R@10", "p S-recall@10", "calls/q", "s/q", "fallbacks"],
                   rows).splitlines(), ""]


def _runs(pattern: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(OUT.glob(pattern))]


def render(out: Path = BENCHMARKS) -> None:
    """The knowledge section's tables from every result in runs/knowledge/."""
    results = [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))
               if not p.name.startswith(("judge-check", "stream", "real-", "aspects-"))]
    parts = [header(), *(table(["set", "LLM", "n", "system", *R_AT, "p (R@10 vs CE)", "calls/q",
                                "s/q", "fallbacks"],
                               [row for res in results for row in generated_rows(res, kind)])
                         for kind in KINDS)]
    parts += ["\n".join(real_section(_runs("real-*.json")) + aspect_section(
        _runs("aspects-*.json")))]
    parts.append(table(
        ["set", "LLM", "judge", "n", "N_ans", "relevance", "faithfulness", "judged",
         "abstentions", "citations/answer", "answer fallbacks", "judge fallbacks", "s/answer"],
        [[res["set"], res["llm"], res.get("judge_llm"), a["n"], n_ans, _f(a["relevance"]),
          _f(a["faithfulness"]), a["n_relevance"], int(a["abstentions"]), f"{a['citations']:.1f}",
          ", ".join(f"{k.removeprefix('fallback.')} {int(v)}"
                    for k, v in a["answer_fallbacks"].items()) or "-",
          ", ".join(f"{k} {v}" for k, v in a["judge_fallbacks"].items()) or "-",
          f"{a['seconds']:.1f}"]
         for res in results for n_ans, a in res.get("answers", {}).items()]))
    kinds = ["reference", "abstention", "empty", "wrong_document", "contradicted"]
    if checks := _runs("judge-check--*.json"):
        parts.append(table(
            ["set", "judge", "questions", "pairs", "agreement", *kinds, "fallbacks", "s/answer"],
            [[c["set"], c["llm"], c["n"], c["pairs"], f"{c['agreement']:.2f}",
              *(f"{_f(c['mean_relevance'][k])} / {_f(c['mean_faithfulness'][k])}" for k in kinds),
              c["fallbacks"], f"{c['seconds_per_answer']:.1f}"] for c in checks]))
    if streams := _runs("stream--*.json"):
        rows = []
        for st in streams:
            seq, par = st["qps"]["sequential"], st["qps"]["streamed"]
            rows.append([st["set"], st["llm"], st["n"], st["batch_size"], f"`{st['pipeline']}`",
                         ", ".join(f"{x:.3f}" for x in seq), ", ".join(f"{x:.3f}" for x in par),
                         f"{(sum(par) / len(par)) / (sum(seq) / len(seq)):.2f}x",
                         f"{st['same_answers']}/{st['n']}"])
        parts.append(table(["set", "LLM", "questions", "batch", "pipeline", "sequential q/s",
                            "streamed q/s", "ratio (mean)", "same answers"], rows))
    write_section("knowledge", "\n\n".join(parts), out, template=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    commands = {"measure": measure, "measure-real": measure_real,
                "measure-aspects": measure_aspects, "judge-check": judge_check,
                "stream": stream}
    commands.get(args.cmd, lambda a: render())(args)


if __name__ == "__main__":
    main()
