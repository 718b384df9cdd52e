"""``intentrank cluster build|status``: an index split into shards for Ray actors across
hosts (scale/shardset.py, scale/coordinator.py). ``intentrank serve --index NAME=DIR`` with
a cluster directory and ``--ray-address`` serves it (cli/serve.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from intentrank.cli.common import app, cli_errors, console, corpus, out
from intentrank.cli.options import CorpusArg, RayAddressOption
from intentrank.core.params import check_int
from intentrank.errors import ConfigError

cluster_app = typer.Typer(help="An index in shards on Ray actors across hosts: build it, "
                               "see where its replicas are.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("build")
@cli_errors
def build(
    source: CorpusArg,
    out_dir: Annotated[Path, typer.Argument(help="The cluster directory (on a path every "
                                            "host reads at the same place).")],
    shards: Annotated[int, typer.Option(help="Shards (documents placed by a hash of "
                                        "their id).")] = 2,
    replicas: Annotated[int, typer.Option(help="Replicas per shard when served, each on "
                                          "another host.")] = 2,
    legs: Annotated[str, typer.Option(help="bm25, dense or both.")] = "bm25,dense",
    overwrite: Annotated[bool, typer.Option(help="Rebuild an existing cluster.")] = False,
    encoding: Annotated[str, typer.Option(help="Corpus file encoding.")] = "utf-8",
) -> None:
    """Split a corpus into shard indexes by a stable hash of each document's id."""
    from intentrank.index import IndexSettings
    from intentrank.scale.shardset import build_cluster

    check_int("--shards", shards)
    check_int("--replicas", replicas)
    settings = IndexSettings(legs=tuple(x.strip() for x in legs.split(",") if x.strip()))
    m = build_cluster(corpus(source, encoding), out_dir, shards, settings,
                      replicas=replicas, overwrite=overwrite, log=console.print)
    console.print(f"[green]cluster ready[/] {m.root}: {len(m.order())} documents in "
                  f"{m.shards} shards, {m.replicas} replicas each when served")


@cluster_app.command("status")
@cli_errors
def status(
    ray_address: RayAddressOption = "auto",
    name: Annotated[str, typer.Option(help="Only the cluster index whose name starts with "
                                      "this (default: every one).")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds each replica gets to answer.")] =
        5.0,
) -> None:
    """Shards, replicas (state, host, generation) and hosts of the cluster indexes served
    on a Ray cluster."""
    from intentrank.scale.status import describe, find_served

    found = find_served(ray_address or "auto", name, timeout)
    if not found:
        raise ConfigError(f"no cluster index is served on the Ray cluster at "
                          f"{ray_address!r}" + (f" named {name!r}..." if name else ""))
    if as_json:
        print(json.dumps(found, indent=1, default=str))
        return
    for st in found:
        out.print(describe(st)())
