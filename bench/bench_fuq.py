"""Follow-up-aware reranking (FUQ) against the baselines of the paper's Table 2: the shipped
experiment file ``fuq`` (systems, metrics, tests, k-sweep) run by the harness on a
fixed-seed sample of each collection's test queries.

FUQ (F) uses weights tuned on SciFact train (``fuq-<collection>``); Cranfield and Vaswani
have no train split, so each fold is ranked with weights tuned on the other folds (5-fold).
Reports go to ``runs/fuq/<collection>.{md,html,json}``; the section is assembled from them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import DATA, ROOT, header, write_section

RUNS = ROOT / "runs" / "fuq"
COLLECTIONS = ("scifact", "cranfield", "vaswani")


def cv_fuq(spec: Any, ds: Any, index: Any, llm: Any) -> Any:
    """``spec`` with FUQ (F) reweighting each query's FUQ components by the weights tuned
    on the other folds of the sample (a collection without a train split)."""
    import dataclasses

    from intentrank.core.stage import Stage
    from intentrank.tune.fuq import FEATURES, cross_validated_fuq, fuq_pipeline, to_weights
    from intentrank.tune.grid import feature_matrix, kfold
    from intentrank.types import Ranking

    queries, qrels = ds.sample(spec.split, spec.sample, spec.seed)
    rankings = fuq_pipeline(index, llm).run(queries).rankings  # follow-ups: reply cache
    _, folds = cross_validated_fuq(rankings, qrels, "nDCG@3", folds=5, seed=spec.seed)
    held_out = kfold([r.query.id for r in rankings], 5, spec.seed)
    weights = {q: to_weights(f.best) for f, ids in zip(folds, held_out, strict=True)
               for q in ids}

    class FoldWeights(Stage):
        name = "fuq_cv"

        def __init__(self, by_query: dict[str, list[float]]) -> None:
            self.by_query = by_query

        def transform(self, rankings: list[Ranking], trace: Any) -> list[Ranking]:
            out = []
            for r in rankings:
                ids, mat = feature_matrix(r, FEATURES)
                scores = (mat @ self.by_query[r.query.id]).tolist() if ids else []
                out.append(Ranking.from_scores(r.query, dict(zip(ids, scores, strict=True)),
                                               self.name))
            return out

    stage = fuq_pipeline(index, llm) >> FoldWeights(weights)
    pipes = [dataclasses.replace(p, node=None, stage=stage,
                                 description="weights tuned on the other folds (5-fold CV)")
             if p.name == "FUQ (F)" else p for p in spec.pipelines]
    return spec.replace(pipelines=pipes)


def run_collection(name: str, n: int, seed: int, train_sample: int,
                   without: list[str] = ()) -> Path:
    from intentrank.core.saved_params import save_params
    from intentrank.data.dataset import load_dataset
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment
    from intentrank.index import open_or_build
    from intentrank.llm.client import load_llm
    from intentrank.report import write_report
    from intentrank.tune.fuq import tune_fuq_on_split

    ds = load_dataset(DATA / name)
    index = open_or_build(ds.corpus, ROOT / "indexes" / name, source=name)
    llm = load_llm("embedded")
    spec = load_experiment("fuq").replace(dataset=name, sample=n, seed=seed)
    if "llm" in without:
        pass  # no FUQ at all
    elif "train" in ds.splits:
        tuned = tune_fuq_on_split(ds, index, llm, "train", "nDCG@3", train_sample, seed)
        save_params(f"fuq-{name}", tuned, dataset=name, split="train", sample=train_sample,
                    seed=seed)
        tuned_fuq = spec.pipeline("FUQ (F)")  # the file names fuq-scifact
        tuned_fuq.node = [*tuned_fuq.node[:-1], {"fuq": {"params": f"fuq-{name}", "top_k": 100}}]
        spec = spec.replace(notes=[*spec.notes, f"FUQ (F) weights tuned on {train_sample} "
                                   f"train queries: {tuned.best}."])
    else:
        spec = cv_fuq(spec, ds, index, llm)
    result = run_experiment(spec, index=index, dataset=ds, llm=llm, without=without,
                            log=lambda m: print(f"[fuq] {name}: {m}", file=sys.stderr))
    result.notes.append("Run: " + header().replace("\n- ", "; ").strip("- \n"))
    return write_report(result, RUNS / name)[0]


def sweep_plot(results: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3 * len(results)))
    axes = fig.subplots(len(results), 3, squeeze=False)
    for row, res in zip(axes, results, strict=True):
        scores = {c["name"]: c["aggregate"] for c in res["configs"]}
        for ax, metric in zip(row, ("HitRate", "Recall", "MRR"), strict=True):
            for label, style in (("dense", ":"), ("FUQ (NF)", "--"), ("FUQ (F)", "-")):
                ax.plot(range(1, 6), [scores[label][f"{metric}@{k}"] for k in range(1, 6)],
                        style, marker="o", label=label)
            ax.set_title(f"{res['dataset']} ({res['n_queries']} q): {metric}@k")
            ax.set_xlabel("k")
            ax.grid(alpha=0.3)
        row[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", action="append", choices=COLLECTIONS)
    ap.add_argument("--sample", type=int, default=100, help="test queries per collection")
    ap.add_argument("--train-sample", type=int, default=100, help="SciFact train queries")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--without", action="append", default=[],
                    help="skip the systems using this stage ('llm': every LLM stage)")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from runs/")
    args = ap.parse_args()
    if not args.report_only:
        for name in args.collection or COLLECTIONS:
            run_collection(name, args.sample, args.seed, args.train_sample, args.without)
    names = [n for n in COLLECTIONS if (RUNS / f"{n}.json").exists()]
    sweep_plot([json.loads((RUNS / f"{n}.json").read_text()) for n in names],
               ROOT / "docs" / "fuq_ksweep.png")
    sections = [(RUNS / f"{n}.md").read_text().split("\n", 1)[1].replace(
        "\n### ", "\n#### ") for n in names]
    write_section("fuq", "## Follow-up-aware reranking (issue 4)\n\n" + "\n\n".join(
        f"### {n}\n{s}" for n, s in zip(names, sections, strict=True))
        + "\n\n![k-sweep](fuq_ksweep.png)")


if __name__ == "__main__":
    main()
