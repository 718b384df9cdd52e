"""Does `intentrank choose` pick the right pipeline? Its choice on generated questions against
the candidates' order on the real queries and qrels (issue 50).

    .venv/bin/python bench/bench_choose.py          # needs indexes/{scifact,cranfield,vaswani}

For each collection and each question method (``copied``: plain sentence windows, the
"before" of the lexical bias; ``default``: what `choose` draws, the rarest 70% of a window's
content words replaced by embedding neighbours not in the source; and the variants tried
against it: ``n05`` the same with half the words replaced, ``title`` a title's, ``cooccur``
replaced by co-occurring words, ``mixed`` by both in turn), the
candidates are scored on the generated questions exactly as `choose` scores them, and their
settings (the tuned ones as tuned on all the generated questions) on the collection's real
test queries. Two decision rules pick from the same scores: ``before``, the best mean or a
cheaper candidate within noise; ``after``, what `choose` does now (tuned variants only beyond
noise of their base, `rrf` kept unless beaten beyond noise, the bootstrap by question kind).
Reported: Kendall's tau between the two orders, the regret (real nDCG@10 of the best
candidate minus the chosen one's), whether a confident pick was truly best (also over 20
half-size resamples of the questions per collection: calibration), and BM25's advantage
over dense on generated minus real questions (the lexical bias). The LLM generator is not
used here (its 0.5B keeps about one question in two minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace
from typing import Any

from lib.results import ROOT, header, log, open_index, publish_tables, save_json, table, test_split

COLLECTIONS = ("scifact", "cranfield", "vaswani")
RESAMPLES = 20
RULES = ("before", "after")


def methods() -> dict[str, Any]:
    from intentrank.eval.choose import ChooseSettings
    from intentrank.generate.known_item import KnownItemSettings as K

    base = ChooseSettings(llm_minutes=0)
    return {"copied": replace(base, known_items=K(mask=0.0, kinds=("masked",))),
            "default": base,
            "n05": replace(base, known_items=K(mask=0.5)),
            "title": replace(base, known_items=K(mask=0.5, kinds=("title-neighbour",))),
            "cooccur": replace(base, known_items=K(kinds=("cooccur",))),
            "mixed": replace(base, known_items=K(kinds=("mixed",)))}


def tau(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic)


def pick(rule: str, scored: Any, qs: Any, settings: Any, qids: list[str] | None = None,
         n_boot: int = 2000) -> Any:
    """The selection of ``rule``: ``after`` is `choose`'s; ``before`` the plain bootstrap,
    every candidate eligible, no reference."""
    from intentrank.eval.candidates import cost
    from intentrank.eval.choose import selection
    from intentrank.measures.selection import select

    if rule == "after":
        return selection(scored, qs, settings, qids, n_boot)
    scores = scored.scores if qids is None else {
        n: {q: sc[q] for q in qids} for n, sc in scored.scores.items()}
    return select(scores, {n: cost(n, scored.family[n]) for n in scores}, settings.noise,
                  settings.alpha, settings.confidence, n_boot=n_boot, seed=settings.seed)


def one(name: str, method: str, settings: Any, real: Any) -> dict[str, Any]:
    from intentrank.eval.candidates import compute_parts, families, score_candidates, score_settings
    from intentrank.eval.choose import question_set, recommend

    index = open_index(name)
    out = ROOT / "runs" / "choose" / name / method
    qs = question_set(index, out, settings, log=log)
    fams = families()
    need = sorted({p for f in fams for p in f.parts})
    parts = compute_parts(index, qs.queries, out / "parts", need, log)
    scored = score_candidates(fams, parts, qs.qrels, settings.seed)
    recommend(scored, qs, settings, out)
    queries, qrels = real
    real_parts = compute_parts(index, queries, ROOT / "runs" / "choose" / name / "real", need,
                               log)
    truth = score_settings({n: (scored.family[n], scored.params[n]) for n in scored.scores},
                           real_parts, qrels)
    gen_mean = {n: sum(s.values()) / len(s) for n, s in scored.scores.items()}
    real_mean = {n: sum(s.values()) / len(s) for n, s in truth.items()}
    names = sorted(gen_mean)
    best_real = max(real_mean.values())
    qids = sorted(next(iter(scored.scores.values())))
    rules = {}
    for rule in RULES:
        sel = pick(rule, scored, qs, settings)
        # calibration: half-size resamples of the questions, each its own choice
        rng = random.Random(0)
        picks = []
        for _ in range(RESAMPLES):
            s = pick(rule, scored, qs, settings, rng.sample(qids, len(qids) // 2), 500)
            picks.append({"chosen": s.chosen, "p_best": s.p_chosen_best,
                          "confident": s.confident,
                          "regret": best_real - real_mean[s.chosen]})
        rules[rule] = {"chosen": sel.chosen, "p_best": sel.p_chosen_best,
                       "confident": sel.confident, "warnings": sel.warnings,
                       "regret": best_real - real_mean[sel.chosen], "resamples": picks}
    return {
        "collection": name, "method": method, "questions": len(qs.queries),
        "copied": qs.mean_copied, "rules": rules,
        "tau": tau([gen_mean[n] for n in names], [real_mean[n] for n in names]),
        "best_real": max(real_mean, key=lambda n: (real_mean[n], n)),
        "generated": gen_mean, "real": real_mean, "params": scored.params,
        "bias": (gen_mean["bm25"] - gen_mean["dense"]) - (real_mean["bm25"] - real_mean["dense"]),
    }


def _confident(picks: list[dict[str, Any]]) -> dict[str, int]:
    """The confident picks: how many were truly best, within 1 point, and all of them."""
    conf = [p for p in picks if p["confident"]]
    return {"right": sum(p["regret"] < 1e-12 for p in conf),
            "near": sum(p["regret"] <= 0.01 for p in conf), "confident": len(conf)}


def _calibration(picks: list[dict[str, Any]]) -> str:
    return " / ".join(map(str, _confident(picks).values()))


def _value(key: str, x: float) -> str:
    """A summary value as the section's prose reads it (points for bias and regret)."""
    if key == "tau":
        return f"{x:.2f}"
    return f"{100 * x:+.1f}" if key == "bias" else f"{100 * x:.2f}" if "regret" in key else str(x)


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per method: mean tau and BM25 bias, and per rule the worst regret, the resamples'
    mean regret and their confident picks (all / truly best / within 1 point)."""
    out = {}
    for m in dict.fromkeys(r["method"] for r in rows):
        sub = [r for r in rows if r["method"] == m]
        s = {"tau": sum(r["tau"] for r in sub) / len(sub),
             "bias": sum(r["bias"] for r in sub) / len(sub)}
        for rule in RULES:
            res = [p for r in sub for p in r["rules"][rule]["resamples"]]
            s[f"regret_{rule}"] = max(r["rules"][rule]["regret"] for r in sub)
            s[f"resample_regret_{rule}"] = sum(p["regret"] for p in res) / len(res)
            s |= {f"{k}_{rule}": n for k, n in _confident(res).items()}
        out[m] = s
    return out


def render(rows: list[dict[str, Any]]) -> str:
    cands = sorted(rows[0]["generated"])
    main_rows, cand_rows = [], []
    for r in rows:
        b, a = r["rules"]["before"], r["rules"]["after"]
        main_rows.append([
            r["collection"], r["method"], r["questions"], f"{r['copied']:.0%}",
            f"{r['tau']:.2f}", f"{100 * r['bias']:+.1f}", r["best_real"],
            f"{b['chosen']} ({100 * b['regret']:.2f})", f"{a['chosen']} ({100 * a['regret']:.2f})",
            f"{a['p_best']:.2f}", _calibration(b["resamples"]), _calibration(a["resamples"])])
        for n in cands:
            cand_rows.append([r["collection"], r["method"], n, f"{r['generated'][n]:.4f}",
                              f"{r['real'][n]:.4f}"])
    summ = [[m, f"{s['tau']:.2f}", f"{100 * s['bias']:+.1f}",
             f"{100 * s['regret_before']:.2f}", f"{100 * s['regret_after']:.2f}",
             f"{100 * s['resample_regret_before']:.2f}", f"{100 * s['resample_regret_after']:.2f}",
             f"{s['right_before']} / {s['near_before']} / {s['confident_before']}",
             f"{s['right_after']} / {s['near_after']} / {s['confident_after']}"]
            for m, s in summary(rows).items()]
    return "\n\n".join([
        header(),
        table(["collection", "questions", "n", "copied", "Kendall tau", "BM25 bias (points)",
               "best on qrels", "chosen before (regret)", "chosen after (regret)",
               "P(best) after", "confident resample picks before: best / within 1 / all",
               "after"], main_rows),
        table(["questions", "mean tau", "mean BM25 bias (points)", "max regret before",
               "max regret after", "resamples' mean regret before", "after",
               "confident resample picks before: best / within 1 / all", "after"], summ),
        table(["collection", "questions", "candidate", "nDCG@10 generated", "nDCG@10 qrels"],
              cand_rows)])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    p.add_argument("--methods", nargs="+", default=None)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)


    chosen = methods()
    rows = []
    for name in args.collections:
        real = test_split(name)
        for m in args.methods or list(chosen):
            log(f"{name}: {m}")
            rows.append(one(name, m, chosen[m], real))
    save_json(ROOT / "runs" / "choose" / "validation.json", rows)
    values = {f"{k}_{m}": _value(k, x) for m, s in summary(rows).items() for k, x in s.items()}
    publish_tables("choose", render(rows), values, write=not args.no_write)


if __name__ == "__main__":
    sys.exit(main())
