"""Batch evaluation of a pipeline over many queries as Ray tasks.

The queries are cut into contiguous chunks; each Ray task opens the index by path, builds the
pipeline from its config and runs its chunk; the rankings come back in query order, the
traces are merged, and metrics are computed here exactly as for a single-process run.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from intentrank.core.stage import RunResult
from intentrank.data.trec import Qrels
from intentrank.measures.metrics import EvalResult, evaluate
from intentrank.types import Query, Trace


def build_pipeline_for(config: str | Path | dict[str, Any] | list[Any], index: Any,
                       **resources: Any) -> Any:
    """A pipeline from a config file (path or shipped name) or a config node."""
    from intentrank.core.config import build_pipeline
    from intentrank.pipelines import build_context, pipeline_from_config

    if isinstance(config, str | Path):
        return pipeline_from_config(config, index=index, **resources)
    node = config["pipeline"] if isinstance(config, dict) and "pipeline" in config else config
    return build_pipeline(node, build_context(index, **resources))


def _run_chunk(config: Any, index_path: str, queries: list[Query],
               resources: dict[str, Any], threads: int) -> RunResult:
    import torch

    from intentrank.index import Index

    torch.set_num_threads(threads)
    with Index(index_path) as index:
        result = build_pipeline_for(config, index, **resources).run(queries)
    trace = Trace()  # the run's trace refers to its stages (and their index): copy the numbers
    trace.merge(result.trace)
    return RunResult(result.rankings, trace)


def chunks(items: Sequence[Any], n: int) -> list[list[Any]]:
    """``items`` in ``n`` contiguous, near-equal parts (none empty)."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    bounds = [i * size + min(i, extra) for i in range(n + 1)]
    return [list(items[start:end]) for start, end in pairwise(bounds)]


def ray_run(config: Any, index_path: str | Path, queries: Sequence[Query], *,
            tasks: int = 2, threads_per_task: int = 1, address: str | None = None,
            resources: dict[str, Any] | None = None) -> RunResult:
    """Run a pipeline over ``queries`` as ``tasks`` Ray tasks; rankings in query order."""
    from intentrank.scale.cluster import connect

    ray = connect(address)
    remote = ray.remote(num_cpus=threads_per_task)(_run_chunk)
    path = str(Path(index_path).absolute())
    refs = [remote.remote(config, path, part, dict(resources or {}), threads_per_task)
            for part in chunks(list(queries), tasks)]
    results, trace = ray.get(refs), Trace()
    for res in results:
        trace.merge(res.trace)
    return RunResult([r for res in results for r in res.rankings], trace)


def ray_evaluate(config: Any, index_path: str | Path, queries: Sequence[Query], qrels: Qrels,
                 metrics: Sequence[str], **kwargs: Any) -> tuple[RunResult, EvalResult]:
    """:func:`ray_run`, then the metrics of its run against ``qrels``."""
    result = ray_run(config, index_path, queries, **kwargs)
    return result, evaluate(result.to_run(), qrels, metrics)
