"""Options and arguments several commands share, one help text each."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer


def panel(title: str) -> Callable[..., Any]:
    """``typer.Option`` for options that ``--help`` shows together under ``title`` (the
    many options of one concern, e.g. Ray, kept apart from a command's main ones)."""
    return functools.partial(typer.Option, rich_help_panel=title)


RayPanel = panel("Ray")

IndexOption = Annotated[Path, typer.Option(
    "--index", help="Index directory (default indexes/<dataset>, built if missing).")]
MiningIndexOption = Annotated[Path, typer.Option(
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
TuneSplitOption = Annotated[str, typer.Option(
    help="Qrels split to tune on ('test' is refused).")]
TuningMetricOption = Annotated[str, typer.Option(help="Objective, e.g. nDCG@3, nDCG@10, Recall@3.")]
SampleOption = Annotated[int, typer.Option(
    help="Fixed-seed sample of this many queries (0 = the whole split).")]
SampleSeedOption = Annotated[int, typer.Option(help="Seed of the query sample.")]
RayAddressOption = Annotated[str, RayPanel(
    help="Address of a running Ray cluster (implies --ray).")]
SearchBm25Option = Annotated[str, typer.Option(
    help="Search BM25 with numpy or numba (default: the index's setting).")]
MinutesOption = Annotated[float, typer.Option(
    help="Stop after this many minutes, keeping what was generated (0 = no limit).")]
TrainingDatasetArg = Annotated[Path, typer.Argument(
    help="BEIR-layout dataset directory with qrels/<split>.tsv for the training split.")]
TuningDatasetArg = Annotated[Path, typer.Argument(
    help="BEIR-layout dataset with a training split.")]
IndexDirArg = Annotated[Path, typer.Argument(help="Index directory.")]
CorpusArg = Annotated[Path, typer.Argument(help="Corpus: a BEIR directory, or a .jsonl/.csv "
                                           "file (plain, .gz or .zip).")]
