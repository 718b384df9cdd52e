"""Does `intentrank choose` pick the right pipeline? Its choice on generated questions against
the candidates' order on the real queries and qrels (issue 50).

    .venv/bin/python bench/bench_choose.py          # needs indexes/{scifact,cranfield,vaswani}

For each collection and each question method (``copied``: plain sentence windows, the
"before" of the lexical bias; ``default``: what `choose` draws, the rarest words replaced by
embedding neighbours not in the source; ``cooccur``: replaced by co-occurring words), the
candidates are scored on the generated
questions exactly as `choose` scores them, and their settings (the tuned ones as tuned on
all the generated questions) are scored on the collection's real test queries. Reported:
Kendall's tau between the two orders, the regret (real nDCG@10 of the best candidate minus
the chosen one's), whether a confident pick was truly best (also over 20 half-size
resamples of the questions per collection: calibration), and BM25's advantage over dense
on generated minus real questions (the lexical bias). The LLM generator is not used here
(its 0.5B keeps about one question a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace
from typing import Any

from report import ROOT, header, log, open_index, publish_tables, save_json, table

COLLECTIONS = ("scifact", "cranfield", "vaswani")
RESAMPLES = 20


def methods() -> dict[str, Any]:
    from intentrank.eval.choose import ChooseSettings
    from intentrank.generate.known_item import KnownItemSettings

    base = ChooseSettings(llm_minutes=0)
    return {"copied": replace(base, known_items=KnownItemSettings(mask=0.0, kinds=("masked",))),
            "default": base,
            "cooccur": replace(base, known_items=KnownItemSettings(kinds=("cooccur",)))}


def tau(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic)


def one(name: str, method: str, settings: Any, real: Any) -> dict[str, Any]:
    from intentrank.eval.candidates import compute_parts, families, score_candidates, score_settings
    from intentrank.eval.choose import question_set, recommend
    from intentrank.measures.selection import select

    index = open_index(name)
    out = ROOT / "runs" / "choose" / name / method
    qs = question_set(index, out, settings, log=log)
    fams = families()
    need = sorted({p for f in fams for p in f.parts})
    parts = compute_parts(index, qs.queries, out / "parts", need, log)
    scored = score_candidates(fams, parts, qs.qrels, settings.seed)
    rec = recommend(scored, qs, settings, out)
    queries, qrels = real
    real_parts = compute_parts(index, queries, ROOT / "runs" / "choose" / name / "real", need,
                               log)
    truth = score_settings({n: (scored.family[n], scored.params[n]) for n in scored.scores},
                           real_parts, qrels)
    gen_mean = {n: sum(s.values()) / len(s) for n, s in scored.scores.items()}
    real_mean = {n: sum(s.values()) / len(s) for n, s in truth.items()}
    names = sorted(gen_mean)
    best_real = max(real_mean.values())
    sel = rec.selection
    # calibration: half-size resamples of the questions, each its own choice
    rng = random.Random(0)
    qids = sorted(next(iter(scored.scores.values())))
    picks = []
    costs = {e.name: e.cost for e in sel.estimates}
    for _ in range(RESAMPLES):
        sub = rng.sample(qids, len(qids) // 2)
        s = select({n: {q: sc[q] for q in sub} for n, sc in scored.scores.items()}, costs,
                   settings.noise, settings.alpha, settings.confidence, n_boot=500)
        picks.append({"chosen": s.chosen, "p_best": s.p_chosen_best,
                      "confident": s.confident,
                      "regret": best_real - real_mean[s.chosen]})
    return {
        "collection": name, "method": method, "questions": len(qs.queries),
        "copied": qs.mean_copied, "chosen": sel.chosen, "p_best": sel.p_chosen_best,
        "confident": sel.confident, "warnings": sel.warnings,
        "tau": tau([gen_mean[n] for n in names], [real_mean[n] for n in names]),
        "regret": best_real - real_mean[sel.chosen],
        "best_real": max(real_mean, key=lambda n: (real_mean[n], n)),
        "generated": gen_mean, "real": real_mean, "params": scored.params,
        "bias": (gen_mean["bm25"] - gen_mean["dense"]) - (real_mean["bm25"] - real_mean["dense"]),
        "resamples": picks, "seconds": rec.seconds,
    }


def render(rows: list[dict[str, Any]]) -> str:
    cands = sorted(rows[0]["generated"])
    main_rows, cand_rows = [], []
    for r in rows:
        conf = [p for p in r["resamples"] if p["confident"]]
        main_rows.append([
            r["collection"], r["method"], r["questions"], f"{r['copied']:.0%}", r["chosen"],
            f"{r['p_best']:.2f}", r["best_real"], f"{100 * r['regret']:.2f}", f"{r['tau']:.2f}",
            f"{100 * r['bias']:+.1f}",
            f"{sum(p['regret'] < 1e-12 for p in conf)} / "
            f"{sum(p['regret'] <= 0.01 for p in conf)} / {len(conf)}"])
        for n in cands:
            cand_rows.append([r["collection"], r["method"], n, f"{r['generated'][n]:.4f}",
                              f"{r['real'][n]:.4f}"])
    means = {}
    for m in sorted({r["method"] for r in rows}):
        sub = [r for r in rows if r["method"] == m]
        means[m] = (sum(r["tau"] for r in sub) / len(sub), max(r["regret"] for r in sub),
                    sum(r["bias"] for r in sub) / len(sub))
    summary = [[m, f"{t:.2f}", f"{100 * g:.2f}", f"{100 * b:+.1f}"]
               for m, (t, g, b) in means.items()]
    return "\n\n".join([
        header(),
        table(["collection", "questions", "n", "copied", "chosen", "P(best)", "best on qrels",
               "regret (points)", "Kendall tau", "BM25 bias (points)",
               "confident resample picks: best / within 1 point / all"], main_rows),
        table(["questions", "mean tau", "max regret (points)", "mean BM25 bias (points)"],
              summary),
        table(["collection", "questions", "candidate", "nDCG@10 generated", "nDCG@10 qrels"],
              cand_rows)])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    p.add_argument("--methods", nargs="+", default=None)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    from report import DATA

    from intentrank.data.dataset import load_dataset

    chosen = methods()
    rows = []
    for name in args.collections:
        real = load_dataset(DATA / name).split("test")
        for m in args.methods or list(chosen):
            log(f"{name}: {m}")
            rows.append(one(name, m, chosen[m], real))
    save_json(ROOT / "runs" / "choose" / "validation.json", rows)
    md = render(rows)
    values = {}
    for m in sorted({r["method"] for r in rows}):
        sub = [r for r in rows if r["method"] == m]
        values[f"tau_{m}"] = f"{sum(r['tau'] for r in sub) / len(sub):.2f}"
        values[f"regret_{m}"] = f"{100 * max(r['regret'] for r in sub):.2f}"
        values[f"bias_{m}"] = f"{100 * sum(r['bias'] for r in sub) / len(sub):+.1f}"
    publish_tables("choose", md, values, write=not args.no_write)


if __name__ == "__main__":
    sys.exit(main())
