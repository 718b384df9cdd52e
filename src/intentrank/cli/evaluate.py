"""``intentrank eval``, ``experiment`` and ``ablate``: pipelines measured on a dataset
split, from the command line or from experiment files."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from intentrank.cli.common import (
    DEFAULT_DATA,
    Settings,
    app,
    check_output_dir,
    check_output_file,
    cli_errors,
    console,
    llm_health,
    load_dataset,
    log,
    out,
    settings_of,
    split_and_index,
    warn,
    warn_if_nothing_passes,
    write_text,
)
from intentrank.cli.options import (
    FilterOption,
    IndexOption,
    RayAddressOption,
    RayPanel,
    SampleOption,
    SearchBm25Option,
    panel,
)
from intentrank.core.params import check_int
from intentrank.errors import ConfigError
from intentrank.filters import parse_filter

JudgePanel, ConfigPanel = panel("Judging answers"), panel("Configurations")


@app.command("eval")
@cli_errors
def evaluate_cmd(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset directory (corpus, "
                                            "queries.jsonl, qrels/<split>.tsv).")],
    pipeline: Annotated[list[str] | None, typer.Option("--pipeline", "-p", help="Pipeline config "
                                                       "file or shipped name; repeat to compare "
                                                       "several.")] = None,
    index_dir: IndexOption = None,
    split: Annotated[str, typer.Option(help="Qrels split to evaluate.")] = "test",
    metrics: Annotated[str, typer.Option(help="Comma-separated metrics.")] =
        "nDCG@10,MRR@10,MAP@100,Recall@100,P@10,HitRate@10",
    baseline: Annotated[str, typer.Option(help="Pipeline to test the others against "
                                          "(default: the first).")] = "",
    runs_dir: Annotated[Path | None, typer.Option(
        help="Write a TREC run file per pipeline here.")] = None,
    per_query: Annotated[Path | None, typer.Option(help="Write per-query scores (JSON) here.")] =
        None,
    report: Annotated[Path | None, typer.Option(help="Write the Markdown table here.")] = None,
    round_grades: Annotated[bool, typer.Option("--round-grades", help="Round fractional "
                                               "relevance grades in the qrels to integers "
                                               "(by default they are an error).")] = False,
    judge: Annotated[bool, JudgePanel("--judge", help="Judge the answers of pipelines "
                                      "with an answer stage (relevance -1..2 against the "
                                      "dataset's reference answers, faithfulness -1..1 "
                                      "against the gold documents).")] = False,
    judge_llm: Annotated[str, JudgePanel("--judge-llm", help="LLM spec of the judge "
                                         "(default: the --llm option's).")] = "",
    ray: Annotated[bool, RayPanel("--ray", help="Run each pipeline as Ray tasks (a local "
                                  "cluster unless --ray-address); metrics only, no "
                                  "significance tests.")] = False,
    ray_address: RayAddressOption = "",
    ray_tasks: Annotated[int, RayPanel(help="Ray tasks per pipeline.")] = 2,
    bm25_backend: SearchBm25Option = "",
    filter_text: FilterOption = "",
) -> None:
    """Run pipelines over a dataset split and report IR metrics with significance tests (with
    --filter, every query searches only the documents it lets through; relevant documents
    outside it count as not found)."""
    from intentrank.core.config import load_config, resolve_pipeline
    from intentrank.data.trec import write_run
    from intentrank.measures.metrics import validate_metrics

    settings = settings_of(ctx)
    names = pipeline or ["bm25", "dense", "rrf"]
    # everything that can be checked before loading data, building or running
    metric_names = validate_metrics(metrics)
    flt = parse_filter(filter_text) if filter_text else None
    configs = {n: resolve_pipeline(n) for n in names}
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"pipeline(s) {twice} given more than once")
    if baseline and baseline not in names:
        raise ConfigError(f"--baseline {baseline!r} is not one of the pipelines {names}")
    run_files = {n: f"{Path(n).stem}.trec" for n in names}
    clash = sorted(n for n in names if list(run_files.values()).count(run_files[n]) > 1)
    if runs_dir and clash:
        raise ConfigError(f"--runs-dir: pipelines {clash} would write the same run file "
                          f"name; copy one config under another name")
    check_output_dir(runs_dir, "--runs-dir")
    check_output_file(per_query, "--per-query")
    check_output_file(report, "--report")
    nodes = {n: load_config(configs[n])["pipeline"] for n in names}
    ds = load_dataset(settings, dataset, round_grades)
    references = ds.reference_answers() if judge else {}

    def check_references() -> None:
        if judge and not references:
            raise ConfigError(f"--judge: {dataset} has no reference answers (a queries.jsonl "
                              f"with metadata.answer, as `intentrank generate` writes)")

    (queries, qrels), idx = split_and_index(settings, ds, split, dataset, index_dir,
                                            before_index=check_references)
    if bm25_backend:
        idx.set_bm25_backend(bm25_backend)
    if flt is not None:
        warn_if_nothing_passes(idx, flt)
        queries = [replace(q, filter=flt) for q in queries]
    if ray or ray_address:
        if judge:
            raise ConfigError("--judge runs in one process; leave out --ray")
        if bm25_backend:
            raise ConfigError("--bm25-backend with --ray: each Ray task opens the index "
                              "itself; build it with `intentrank index --bm25-backend` "
                              "instead")
        check_int("--ray-tasks", ray_tasks)
        _eval_on_ray(settings, configs, idx, queries, qrels, metric_names, ray_tasks,
                     ray_address or None, runs_dir, run_files)
        return
    with console.status(f"running {len(names)} pipeline(s) on {len(queries)} queries"):
        res, table = compare_pipelines(settings, nodes, idx, ds, queries, qrels, metric_names,
                                       baseline or names[0] if len(names) > 1 else None)
    out.print(f"\n{escape(ds.name)} / {escape(split)}: {len(queries)} queries\n")
    print(table)
    skipped = res.pipelines[0].scores.skipped if res.pipelines else []
    if skipped:
        warn(f"{len(skipped)} of {len(queries)} judged queries have no relevant document "
             f"(e.g. {skipped[:3]}); like trec_eval, they are not evaluated")
    if runs_dir:
        for r in res.pipelines:
            write_run(r.to_run(), runs_dir / run_files[r.name], tag=r.name)
    if per_query:
        write_text(per_query, json.dumps({r.name: r.scores.per_query for r in res.pipelines},
                                         indent=1))
    if report:
        write_text(report, table + "\n")
    if judge:
        _judge_answers(settings, res, idx, qrels, references, judge_llm)
    llm_health(settings, {r.name: r.trace for r in res.pipelines},
               separate=len(res.pipelines) > 1)


def _eval_on_ray(settings: Settings, configs: dict[str, Path], idx: Any, queries: Any,
                 qrels: Any, metrics: list[str], tasks: int, address: str | None,
                 runs_dir: Path | None, run_files: dict[str, str]) -> None:
    """Each pipeline as Ray tasks over the queries; one row of mean metrics per pipeline."""
    from intentrank.data.trec import write_run
    from intentrank.scale.evaluate import ray_evaluate

    table = Table(title=f"{len(queries)} queries, {tasks} Ray task(s) per pipeline")
    for col in ("pipeline", *metrics):
        table.add_column(col)
    traces = {}
    for name, config in configs.items():
        result, scores = ray_evaluate(config, idx.path, queries, qrels, metrics, tasks=tasks,
                                      address=address, resources=settings.llm_settings)
        table.add_row(escape(name), *(f"{scores.aggregate[m]:.4f}" for m in metrics))
        traces[name] = result.trace
        if runs_dir:
            write_run(result.to_run(), runs_dir / run_files[name], tag=name)
    out.print(table)
    llm_health(settings, traces, separate=len(traces) > 1)


def _judge_answers(settings: Settings, res: Any, idx: Any, qrels: Any,
                   references: dict[str, str], judge_llm: str) -> None:
    """Judge each answering pipeline's answers and print one row per pipeline."""
    from intentrank.eval.answer_judge import gold_texts, judge_rankings, summarize

    llm = settings.load_llm(judge_llm, role="judge")
    gold = gold_texts(idx, qrels)
    table = Table(title="answers judged (relevance -1..2, faithfulness -1..1)")
    for col in ("pipeline", "answers", "judged", "relevance", "faithfulness", "fallbacks"):
        table.add_column(col)
    for r in res.pipelines:
        if not any(x.query.answer is not None for x in r.rankings):
            warn(f"--judge: pipeline {r.name} sets no answers (add an answer stage)")
            continue
        s = summarize(list(judge_rankings(llm, r.rankings, references, gold).values()))
        table.add_row(escape(r.name), str(s.n), str(s.n_relevance),
                      "-" if s.relevance is None else f"{s.relevance:.2f}",
                      "-" if s.faithfulness is None else f"{s.faithfulness:.2f}",
                      escape(", ".join(f"{k} {v}" for k, v in s.fallbacks.items()) or "-"))
    out.print(table)


def compare_pipelines(settings: Settings, nodes: dict[str, Any], idx: Any, ds: Any,
                      queries: Any, qrels: Any, metrics: list[str], baseline: str | None
                      ) -> tuple[Any, str]:
    """Run config nodes through the experiment harness on ``queries``; the result and its
    quality table (Markdown, no title)."""
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import ExperimentSpec, PipelineSpec, TableSpec
    from intentrank.report.markdown import quality

    spec = ExperimentSpec([PipelineSpec(n, node) for n, node in nodes.items()], metrics,
                          dataset=ds.name, baseline=baseline, source="eval").check()
    res = run_experiment(spec, index=idx, dataset=ds, queries=queries, qrels=qrels,
                         **settings.experiment_llm)
    table = quality(res, TableSpec("quality"))
    table.title = ""
    return res, table.to_markdown()


@app.command()
@cli_errors
def ablate(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset directory.")],
    index_dir: IndexOption = None,
    split: Annotated[str, typer.Option(help="Qrels split to evaluate on.")] = "test",
    sample: SampleOption = 0,
    seed: Annotated[int, typer.Option(help="Seed of the sample and of the tests.")] = 0,
    out_path: Annotated[Path | None, typer.Option("--out", help="Report path without suffix; "
                                                  "writes .md, .html and .json (default "
                                                  "runs/ablation/<dataset>).")] = None,
    cross_encoder: Annotated[str, ConfigPanel(help="Cross-encoder model directory or hub name "
                                              "(default: the reranker train-reranker saved "
                                              "for SciFact).")] = "",
    use_ce: Annotated[bool, ConfigPanel("--ce/--no-ce", help="Run the cross-encoder "
                                        "configurations.")] = True,
    use_llm: Annotated[bool, ConfigPanel("--llm-stages/--no-llm-stages", help="Run the LLM "
                                         "configurations (listwise, dynamic weights).")] = True,
    dynamic: Annotated[bool, ConfigPanel("--dynamic/--no-dynamic", help="Also run the "
                                         "configurations with LLM-assigned weights.")] = True,
    baseline: Annotated[str, typer.Option(help="Configuration the others are tested "
                                          "against.")] = "Tri-modal",
    listwise_chars: Annotated[int, ConfigPanel(help="Characters of each passage the listwise "
                                               "LLM sees (default: the experiment "
                                               "file's).")] = 0,
    experiment: Annotated[str, typer.Option(help="The ablation's experiment file or shipped "
                                            "name (its pipelines; dataset, split and sample "
                                            "come from the options).")] = "cascade-ablation",
) -> None:
    """Ablate the cascaded tri-modal pipeline: Dense only, Bi-modal, Tri-modal, Tri-modal +
    CE, Full pipeline (static and dynamic weights) with metrics, swaps, error analysis,
    latency and significance; Markdown + HTML + JSON report. The configurations are the
    experiment file's (default: the shipped cascade-ablation, CE over the fused top-30 fused
    with the first stage by RRF); edit a copy of it for other cut-offs."""
    from intentrank.eval.spec import load_experiment

    target = out_path or Path("runs") / "ablation" / dataset.name
    check_int("--sample", sample, 0)
    if listwise_chars:
        check_int("--listwise-chars", listwise_chars)
    spec = load_experiment(experiment).replace(dataset=str(dataset), split=split,
                                               sample=sample, seed=seed, baseline=baseline)
    if listwise_chars and use_llm:
        spec = spec.with_params("listwise", max_passage_chars=listwise_chars)
    if cross_encoder and use_ce:
        spec = spec.with_params("cross_encoder", model=cross_encoder)
    without = ([] if use_ce else ["cross_encoder"]) + ([] if use_llm else ["llm"]) + (
        [] if dynamic else ["dynamic"])
    _run_experiment_file(settings_of(ctx), spec, target, dataset, index_dir, without)


def _run_experiment_file(settings: Settings, spec: Any, target: Path, dataset: Path | None,
                         index_dir: Path | None, without: list[str]) -> None:
    """Run an experiment, print its Markdown report, write .md/.html/.json at ``target``
    and the LLM health lines (each LLM request counted once across pipelines)."""
    from intentrank.eval.harness import load_experiment_dataset, run_experiment
    from intentrank.report import report_paths, write_report
    from intentrank.report.markdown import render

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for path in report_paths(target):
        check_output_file(path, "--out")
    ds = load_dataset(settings, dataset) if dataset else load_experiment_dataset(spec,
                                                                                 DEFAULT_DATA)
    _, idx = split_and_index(settings, ds, spec.split, ds.root,
                             index_dir or (Path(spec.index) if spec.index else None))
    result = run_experiment(spec, index=idx, dataset=ds, without=without, log=log,
                            **settings.experiment_llm)
    paths = write_report(result, target)
    print(render(result))
    console.print("[green]wrote[/] " + escape(", ".join(str(p) for p in paths)))
    llm_health(settings, [r.trace for r in result.pipelines])


@app.command("experiment")
@cli_errors
def experiment_cmd(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="Experiment file (YAML) or shipped name "
                                        "(cascade-ablation, fuq).")],
    sample: Annotated[int | None, typer.Option(help="Sample this many queries instead of the "
                                               "file's sample (0 = the whole split).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the sample (default: the file's).")] =
        None,
    out_path: Annotated[Path | None, typer.Option("--out", help="Report path without suffix; "
                                                  "writes .md, .html and .json (default "
                                                  "runs/experiments/<file name>).")] = None,
    dataset: Annotated[Path | None, typer.Option(help="Dataset directory (default: the file's "
                                                 "dataset under $INTENTRANK_DATA).")] = None,
    index_dir: Annotated[Path | None, typer.Option("--index", help="Index directory (default: the "
                                                   "file's, else indexes/<dataset>).")] = None,
    without: Annotated[list[str] | None, typer.Option(help="Skip the pipelines that use this stage "
                                                      "or fusion method ('llm': every LLM stage); "
                                                      "repeatable.")] = None,
    set_params: Annotated[list[str] | None, typer.Option("--set", help="STAGE.PARAM=VALUE: set a "
                                                         "parameter of every such stage (VALUE is "
                                                         "YAML); repeatable.")] = None,
) -> None:
    """Run an experiment file: every pipeline on the same queries, shared prefixes computed
    once; metrics, significance, swaps, degradations and cold latency in Markdown, HTML and
    JSON."""
    from intentrank.eval.spec import check_without, load_experiment

    spec = load_experiment(file)
    if sample is not None:
        check_int("--sample", sample, 0)
        spec = spec.replace(sample=sample)
    if seed is not None:
        check_int("--seed", seed, 0)
        spec = spec.replace(seed=seed)
    if dataset is not None:
        spec = spec.replace(dataset=str(dataset))
    spec = spec.with_assignments(set_params or [], "--set")
    skip = check_without(without or [], "--without")
    target = out_path or Path("runs") / "experiments" / (
        spec.path.stem if spec.path else "experiment")
    _run_experiment_file(settings_of(ctx), spec, target, dataset, index_dir, skip)
