"""``intentrank serve`` and ``quickstart``: the HTTP service, and the main job on the
embedded default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from intentrank.cli.common import (
    DEFAULT_DATA,
    app,
    cli_errors,
    console,
    llm_health,
    load_dataset,
    out,
    settings_of,
    split_and_index,
)
from intentrank.cli.evaluate import compare_pipelines
from intentrank.cli.options import RayAddressOption, RayPanel, panel
from intentrank.core.params import check_int, check_number
from intentrank.errors import ConfigError

AccessPanel, LimitsPanel = panel("Access"), panel("Workers and limits")


@app.command()
@cli_errors
def serve(
    ctx: typer.Context,
    index: Annotated[list[str] | None, typer.Option("--index", help="Index to serve: DIR or "
                                                    "NAME=DIR; repeat (default: the quickstart's "
                                                    "SciFact index, built if missing).")] = None,
    pipeline: Annotated[list[str] | None, typer.Option(
        "--pipeline", "-p", help="Shipped name or [NAME=]config.yaml; repeat (default: bm25 dense "
        "tfidf sparse graph rrf weighted cascade answer conversation).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    keys_file: Annotated[Path | None, AccessPanel(help="API keys file (sha256 digests); else "
                                                  "$INTENTRANK_API_KEYS; else one is generated and "
                                                  "printed.")] = None,
    no_keys: Annotated[bool, AccessPanel("--no-keys", help="Serve without API keys.")] = False,
    workers: Annotated[int, LimitsPanel(help="Pipeline worker threads.")] = 2,
    queue_limit: Annotated[int, LimitsPanel(help="Requests that may wait beyond the workers "
                                            "(more get 503).")] = 32,
    timeout: Annotated[float, LimitsPanel(help="Seconds per request, queue wait included "
                                          "(504).")] = 60.0,
    cors_origin: Annotated[list[str] | None, AccessPanel(help="Allowed CORS origin; repeat "
                                                         "(default: CORS off).")] = None,
    report_dir: Annotated[list[Path] | None, typer.Option(help="Directory of HTML reports to list "
                                                          "(default docs/ablation).")] = None,
    log_texts: Annotated[bool, AccessPanel("--log-texts", help="Put request texts (queries, "
                                           "filters) in the access log (default: never).")
                         ] = False,
    access_log: Annotated[Path | None, typer.Option(help="JSON-lines access log file (default "
                                                    "stderr).")] = None,
    dataset: Annotated[Path, typer.Option(help="Dataset of the default index.")] =
        DEFAULT_DATA / "scifact",
    watch_index: Annotated[float, typer.Option(help="Every this many seconds, switch to an "
                                               "index directory's new generation once a "
                                               "rebuild commits one, and a cluster index "
                                               "to its shards' new commits (0: never).")] = 0.0,
    drain: Annotated[float, LimitsPanel(help="On SIGTERM: seconds in-flight requests get to "
                                        "finish (new ones get 503).")] = 30.0,
    ray: Annotated[bool, RayPanel("--ray", help="Serve replicas on Ray Serve (a local "
                                  "cluster unless --ray-address).")] = False,
    ray_address: RayAddressOption = "",
    replicas: Annotated[int, RayPanel(help="Ray Serve replicas.")] = 2,
    ray_ce: Annotated[str, RayPanel(help="With --ray: score this cross-encoder (as the "
                                    "pipelines' cross_encoder steps name their model) "
                                    "in batches shared across requests.")] = "",
    ray_ce_backend: Annotated[str, RayPanel(help="Its backend, as the steps name it "
                                            "(torch or onnx; default: none given).")] = "",
    ray_ce_max_length: Annotated[int, RayPanel(help="Its max_length, as the steps name "
                                               "it (0: none given).")] = 0,
    ray_batch_size: Annotated[int, RayPanel(help="Most requests in one cross-encoder "
                                            "batch.")] = 8,
    ray_batch_wait_ms: Annotated[float, RayPanel(help="How long a batch waits to "
                                                 "fill.")] = 10.0,
    shard_replicas: Annotated[int, RayPanel(help="A cluster index (`intentrank cluster "
                                            "build`): replicas per shard, each on another "
                                            "host (0: as built).")] = 0,
    hedge_ms: Annotated[float, RayPanel(help="A cluster index: ask a shard's next replica "
                                        "when one has not answered in this long.")] = 500.0,
    shard_timeout: Annotated[float, RayPanel(help="A cluster index: seconds a shard's "
                                             "replicas get in all.")] = 10.0,
) -> None:
    """Serve indexes and pipelines over HTTP, with a web page."""
    from intentrank.extras import require
    from intentrank.service.command import build_settings, log_stderr
    from intentrank.service.command import serve as run_service

    settings = settings_of(ctx)
    check_int("--replicas", replicas)
    check_int("--ray-batch-size", ray_batch_size)
    check_number("--watch-index", watch_index, minimum=0)
    check_number("--drain", drain, above=0)
    if ray_batch_wait_ms < 0:
        raise ConfigError(f"--ray-batch-wait-ms must be >= 0, got {ray_batch_wait_ms}")
    batching = None
    if ray_ce:
        if not (ray or ray_address):
            raise ConfigError("--ray-ce batches across Ray Serve replicas: add --ray")
        from intentrank.scale.serve import ScorerSpec

        batching = {"cross_encoder": ScorerSpec(ray_ce, ray_ce_backend or None,
                                                ray_ce_max_length or None),
                    "max_batch_size": ray_batch_size,
                    "batch_wait_timeout_s": ray_batch_wait_ms / 1000}
    for module in ("uvicorn", "fastapi"):  # before the default index is loaded or built
        require(module, "service", "intentrank serve")
    service_settings, generated = build_settings(
        index, pipeline, keys_file, no_keys, workers, queue_limit, timeout, cors_origin,
        report_dir, access_log, dataset, settings.llm, settings.llm_options, log=log_stderr,
        watch_s=watch_index or None, drain_s=drain, log_texts=log_texts)
    from intentrank.scale.shardset import is_cluster

    clusters = [n for n, w in service_settings.indexes.items()
                if isinstance(w, (str, Path)) and is_cluster(w)]
    if clusters:  # served by this process; its shards on Ray actors across hosts
        if ray:
            raise ConfigError(f"{clusters}: a cluster index's shards are Ray actors already; "
                              f"serve it without --ray (give --ray-address)")
        if hedge_ms <= 0 or shard_timeout <= 0:
            raise ConfigError("--hedge-ms and --shard-timeout must be > 0")
        from intentrank.scale.coordinator import open_clusters

        service_settings.indexes = open_clusters(
            service_settings.indexes, ray_address or None, replicas=shard_replicas or None,
            hedge_s=hedge_ms / 1000, timeout_s=shard_timeout)
        ray_address = ""
    run_service(service_settings, generated, host, port, ray=ray,
                ray_address=ray_address or None, replicas=replicas, ray_batching=batching)


@app.command()
@cli_errors
def quickstart(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Option(help="BEIR dataset to index and evaluate.")] =
        DEFAULT_DATA / "scifact",
    index_dir: Annotated[Path, typer.Option("--index", help="Where to build the index.")] =
        Path("indexes/scifact"),
) -> None:
    """The main job on the embedded default: index SciFact, answer a few queries, evaluate."""
    from intentrank.core.config import load_config, resolve_pipeline
    from intentrank.pipelines import pipeline_from_config

    settings = settings_of(ctx)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ds = load_dataset(settings, dataset)
    (queries, qrels), idx = split_and_index(settings, ds, "test", dataset, index_dir)
    rrf = pipeline_from_config(resolve_pipeline("rrf"), index=idx)
    for q in queries[:3]:
        top = rrf.search(q.text, k=3)
        out.print(f"\n[bold]{escape(q.text)}[/]")
        for rank, d in enumerate(top.docs, 1):
            mark = "[green]relevant[/]" if qrels[q.id].get(d.doc_id, 0) > 0 else ""
            out.print(f"  {rank}. {escape(f'[{d.doc_id}]')} "
                      f"{escape(idx.doc(d.doc_id).title[:80])} {mark}")
    nodes = {n: load_config(resolve_pipeline(n))["pipeline"]
             for n in ("bm25", "dense", "rrf", "weighted")}
    with console.status(f"evaluating 4 pipelines on {len(queries)} test queries"):
        res, table = compare_pipelines(settings, nodes, idx, ds, queries, qrels,
                                       ["nDCG@10", "MRR@10", "Recall@100"], "bm25")
    out.print(f"\n{escape(ds.name)} test ({len(queries)} queries)\n")
    print(table)
    llm_health(settings, {r.name: r.trace for r in res.pipelines}, separate=True)
