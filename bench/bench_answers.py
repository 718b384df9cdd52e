"""Answers that answer and cite (issue 34): how the answer stage abstains and cites, on
answerable and unanswerable questions (bench/sections/defaults.md, "Answers"), one JSON per
setting in runs/answers/ (`intentrank bench answers` runs them; bench_defaults.py renders them):

    .venv/bin/python bench/bench_answers.py measure --llm embedded --abstain similarity \
        --cite context --max-citations 3 [--seed 1 (held out)] [--set runs/generated/cranfield]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from lib.results import DATA, ROOT, header, log, open_index, save_json, table

OUT = ROOT / "runs" / "answers"
SUMMED = ("abstained", "cites_gold", "cited", "cited_gold", "unsupported")  # over questions


def as_question(claim: str) -> str:
    """A SciFact claim as a yes/no question."""
    claim = claim.strip().rstrip(".")
    first = claim[:1] if claim[1:2].isupper() else claim[:1].lower()
    return f"Is it true that {first}{claim[1:]}?"


def question_sets(n: int, seed: int, question_set: Path | None = None
                  ) -> tuple[Any, dict, list[Any], list[Any]]:
    """(index, qrels, answerable rankings, unanswerable rankings) of ``n`` sampled claims
    (a seed other than 0 samples from the claims seed 0 did not draw), or of a generated
    ``question_set``'s questions (split ``generated``; its collection's index)."""
    from intentrank.core.config import load_config, resolve_pipeline
    from intentrank.core.registry import BuildContext
    from intentrank.data.dataset import load_dataset
    from intentrank.pipelines import build_pipeline
    from intentrank.types import Ranking

    # generated questions are searched over their collection's index
    index = open_index(question_set.name if question_set else "scifact")
    queries, qrels = load_dataset(question_set or DATA / "scifact").split(
        "generated" if question_set else "test")
    pool = list(queries)
    n = min(n, len(pool) // 2 if seed else len(pool))
    if seed:  # a held-out sample: disjoint from seed 0's, where methods are chosen
        chosen = {q.id for q in random.Random(0).sample(pool, n)}
        pool = [q for q in pool if q.id not in chosen]
    sample = sorted(random.Random(seed).sample(pool, n), key=lambda q: q.id)
    if question_set is None:
        sample = [replace(q, text=as_question(q.text)) for q in sample]
    # the answer pipeline's passages: its steps before the answer, then its top 5
    retrieval = [*load_config(resolve_pipeline("answer"))["pipeline"][:-1], {"cutoff": 5}]
    ranked = build_pipeline(retrieval, BuildContext(index)).run(sample).rankings
    answerable = [r for r in ranked if set(qrels[r.query.id]) & set(r.doc_ids)]
    # unanswerable: a question with the next question's passages, when none of them is gold
    unanswerable = [Ranking(r.query, other.docs) for r, other in zip(
        ranked, ranked[1:] + ranked[:1], strict=True) if not set(qrels[r.query.id])
        & set(other.doc_ids)]
    return index, qrels, answerable, unanswerable


def measure(args: argparse.Namespace) -> Path:
    from intentrank.answer.citations import is_abstention
    from intentrank.answer.generate import DOC_WORDS, AnswerGenerator
    from intentrank.llm.client import load_llm
    from intentrank.llm.model_files import DEFAULT_MODEL
    from intentrank.llm.roles import EMBEDDED, role_spec
    from intentrank.types import Trace

    index, qrels, answerable, unanswerable = question_sets(args.n, args.seed, args.set)
    spec = role_spec(args.llm, "answer")
    if spec.strip() in EMBEDDED:  # named by the model it resolves to, as the spec's outputs
        spec = f"llamacpp:{DEFAULT_MODEL}"
    stage = AnswerGenerator(load_llm(spec), index, top_k=5, abstain=args.abstain,
                            cite=args.cite, support_threshold=args.support_threshold,
                            max_citations=args.max_citations, doc_words=args.doc_words)
    result: dict[str, Any] = {
        "llm": spec, "abstain": args.abstain, "cite": args.cite,
        "abstain_threshold": stage.abstain_threshold,
        "support_threshold": stage.support_threshold, "max_citations": args.max_citations,
        "cite_margin": stage.cite_margin, "n": args.n, "doc_words": args.doc_words,
        "seed": args.seed, "questions": f"generated {args.set.name.capitalize()}"
        if args.set else "SciFact claims"}
    for kind, rankings in (("answerable", answerable), ("unanswerable", unanswerable)):
        trace, t0 = Trace(), time.perf_counter()
        answers = [r.query.answer for r in stage(rankings, trace)]
        c = trace.stage("answer").counters
        rows = []
        for r, a in zip(rankings, answers, strict=True):
            gold = set(qrels[r.query.id]) & set(a.cited_ids)
            rows.append({"id": r.query.id, "abstained": is_abstention(a.text) or not a.text,
                         "cites_gold": bool(gold), "text": a.text, "cited": len(a.cited_ids),
                         "cited_gold": len(gold), "fallback": a.fallback,
                         "unsupported": sum(e.n is None for e in a.evidence)})
        # replies replayed from the cache are charged the time they took when generated
        result[kind] = {
            "n": len(rows), "rows": rows, **{k: sum(x[k] for x in rows) for k in SUMMED},
            "sentences": int(c.get("sentences", 0)),
            "seconds": time.perf_counter() - t0 + c.get("llm_cached_seconds", 0.0)}
        log(f"{kind}: {result[kind]['abstained']}/{len(rows)} abstained, "
            f"{result[kind]['cites_gold']} cite gold, {result[kind]['seconds']:.0f} s")
    result["command"] = header()
    cite = f"{args.cite}{args.max_citations}" if args.cite != "llm" else args.cite
    name = f"{spec.replace(':', '_')}--{args.abstain}-{cite}--n{args.n}"
    if args.support_threshold is not None:
        name += f"--support{args.support_threshold:g}"
    if args.doc_words != DOC_WORDS:
        name += f"--words{args.doc_words}"
    if args.seed:
        name += f"--seed{args.seed}"
    if args.set:
        name += f"--generated-{args.set.name}"
    path = OUT / f"{name}.json"
    save_json(path, result)
    log(f"wrote {path}")
    return path


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}% ({a}/{b})" if b else "-"


def answers_table() -> tuple[str, str]:
    """The answers table of docs/benchmarks.md's "Defaults" section and the commands of its
    rows (bench_defaults.py); the runs before --doc-words and --set lack those keys."""
    from intentrank.answer.generate import DOC_WORDS

    results = sorted((json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))),
                     key=lambda r: (r.get("questions", "SciFact claims") != "SciFact claims",
                                    r.get("seed", 0)))
    if not results:
        raise SystemExit(f"no results in {OUT}: run `bench_answers.py measure` first")
    rows = []
    for r in results:
        a, u, seed, words = r["answerable"], r["unanswerable"], r.get("seed", 0), r.get(
            "doc_words", DOC_WORDS)
        margin = f", margin {r['cite_margin']:g}" if r["cite"] == "context" else ""
        cite = f" ({r['support_threshold']:g}{margin}, up to {r.get('max_citations', 1)})"
        rows.append([r.get("questions", "SciFact claims"),
                     f"{seed}{' (held out)' if seed else ''}",
                     r["llm"] + (f" ({words} words/passage)" if words != DOC_WORDS else ""),
                     r["abstain"] + (f" ({r['abstain_threshold']:g})"
                                     if r["abstain"] != "llm" else ""),
                     r["cite"] + (cite if r["cite"] != "llm" else ""),
                     _pct(a["n"] - a["abstained"], a["n"]), _pct(a["cites_gold"], a["n"]),
                     _pct(a["cited_gold"], a["cited"]) if "cited" in a else "-",
                     _pct(a["abstained"], a["n"]), _pct(u["abstained"], u["n"]),
                     _pct(a["unsupported"], a["sentences"]) if a["sentences"] else "-",
                     f"{(a['seconds'] + u['seconds']) / max(a['n'] + u['n'], 1):.1f}"])
    commands = [r["command"].splitlines()[0].replace("- command: ", "- ") + " ("
                + r["command"].splitlines()[2].removeprefix("- date: ") + ")" for r in results]
    return table(["questions", "seed", "LLM", "abstain", "cite", "answered",
                  "answered citing gold", "citations of gold", "false abstentions",
                  "abstained (unanswerable)", "unsupported sentences", "s/answer"],
                 rows), "\n".join(commands)


def main(argv: list[str] | None = None) -> None:
    from intentrank.answer.generate import ABSTAIN, CITE, DOC_WORDS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    m = p.add_subparsers(dest="cmd", required=True).add_parser("measure")
    m.add_argument("--llm", default="embedded", help="LLM spec (embedded: the answer role's)")
    m.add_argument("--n", type=int, default=40, help="claims sampled (--set: its questions)")
    m.add_argument("--set", type=Path, help="a generated question set (runs/generated/NAME)")
    m.add_argument("--seed", type=int, default=0, help="the sample (0: tuning; 1: held out)")
    m.add_argument("--abstain", default="relevance", choices=list(ABSTAIN))
    m.add_argument("--cite", default="posthoc", choices=list(CITE))
    m.add_argument("--doc-words", type=int, default=DOC_WORDS, help="words shown per passage")
    m.add_argument("--support-threshold", type=float, help="default: the cite method's")
    m.add_argument("--max-citations", type=int, default=1, help="passages a sentence may cite")
    args = p.parse_args(argv)
    if args.set and not (args.set / "qrels" / "generated.tsv").is_file():
        p.error(f"--set {args.set}: not a generated question set (no qrels/generated.tsv; "
                f"make one with `intentrank generate`)")
    measure(args)


if __name__ == "__main__":
    main()
