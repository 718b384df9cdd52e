"""The ``intentrank`` command line: index, search, eval and quickstart."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from intentrank.errors import IntentrankError

app = typer.Typer(
    help="intentrank: intent-aware retrieval and reranking for RAG.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)
out = Console()

# The shared test collections sit beside the checkout (../shared/data) unless told otherwise.
DEFAULT_DATA = Path(os.environ.get("INTENTRANK_DATA", "../shared/data"))


# LLM settings every command hands to the pipelines it builds (set by the global options).
LLM_SETTINGS: dict = {"llm": "embedded", "llm_options": {}}


@app.callback()
def main(
    llm: Annotated[str, typer.Option(help="LLM for LLM stages: 'embedded' (Qwen2.5-Coder-0.5B "
                                     "via llama.cpp), 'llamacpp:qwen2.5-coder-1.5b', a .gguf "
                                     "path, or 'openai:<model>@<base_url>' (key from "
                                     "$OPENAI_API_KEY).", envvar="INTENTRANK_LLM")] = "embedded",
    llm_cache: Annotated[bool, typer.Option("--llm-cache/--no-llm-cache", help="Replay LLM "
                                            "replies from the on-disk cache.")] = True,
    llm_timeout: Annotated[float, typer.Option(help="Seconds per LLM call (HTTP backends).")]
        = 60.0,
    llm_retries: Annotated[int, typer.Option(help="Retries of a failed LLM call.")] = 2,
) -> None:
    """intentrank: intent-aware retrieval and reranking for RAG."""
    LLM_SETTINGS.update(llm=llm, llm_options={"cache": llm_cache, "timeout": llm_timeout,
                                              "retries": llm_retries})


def _fail(exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {exc}", soft_wrap=True, highlight=False)
    raise typer.Exit(2)


def _corpus(source: Path, encoding: str):  # noqa: ANN202 (iterator of Document)
    """Documents of a BEIR directory or of a corpus file (JSONL/CSV, plain/.gz/.zip)."""
    from intentrank.data.corpus import iter_corpus
    from intentrank.data.dataset import CORPUS_NAMES, _first_existing

    if source.is_dir():
        source = _first_existing(source, CORPUS_NAMES, "corpus")
    return iter_corpus(source, encoding=encoding)


def _open_or_build(dataset_dir: Path, index_dir: Path | None, legs: str | None = None):  # noqa: ANN202
    from intentrank.index import Index, IndexSettings, build_index

    index_dir = index_dir or Path("indexes") / dataset_dir.name
    if (index_dir / "manifest.json").exists():
        return Index.open(index_dir)
    settings = IndexSettings(legs=tuple(legs.split(","))) if legs else IndexSettings()
    console.print(f"[cyan]building index[/] {index_dir} from {dataset_dir}")
    return build_index(_corpus(dataset_dir, "utf-8"), index_dir, settings, progress=True,
                       log=lambda m: console.print(f"  {m}"))


@app.command()
def index(
    source: Annotated[Path, typer.Argument(help="Corpus: a BEIR directory, or a .jsonl/.csv "
                                           "file (plain, .gz or .zip).")],
    out_dir: Annotated[Path, typer.Argument(help="Index directory to create.")],
    legs: Annotated[str, typer.Option(help="Comma-separated legs to build.")] =
        "bm25,dense,tfidf,graph",
    k1: Annotated[float, typer.Option(help="BM25 k1.")] = 1.5,
    b: Annotated[float, typer.Option(help="BM25 b.")] = 0.75,
    stemmer: Annotated[str, typer.Option(help="PyStemmer language for BM25, or 'none'.")] =
        "english",
    stopwords: Annotated[str, typer.Option(help="bm25s stopword list for BM25, or 'none'.")] =
        "en",
    model: Annotated[str, typer.Option(help="Embedder: 'minilm' (bundled), a hub name or a "
                                       "local directory.")] = "minilm",
    backend: Annotated[str, typer.Option(help="Embedder backend: sentence-transformers or "
                                         "onnx.")] = "sentence-transformers",
    batch_size: Annotated[int, typer.Option(help="Embedding batch size.")] = 64,
    chunk_size: Annotated[int, typer.Option(help="Split documents into passages of this many "
                                            "words (0 = keep whole).")] = 0,
    chunk_overlap: Annotated[int, typer.Option(help="Words shared by consecutive passages.")] =
        50,
    encoding: Annotated[str, typer.Option(help="Text encoding of the corpus file.")] = "utf-8",
    overwrite: Annotated[bool, typer.Option(help="Replace an index built with other settings "
                                            "or another corpus.")] = False,
) -> None:
    """Build an on-disk hybrid index (BM25, dense, TF-IDF, entity graph) for a corpus."""
    from dataclasses import replace

    from intentrank.index import IndexSettings, build_index

    try:
        base = IndexSettings(legs=tuple(x.strip() for x in legs.split(",") if x.strip()))
        settings = replace(
            base,
            bm25=replace(base.bm25, k1=k1, b=b, stemmer=None if stemmer == "none" else stemmer,
                         stopwords=None if stopwords == "none" else stopwords),
            dense=replace(base.dense, model=model, backend=backend, batch_size=batch_size),
            chunk_size=chunk_size or None, chunk_overlap=chunk_overlap,
        )
        start = time.perf_counter()
        idx = build_index(_corpus(source, encoding), out_dir, settings, overwrite=overwrite,
                          progress=True, log=lambda m: console.print(f"  {m}"))
    except (IntentrankError, ValueError) as exc:
        _fail(exc)
    secs = time.perf_counter() - start
    times = ", ".join(f"{k} {v:.1f}s" for k, v in idx.manifest["build_seconds"].items())
    console.print(f"[green]index ready[/] {out_dir}: {len(idx)} documents in {secs:.1f}s "
                  f"({times})")


@app.command()
def search(
    index_dir: Annotated[Path, typer.Argument(help="Index directory.")],
    query: Annotated[list[str], typer.Argument(help="One or more query strings.")],
    pipeline: Annotated[str, typer.Option("--pipeline", "-p", help="A pipeline config file or "
                                          "a shipped name (bm25, dense, tfidf, sparse, graph, "
                                          "rrf, weighted).")] = "rrf",
    k: Annotated[int, typer.Option("-k", help="Results shown per query.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] =
        False,
) -> None:
    """Answer queries from an index with a pipeline."""
    from intentrank.index import Index
    from intentrank.pipeline.config import pipeline_from_config, resolve_pipeline

    try:
        idx = Index.open(index_dir)
        pipe = pipeline_from_config(resolve_pipeline(pipeline), index=idx, **LLM_SETTINGS)
        result = pipe.run(query)
    except (IntentrankError, ValueError) as exc:
        _fail(exc)
    if as_json:
        out.print_json(json.dumps([
            {"query": r.query.text, "results": [
                {"id": d.doc_id, "score": d.score, "stage_scores": d.stage_scores,
                 "title": idx.doc(d.doc_id).title} for d in r.docs[:k]]}
            for r in result.rankings]))
        return
    for r in result.rankings:
        table = Table(title=f"{r.query.text}  [dim]({pipe.describe()})[/]")
        for col in ("rank", "id", "score", "title / text"):
            table.add_column(col)
        for rank, d in enumerate(r.docs[:k], 1):
            doc = idx.doc(d.doc_id)
            snippet = (doc.title or doc.text)[:90]
            table.add_row(str(rank), d.doc_id, f"{d.score:.4f}", snippet)
        out.print(table)


@app.command("eval")
def evaluate_cmd(
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset directory (corpus, "
                                            "queries.jsonl, qrels/<split>.tsv).")],
    pipeline: Annotated[list[str], typer.Option("--pipeline", "-p", help="Pipeline config "
                                                "file or shipped name; repeat to compare "
                                                "several.")] = None,  # type: ignore[assignment]
    index_dir: Annotated[Path, typer.Option("--index", help="Index directory (default "
                                            "indexes/<dataset>, built if missing).")] = None,  # type: ignore[assignment]
    split: Annotated[str, typer.Option(help="Qrels split to evaluate.")] = "test",
    metrics: Annotated[str, typer.Option(help="Comma-separated metrics.")] =
        "nDCG@10,MRR@10,MAP@100,Recall@100,P@10,HitRate@10",
    baseline: Annotated[str, typer.Option(help="Pipeline to test the others against "
                                          "(default: the first).")] = "",
    runs_dir: Annotated[Path, typer.Option(help="Write a TREC run file per pipeline here.")] =
        None,  # type: ignore[assignment]
    per_query: Annotated[Path, typer.Option(help="Write per-query scores (JSON) here.")] =
        None,  # type: ignore[assignment]
    report: Annotated[Path, typer.Option(help="Write the Markdown table here.")] = None,  # type: ignore[assignment]
) -> None:
    """Run pipelines over a dataset split and report IR metrics with significance tests."""
    from intentrank.data.dataset import load_dataset
    from intentrank.data.trec import write_run
    from intentrank.eval.experiment import run_experiment
    from intentrank.pipeline.config import pipeline_from_config, resolve_pipeline

    names = pipeline or ["bm25", "dense", "rrf"]
    try:
        ds = load_dataset(dataset)
        idx = _open_or_build(dataset, index_dir)
        ds.check_qrels(idx.doc_and_parent_ids)
        queries, qrels = ds.split(split)
        systems = {n: pipeline_from_config(resolve_pipeline(n), index=idx, **LLM_SETTINGS)
                   for n in names}
        with console.status(f"running {len(systems)} pipeline(s) on {len(queries)} queries"):
            exp = run_experiment(systems, queries, qrels, metrics.split(","),
                                 baseline=baseline or names[0] if len(names) > 1 else None)
    except (IntentrankError, ValueError) as exc:
        _fail(exc)
    out.print(f"\n{ds.name} / {split}: {len(queries)} queries\n")
    print(exp.to_markdown())
    if runs_dir:
        for s in exp.systems:
            write_run(s.run.to_run(), runs_dir / f"{Path(s.name).stem}.trec", tag=s.name)
    if per_query:
        per_query.write_text(json.dumps({s.name: s.scores.per_query for s in exp.systems},
                                        indent=1))
    if report:
        report.write_text(exp.to_markdown() + "\n")


@app.command()
def quickstart(
    dataset: Annotated[Path, typer.Option(help="BEIR dataset to index and evaluate.")] =
        DEFAULT_DATA / "scifact",
    index_dir: Annotated[Path, typer.Option("--index", help="Where to build the index.")] =
        Path("indexes/scifact"),
) -> None:
    """The main job on the embedded default: index SciFact, answer a few queries, evaluate."""
    from intentrank.data.dataset import load_dataset
    from intentrank.eval.experiment import run_experiment
    from intentrank.pipeline.config import pipeline_from_config, resolve_pipeline

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        ds = load_dataset(dataset)
        idx = _open_or_build(dataset, index_dir)
        queries, qrels = ds.split("test")
        rrf = pipeline_from_config(resolve_pipeline("rrf"), index=idx)
        for q in queries[:3]:
            top = rrf.search(q.text, k=3)
            out.print(f"\n[bold]{q.text}[/]")
            for rank, d in enumerate(top.docs, 1):
                mark = "[green]relevant[/]" if qrels[q.id].get(d.doc_id, 0) > 0 else ""
                out.print(f"  {rank}. [{d.doc_id}] {idx.doc(d.doc_id).title[:80]} {mark}")
        systems = {n: pipeline_from_config(resolve_pipeline(n), index=idx)
                   for n in ("bm25", "dense", "rrf", "weighted")}
        with console.status(f"evaluating 4 pipelines on {len(queries)} test queries"):
            exp = run_experiment(systems, queries, qrels, ["nDCG@10", "MRR@10", "Recall@100"],
                                 baseline="bm25")
    except (IntentrankError, ValueError) as exc:
        _fail(exc)
    out.print(f"\n{ds.name} test ({len(queries)} queries)\n")
    print(exp.to_markdown())


@app.command("train-reranker")
def train_reranker_cmd(
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset directory with "
                                            "qrels/<split>.tsv for the training split.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Model directory to write (default: "
                                          "<cache>/models/cross-encoder-<dataset>, where the "
                                          "cross_encoder stage looks).")] = None,  # type: ignore[assignment]
    index_dir: Annotated[Path, typer.Option("--index", help="Index to mine hard negatives "
                                            "from (default indexes/<dataset>, built if "
                                            "missing).")] = None,  # type: ignore[assignment]
    split: Annotated[str, typer.Option(help="Qrels split to train on ('test' is refused).")] =
        "train",
    budget_minutes: Annotated[float, typer.Option(help="Wall-clock budget; training stops "
                                                  "after the step that crosses it and saves "
                                                  "what it has (0 = no limit).")] = 15.0,
    epochs: Annotated[int, typer.Option(help="Passes over the training queries (negatives "
                                        "are resampled each pass).")] = 1,
    negatives: Annotated[int, typer.Option(help="Hard negatives per query, from BM25 and "
                                           "dense top-30 alternately.")] = 7,
    max_length: Annotated[int, typer.Option(help="Tokens per query-passage pair (the "
                                            "cross_encoder stage reuses it).")] = 128,
    batch_size: Annotated[int, typer.Option(help="Pairs per optimiser step.")] = 16,
    loss: Annotated[str, typer.Option(help="listwise (softmax over a positive and its "
                                      "query's negatives) or bce (each pair labelled "
                                      "1/0).")] = "listwise",
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW).")] = 5e-5,
    max_queries: Annotated[int, typer.Option(help="Train on at most this many queries (0 = "
                                             "all).")] = 0,
    seed: Annotated[int, typer.Option(help="Random seed (sampling and initialisation).")] = 13,
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help="Also export an int8 ONNX "
                                       "model (model_int8.onnx) for the onnx backend.")] = True,
) -> None:
    """Fine-tune a MiniLM cross-encoder on a dataset's train qrels with BM25/dense hard
    negatives, on CPU within a time budget; saves the model and training.json."""
    from intentrank.models.cross_encoder import default_reranker_dir
    from intentrank.training.reranker import train_reranker

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target = out_dir or default_reranker_dir(dataset.name)
    try:
        result = train_reranker(  # refuses the test split before opening or building
            dataset, target, index_dir or Path("indexes") / dataset.name, split=split, loss=loss,
            negatives_per_query=negatives, epochs=epochs, batch_size=batch_size,
            max_length=max_length, lr=lr, time_budget_s=budget_minutes * 60 or None, seed=seed,
            max_queries=max_queries or None, onnx=onnx, progress=True,
            log=lambda m: console.print(f"  {m}"),
        )
    except (IntentrankError, ValueError) as exc:
        _fail(exc)
    info = result.info
    console.print(f"[green]reranker saved[/] {result.out_dir}: {info['n_queries']} {split} "
                  f"queries, {info['pairs_trained']} pairs, {info['steps_done']}/"
                  f"{info['steps_planned']} steps in {info['seconds']['training']:.0f}s "
                  f"(stopped by {info['stopped_by']})")
    console.print(f"  use it: [cyan]- cross_encoder: {{model: {result.out_dir}, k: 100}}[/]")


@app.command("tune-fuq")
def tune_fuq_cmd(
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset with a training split.")],
    name: Annotated[str, typer.Option(help="Save the weights under this parameter-set name "
                                      "(use it as `fuq: {params: NAME}`); default "
                                      "fuq-<dataset>.")] = "",
    index_dir: Annotated[Path, typer.Option("--index", help="Index directory (default "
                                            "indexes/<dataset>, built if missing).")] = None,  # type: ignore[assignment]
    split: Annotated[str, typer.Option(help="Qrels split to tune on ('test' is refused).")] =
        "train",
    metric: Annotated[str, typer.Option(help="Objective, e.g. nDCG@3, nDCG@10, Recall@3.")] =
        "nDCG@3",
    sample: Annotated[int, typer.Option(help="Tune on a fixed-seed sample of this many "
                                        "queries (0 = all; each costs one LLM call).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the query sample.")] = 0,
) -> None:
    """Grid-search FUQ's alpha/beta/gamma on a training split and save them by name."""
    from intentrank.data.dataset import load_dataset
    from intentrank.llm.client import load_llm
    from intentrank.rerank.fuq_tuning import tune_fuq_on_split
    from intentrank.tuning import save_params

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        if split == "test":
            raise IntentrankError("tuning on the test split is refused; use --split train")
        ds = load_dataset(dataset)
        idx = _open_or_build(dataset, index_dir)
        llm = load_llm(LLM_SETTINGS["llm"], **LLM_SETTINGS["llm_options"])
        with console.status(f"predicting follow-ups and tuning on {ds.name}/{split}"):
            res = tune_fuq_on_split(ds, idx, llm, split, metric, sample, seed)
        path = save_params(name or f"fuq-{ds.name}", res, dataset=ds.name, split=split,
                           sample=sample, seed=seed)
    except (IntentrankError, ValueError) as exc:
        _fail(exc)
    w = res.best
    console.print(f"[green]saved[/] {path}: alpha={w['alpha']} beta={w['beta']} "
                  f"gamma={w['gamma']} ({metric} {res.score:.4f} on {res.n_queries} {split} "
                  f"queries)")


@app.command()
def ablate(
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset directory.")],
    index_dir: Annotated[Path, typer.Option("--index", help="Index directory (default "
                                            "indexes/<dataset>, built if missing).")] = None,  # type: ignore[assignment]
    split: Annotated[str, typer.Option(help="Qrels split to evaluate on.")] = "test",
    sample: Annotated[int, typer.Option(help="Fixed-seed sample of this many queries (0 = "
                                        "the whole split).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the sample and of the tests.")] = 0,
    out_path: Annotated[Path, typer.Option("--out", help="Report path without suffix; writes "
                                           ".md, .html and .json (default "
                                           "runs/ablation/<dataset>).")] = None,  # type: ignore[assignment]
    cross_encoder: Annotated[str, typer.Option(help="Cross-encoder model directory or hub "
                                               "name (default: the reranker train-reranker "
                                               "saved for SciFact).")] = "",
    use_ce: Annotated[bool, typer.Option("--ce/--no-ce", help="Run the cross-encoder "
                                         "configurations.")] = True,
    use_llm: Annotated[bool, typer.Option("--llm-stages/--no-llm-stages", help="Run the "
                                          "LLM configurations (listwise, dynamic "
                                          "weights).")] = True,
    dynamic: Annotated[bool, typer.Option("--dynamic/--no-dynamic", help="Also run the "
                                          "configurations with LLM-assigned weights.")] = True,
    baseline: Annotated[str, typer.Option(help="Configuration the others are tested "
                                          "against.")] = "Tri-modal",
    ce_depth: Annotated[int, typer.Option(help="Fused candidates the cross-encoder scores "
                                          "(the paper: 100; fewer is faster).")] = 100,
    listwise_chars: Annotated[int, typer.Option(help="Characters of each passage the "
                                                "listwise LLM sees (shorter is faster).")]
        = 600,
    ce_rrf: Annotated[bool, typer.Option(help="The CE step outputs RRF(first-stage ranks, "
                                         "CE ranks) instead of the CE order alone.")] = False,
    tune_weights: Annotated[bool, typer.Option(help="Tune the static modality weights (on "
                                               "the train split if any, else by k-fold CV "
                                               "over queries) instead of 0.50/0.35/0.15.")]
        = False,
) -> None:
    """Ablate the cascaded tri-modal pipeline: Dense only, Bi-modal, Tri-modal, Tri-modal +
    CE, Full pipeline (static and dynamic weights) with metrics, swaps, error analysis,
    latency and significance; Markdown + HTML + JSON report."""
    from intentrank.data.dataset import load_dataset
    from intentrank.eval.ablation import STATIC_WEIGHTS, ablate_dataset, write_report
    from intentrank.llm.client import load_llm
    from intentrank.models.cross_encoder import CrossEncoderReranker, default_reranker_dir

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        ds = load_dataset(dataset)
        idx = _open_or_build(dataset, index_dir)
        ds.check_qrels(idx.doc_and_parent_ids)
        llm = load_llm(LLM_SETTINGS["llm"], **LLM_SETTINGS["llm_options"]) if use_llm else None
        ce = CrossEncoderReranker(idx, cross_encoder or str(default_reranker_dir()), k=100,
                                  backend="onnx", max_length=128) if use_ce else None
        weights: object = STATIC_WEIGHTS
        if tune_weights:
            from intentrank.pipeline.modality_tuning import modality_weights_for

            weights, source = modality_weights_for(ds, idx, split, seed=seed, sample=sample)
            console.print(f"modality weights: {source}")
        report = ablate_dataset(ds, idx, split, sample, seed, llm=llm, cross_encoder=ce,
                                dynamic=dynamic and use_llm, baseline=baseline,
                                weights=weights, ce_depth=ce_depth,
                                listwise_chars=listwise_chars, ce_rrf=ce_rrf,
                                log=lambda m: console.print(f"  {m}"))
        paths = write_report(report, out_path or Path("runs") / "ablation" / ds.name)
    except (IntentrankError, ValueError) as exc:
        _fail(exc)
    print(report.to_markdown())
    console.print("[green]wrote[/] " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    app()
