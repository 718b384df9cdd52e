"""Follow-up-aware reranking (FUQ) against the baselines of the paper's Table 2: the shipped
experiment file ``fuq`` run by the harness on a seed-0 sample of each collection's test
queries. FUQ (F) uses weights tuned on SciFact train (``fuq-scifact``); Cranfield and Vaswani
have no train split, so each fold is ranked with weights tuned on the other folds (5-fold).
Reports go to ``runs/fuq/<collection>.{md,html,json}``; the section is assembled from them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import DATA, ROOT, header, log, write_section

from intentrank.core.stage import Stage
from intentrank.types import Ranking

RUNS = ROOT / "runs" / "fuq"
COLLECTIONS = ("scifact", "cranfield", "vaswani")


class FoldRun(Stage):
    """Each query's documents in the order of a precomputed run (the cross-validated FUQ)."""

    name = "fuq_cv"

    def __init__(self, run: dict[str, dict[str, float]]) -> None:
        self.run = run

    def transform(self, rankings: list[Ranking], trace: Any) -> list[Ranking]:
        return [Ranking.from_scores(r.query, self.run.get(r.query.id, {}), self.name)
                for r in rankings]


def run_collection(name: str, n: int, train_sample: int) -> None:
    from intentrank.core.saved_params import save_params
    from intentrank.data.dataset import load_dataset
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment
    from intentrank.index import open_or_build
    from intentrank.llm.client import load_llm
    from intentrank.report import write_report
    from intentrank.tune.fuq import cross_validated_fuq, fuq_pipeline, tune_fuq_on_split

    ds = load_dataset(DATA / name)
    index = open_or_build(ds.corpus, ROOT / "indexes" / name, source=name)
    llm = load_llm("embedded")
    spec = load_experiment("fuq").replace(dataset=name, sample=n, seed=0)
    if "train" in ds.splits:
        tuned = tune_fuq_on_split(ds, index, llm, "train", "nDCG@3", train_sample, 0)
        save_params(f"fuq-{name}", tuned, dataset=name, split="train", sample=train_sample,
                    seed=0)
        fuq = spec.pipeline("FUQ (F)")  # the file names fuq-scifact
        fuq.node = [*fuq.node[:-1], {"fuq": {"params": f"fuq-{name}", "top_k": 100}}]
        spec = spec.replace(notes=[*spec.notes, f"FUQ (F) weights tuned on {train_sample} "
                                   f"train queries: {tuned.best}."])
    else:  # FUQ (F): each fold reranked with the weights tuned on the other folds
        queries, qrels = ds.sample(spec.split, spec.sample, spec.seed)
        rankings = fuq_pipeline(index, llm).run(queries).rankings  # follow-ups: reply cache
        run, _ = cross_validated_fuq(rankings, qrels, "nDCG@3", folds=5, seed=spec.seed)
        stage = fuq_pipeline(index, llm) >> FoldRun(run)
        spec = spec.replace(pipelines=[dataclasses.replace(
            p, node=None, stage=stage, description="weights tuned on the other folds (5-fold "
            "CV)") if p.name == "FUQ (F)" else p for p in spec.pipelines])
    result = run_experiment(spec, index=index, dataset=ds, llm=llm,
                            log=lambda m: log(f"fuq {name}: {m}"))
    result.notes.append("Run: " + header().replace("\n- ", "; ").strip("- \n"))
    write_report(result, RUNS / name)


def sweep_plot(results: list[dict], path: Path) -> None:
    """HitRate, Recall and MRR at k = 1..5 of dense and both FUQs, a row per collection."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3 * len(results)))
    for row, res in zip(fig.subplots(len(results), 3, squeeze=False), results, strict=True):
        scores = {c["name"]: c["aggregate"] for c in res["configs"]}
        for ax, metric in zip(row, ("HitRate", "Recall", "MRR"), strict=True):
            for label, style in (("dense", ":"), ("FUQ (NF)", "--"), ("FUQ (F)", "-")):
                ax.plot(range(1, 6), [scores[label][f"{metric}@{k}"] for k in range(1, 6)],
                        style, marker="o", label=label)
            ax.set(title=f"{res['dataset']} ({res['n_queries']} q): {metric}@k", xlabel="k")
            ax.grid(alpha=0.3)
        row[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", action="append", choices=COLLECTIONS)
    ap.add_argument("--sample", type=int, default=100, help="test queries per collection")
    ap.add_argument("--train-sample", type=int, default=100, help="SciFact train queries")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from runs/")
    args = ap.parse_args()
    if not args.report_only:
        for name in args.collection or COLLECTIONS:
            run_collection(name, args.sample, args.train_sample)
    names = [n for n in COLLECTIONS if (RUNS / f"{n}.json").exists()]
    sweep_plot([json.loads((RUNS / f"{n}.json").read_text()) for n in names],
               ROOT / "docs" / "fuq_ksweep.png")
    write_section("fuq", "## Follow-up-aware reranking (issue 4)\n\n" + "\n\n".join(
        f"### {n}\n" + (RUNS / f"{n}.md").read_text().split("\n", 1)[1].replace(
            "\n### ", "\n#### ") for n in names) + "\n\n![k-sweep](fuq_ksweep.png)")


if __name__ == "__main__":
    main()
