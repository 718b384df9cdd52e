"""``intentrank train-reranker``, ``train-embedder``, ``tune-fuq`` and ``tune-modality``:
models and weights learned on a training split."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from intentrank.cli.common import (
    Settings,
    app,
    check_new_dir,
    check_skip_top,
    cli_errors,
    console,
    llm_health,
    load_dataset,
    log,
    settings_of,
    split_and_index,
)
from intentrank.cli.options import IndexOption, SampleOption
from intentrank.core.params import check_int, check_number
from intentrank.errors import ConfigError

# What train-reranker and train-embedder share.
TrainingDatasetArg = Annotated[Path, typer.Argument(
    help="BEIR-layout dataset directory with qrels/<split>.tsv for the training split.")]
MiningIndexOption = Annotated[Path | None, typer.Option(
    "--index", help="Index to mine hard negatives from (default indexes/<dataset>, built if "
    "missing).")]
TrainSplitOption = Annotated[str, typer.Option(
    help="Qrels split to train on ('test' is refused).")]
SkipTopOption = Annotated[int, typer.Option(
    help="Mine hard negatives below this rank (e.g. 10: ranks 11-30), keeping out unjudged "
    "relevant documents; for generated questions with one gold document.")]
BudgetMinutesOption = Annotated[float, typer.Option(
    help="Wall-clock budget; training stops after the step that crosses it and saves what it "
    "has (0 = no limit).")]
EpochsOption = Annotated[int, typer.Option(
    help="Passes over the training queries (negatives are resampled each pass).")]
MaxQueriesOption = Annotated[int, typer.Option(
    help="Train on at most this many queries (0 = all).")]


@app.command("train-reranker")
@cli_errors
def train_reranker_cmd(
    dataset: TrainingDatasetArg,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Model directory to write "
                                                 "(default: <cache>/models/cross-encoder-"
                                                 "<dataset>, where the cross_encoder stage "
                                                 "looks).")] = None,
    index_dir: MiningIndexOption = None,
    split: TrainSplitOption = "train",
    budget_minutes: BudgetMinutesOption = 15.0,
    epochs: EpochsOption = 1,
    negatives: Annotated[int, typer.Option(help="Hard negatives per query, from BM25 and "
                                           "dense top-30 alternately.")] = 7,
    skip_top: SkipTopOption = 0,
    max_length: Annotated[int, typer.Option(help="Tokens per query-passage pair (the "
                                            "cross_encoder stage reuses it).")] = 128,
    batch_size: Annotated[int, typer.Option(help="Pairs per optimiser step.")] = 16,
    loss: Annotated[str, typer.Option(help="listwise (softmax over a positive and its "
                                      "query's negatives) or bce (each pair labelled "
                                      "1/0).")] = "listwise",
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW).")] = 5e-5,
    max_queries: MaxQueriesOption = 0,
    seed: Annotated[int, typer.Option(help="Random seed (sampling and initialisation).")] = 13,
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help="Also export an int8 ONNX "
                                       "model (model_int8.onnx) for the onnx backend.")] = True,
) -> None:
    """Fine-tune a MiniLM cross-encoder on a dataset's train qrels with BM25/dense hard
    negatives, on CPU within a time budget; saves the model and training.json."""
    from intentrank.models.cross_encoder import default_reranker_dir
    from intentrank.training.reranker import train_reranker
    from intentrank.training.run import MINING_DEPTH

    target = out_dir or default_reranker_dir(dataset.name)
    common = _training(epochs, lr, budget_minutes, max_queries, seed, skip_top, MINING_DEPTH,
                       ("--negatives", negatives, 1), ("--max-length", max_length, 8),
                       ("--batch-size", batch_size, 1))
    check_new_dir(target, "--out")
    result = train_reranker(  # refuses the test split before opening or building
        dataset, target, index_dir or Path("indexes") / dataset.name, split=split, loss=loss,
        negatives_per_query=negatives, skip_top=skip_top, batch_size=batch_size,
        max_length=max_length, onnx=onnx, **common)
    info = result.info
    console.print(f"[green]reranker saved[/] {result.out_dir}: {info['n_queries']} {split} "
                  f"queries, {info['pairs_trained']} pairs, {info['steps_done']}/"
                  f"{info['steps_planned']} steps in {info['seconds']['training']:.0f}s "
                  f"(stopped by {info['stopped_by']})")
    console.print(f"  use it: [cyan]- cross_encoder: {{model: {result.out_dir}, top_k: 100}}[/]")


@app.command("train-embedder")
@cli_errors
def train_embedder_cmd(
    dataset: TrainingDatasetArg,
    out_dir: Annotated[Path, typer.Argument(help="Model directory to write (use it with "
                                            "`intentrank index --model DIR`).")],
    index_dir: MiningIndexOption = None,
    split: TrainSplitOption = "train",
    extra: Annotated[list[str] | None, typer.Option(help="More training questions over the same "
                                                    "corpus: DIR:SPLIT (e.g. a generated set: "
                                                    "runs/gen:generated); repeat.")] = None,
    budget_minutes: BudgetMinutesOption = 15.0,
    epochs: EpochsOption = 1,
    batch_size: Annotated[int, typer.Option(help="Questions per step (in-batch negatives).")]
        = 32,
    negatives: Annotated[int, typer.Option(help="Hard negatives per question (BM25 and dense "
                                           "top --depth).")] = 1,
    depth: Annotated[int, typer.Option(help="Where hard negatives are mined.")] = 30,
    skip_top: SkipTopOption = 0,
    max_seq_length: Annotated[int, typer.Option(help="Tokens per text while training.")] = 128,
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW).")] = 2e-5,
    max_queries: MaxQueriesOption = 0,
    seed: Annotated[int, typer.Option(help="Random seed (sampling and training).")] = 13,
) -> None:
    """Fine-tune the MiniLM bi-encoder (the dense leg) on a dataset's train qrels and any
    generated questions, with BM25/dense hard negatives, on CPU within a time budget."""
    from intentrank.training.embedder import train_embedder

    common = _training(epochs, lr, budget_minutes, max_queries, seed, skip_top, depth,
                       ("--negatives", negatives, 0), ("--depth", depth, 1),
                       ("--batch-size", batch_size, 2), ("--max-seq-length", max_seq_length, 8))
    sources = []
    for item in extra or []:
        where, sep, extra_split = item.rpartition(":")
        if not sep or not where or not extra_split:
            raise ConfigError(f"--extra {item!r}: give DIR:SPLIT (e.g. runs/gen:generated)")
        sources.append((Path(where), extra_split))
    check_new_dir(out_dir)
    result = train_embedder(  # refuses the test split before opening or building
        dataset, out_dir, index_dir or Path("indexes") / dataset.name, split=split,
        extra=sources, negatives_per_query=negatives, depth=depth, skip_top=skip_top,
        batch_size=batch_size, max_seq_length=max_seq_length, **common)
    info = result.info
    console.print(f"[green]embedder saved[/] {result.out_dir}: {info['n_queries']} questions, "
                  f"{info['steps_done']}/{info['steps_planned']} steps in "
                  f"{info['seconds']['training']:.0f}s (stopped by {info['stopped_by']})")
    console.print(f"  use it: [cyan]intentrank index CORPUS DIR --model {result.out_dir}[/]")


def _training(epochs: int, lr: float, budget_minutes: float, max_queries: int, seed: int,
              skip_top: int, depth: int, *counts: tuple[str, int, int]) -> dict[str, Any]:
    """Check what train-reranker and train-embedder share (and each (option, value, minimum)
    of ``counts``) before any work; those options as the trainers' keyword arguments."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for option, value, minimum in (("--epochs", epochs, 1), *counts,
                                   ("--max-queries", max_queries, 0)):
        check_int(option, value, minimum)
    check_number("--lr", lr, above=0)
    check_number("--budget-minutes", budget_minutes, minimum=0)
    check_skip_top(skip_top, depth)
    return {"epochs": epochs, "lr": lr, "time_budget_s": budget_minutes * 60 or None,
            "seed": seed, "max_queries": max_queries or None, "progress": True, "log": log}


def _tuning_inputs(settings: Settings, dataset: Path, index_dir: Path | None, split: str,
                   metric: str, sample: int, purpose: str) -> tuple[Any, Any, str]:
    """What the tune-* commands share, checked in this order before any work: the split is
    not test, the metric and sample are valid, the split exists (dataset warnings shown),
    then the index is opened (or built). The dataset, the index and the metric's name."""
    from intentrank.data.dataset import refuse_test_split
    from intentrank.measures.metrics import validate_metrics

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    refuse_test_split(split, purpose)
    metric = validate_metrics([metric])[0]
    check_int("--sample", sample, 0)
    ds = load_dataset(settings, dataset)
    _, idx = split_and_index(settings, ds, split, dataset, index_dir, check_qrels=False)
    return ds, idx, metric


def _save_tuned(name: str, res: Any, ds: Any, split: str, metric: str, sample: int,
                seed: int, **extra: Any) -> None:
    """The tune-* commands' last step: save the weights by name, print where they went, the
    weights and their score."""
    from intentrank.core.saved_params import save_params

    path = save_params(name, res, dataset=ds.name, split=split, sample=sample, seed=seed,
                       **extra)
    weights = " ".join(f"{key}={value}" for key, value in res.best.items())
    console.print(f"[green]saved[/] {escape(str(path))}: {weights} ({metric} {res.score:.4f} "
                  f"on {res.n_queries} {split} queries)")


# What tune-fuq and tune-modality share.
TuningDatasetArg = Annotated[Path, typer.Argument(
    help="BEIR-layout dataset with a training split.")]
TuneSplitOption = Annotated[str, typer.Option(
    help="Qrels split to tune on ('test' is refused).")]
TuningMetricOption = Annotated[str, typer.Option(help="Objective, e.g. nDCG@3, nDCG@10, Recall@3.")]
SampleSeedOption = Annotated[int, typer.Option(help="Seed of the query sample.")]


@app.command("tune-fuq")
@cli_errors
def tune_fuq_cmd(
    ctx: typer.Context,
    dataset: TuningDatasetArg,
    name: Annotated[str, typer.Option(help="Save the weights under this parameter-set name "
                                      "(use it as `fuq: {params: NAME}`); default "
                                      "fuq-<dataset>.")] = "",
    index_dir: IndexOption = None,
    split: TuneSplitOption = "train",
    metric: TuningMetricOption = "nDCG@3",
    sample: SampleOption = 0,
    seed: SampleSeedOption = 0,
) -> None:
    """Grid-search FUQ's alpha/beta/gamma on a training split and save them by name.

    Each query tuned on costs one LLM call (--sample to tune on fewer)."""
    from intentrank.tune.fuq import tune_fuq_on_split
    from intentrank.types import Trace

    settings = settings_of(ctx)
    trace = Trace()
    ds, idx, metric = _tuning_inputs(settings, dataset, index_dir, split, metric, sample,
                                     "tune FUQ weights")
    llm = settings.load_llm(role="followups")
    with console.status(f"predicting follow-ups and tuning on {ds.name}/{split}"):
        res = tune_fuq_on_split(ds, idx, llm, split, metric, sample, seed, trace=trace)
    llm_health(settings, trace)  # under --strict, weights tuned on fallbacks are not saved
    _save_tuned(name or f"fuq-{ds.name}", res, ds, split, metric, sample, seed)


@app.command("tune-modality")
@cli_errors
def tune_modality_cmd(
    ctx: typer.Context,
    dataset: TuningDatasetArg,
    name: Annotated[str, typer.Option(help="Save the weights under this parameter-set name "
                                      "(use it as `fuse: {method: weighted, params: NAME}`); "
                                      "default modality-<dataset>.")] = "",
    index_dir: IndexOption = None,
    split: TuneSplitOption = "train",
    metric: TuningMetricOption = "nDCG@10",
    step: Annotated[float, typer.Option(help="Grid step on the weight simplex.")] = 0.1,
    sample: SampleOption = 0,
    seed: SampleSeedOption = 0,
) -> None:
    """Grid-search the static dense/sparse/graph weights of the weighted fusion on a training
    split and save them by name."""
    from intentrank.tune.modality import tune_modality_on_split

    check_number("--step", step, above=0, maximum=0.5)
    ds, idx, metric = _tuning_inputs(settings_of(ctx), dataset, index_dir, split, metric,
                                     sample, "tune modality weights")
    with console.status(f"tuning modality weights on {ds.name}/{split}"):
        res = tune_modality_on_split(ds, idx, split, metric, step, sample, seed)
    _save_tuned(name or f"modality-{ds.name}", res, ds, split, metric, sample, seed, step=step)
