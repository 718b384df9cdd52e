"""Stream many queries through a pipeline's stages concurrently (the producer-consumer chain
of method 5): the queries are cut into micro-batches and every top-level stage of the chain
runs in its own thread, taking batches from a bounded queue and handing its output to the
next, so retrieval, cross-encoder and LLM work of different batches overlap.

The output is what running the pipeline batch by batch returns (the rankings in query
order; the same path ids, because the first batch runs through the whole chain alone before
the others stream; the trace's stage seconds are each stage's busy time, summed over
batches). It equals ``pipeline.run(queries)`` (stages must score a query independently of the
others in its batch; the int8 cross-encoder does, by scoring one pair at a time).
An exception in any stage stops the stream and is raised. Stages must not keep per-batch
state that depends on earlier batches (none of the shipped ones does).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from intentrank.core.params import check_int
from intentrank.core.stage import Chain, RunResult, Stage, as_queries
from intentrank.types import Query, Ranking, Trace


@dataclass
class _Failed:
    error: BaseException


_DONE = object()


def _worker(stage: Stage, inbox: queue.Queue, outbox: queue.Queue, trace: Trace) -> None:
    failed = False
    while True:
        item = inbox.get()
        if item is _DONE:
            outbox.put(item)
            return
        if failed:  # keep draining so that no producer blocks on a full queue
            continue
        if isinstance(item, _Failed):
            outbox.put(item)
            failed = True
            continue
        try:
            outbox.put(stage(item, trace))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
            outbox.put(_Failed(exc))
            failed = True


def run_streamed(pipeline: Stage, queries: Iterable[Query | str], batch_size: int = 4,
                 queue_size: int = 2, trace: Trace | None = None) -> RunResult:
    """Run ``pipeline`` over ``queries`` in micro-batches of ``batch_size``, one thread per
    top-level stage, at most ``queue_size`` batches waiting between two stages."""
    batch_size = check_int("batch_size", batch_size)
    queue_size = check_int("queue_size", queue_size)
    trace = trace if trace is not None else Trace()
    rankings = [Ranking(q) for q in as_queries(queries)]
    batches = [rankings[i:i + batch_size] for i in range(0, len(rankings), batch_size)]
    if not batches:
        return RunResult([], trace)
    out = list(pipeline(batches[0], trace))  # hands out every path id, in run order
    stages = pipeline.stages if isinstance(pipeline, Chain) else [pipeline]
    if len(batches) == 1:
        return RunResult(out, trace)
    queues = [queue.Queue(maxsize=queue_size) for _ in range(len(stages) + 1)]
    forks = [trace.fork() for _ in stages]
    threads = [threading.Thread(target=_worker, args=(s, queues[i], queues[i + 1], forks[i]),
                                name=f"stream:{s.name}", daemon=True)
               for i, s in enumerate(stages)]
    for t in threads:
        t.start()

    def feed() -> None:
        for batch in batches[1:]:
            queues[0].put(batch)
        queues[0].put(_DONE)

    feeder = threading.Thread(target=feed, name="stream:feed", daemon=True)
    feeder.start()
    error: BaseException | None = None
    while True:
        item = queues[-1].get()
        if item is _DONE:
            break
        if isinstance(item, _Failed):
            error = error or item.error
            continue
        out.extend(item)
    for t in (feeder, *threads):
        t.join()
    for fork in forks:
        trace.merge(fork)
    if error is not None:
        raise error
    return RunResult(out, trace)
