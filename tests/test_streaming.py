"""Streaming a pipeline over many queries: the same rankings and trace as a plain run (real
Cranfield index), stages overlapping, bounded queues, errors raised."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from intentrank.core.params import ParameterError
from intentrank.core.stage import Stage
from intentrank.core.streaming import run_streamed
from intentrank.pipelines import build_context, build_pipeline
from intentrank.types import Query, Ranking, Trace


class Busy(Stage):
    """Sleeps per batch and records how many Busy stages run at once."""

    active = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self, name: str, fail_on: str | None = None) -> None:
        self.name, self.fail_on = name, fail_on

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        with Busy.lock:
            Busy.active += 1
            Busy.peak = max(Busy.peak, Busy.active)
        try:
            time.sleep(0.05)
            if self.fail_on and any(r.query.id == self.fail_on for r in rankings):
                raise RuntimeError(f"{self.name} failed on {self.fail_on}")
            trace.count(trace.path_of(self), "batches")
            return [Ranking(r.query.with_derived("seen", [self.name], self.name), r.docs)
                    for r in rankings]
        finally:
            with Busy.lock:
                Busy.active -= 1


def queries(n: int) -> list[Query]:
    return [Query(f"q{i}", f"query {i}") for i in range(n)]


def test_stages_overlap_and_order_is_kept():
    Busy.peak = 0
    pipe = Busy("a") >> Busy("b") >> Busy("c")
    result = run_streamed(pipe, queries(12), batch_size=2, queue_size=1)
    assert [r.query.id for r in result.rankings] == [f"q{i}" for i in range(12)]
    assert all(r.query.derived_of("seen") == ["a", "b", "c"] for r in result.rankings)
    assert Busy.peak >= 2  # different stages ran at the same time
    for name in "abc":
        st = result.trace.stage(name)
        assert st.queries == 12 and st.counters["batches"] == 6


def test_an_error_in_a_stage_is_raised_and_nothing_hangs():
    pipe = Busy("a") >> Busy("b", fail_on="q7") >> Busy("c")
    with pytest.raises(RuntimeError, match="b failed on q7"):
        run_streamed(pipe, queries(20), batch_size=1, queue_size=1)
    with pytest.raises(ParameterError, match="batch_size"):
        run_streamed(pipe, queries(2), batch_size=0)
    assert run_streamed(pipe, []).rankings == []


def test_streamed_equals_a_plain_run_on_real_cranfield(cranfield, cranfield_index):
    ctx = build_context(cranfield_index)
    pipe = build_pipeline([{"fuse": {"method": "rrf", "inputs": [{"bm25": {"depth": 50}},
                                                                  {"dense": {"depth": 50}}]}},
                           {"cutoff": 20}, {"cross_encoder": {"top_k": 20}}], ctx, "test")
    qs = list(cranfield.queries.values())[:9]
    plain = pipe.run(qs)
    streamed = run_streamed(pipe, qs, batch_size=2)
    assert [r.doc_ids for r in streamed.rankings] == [r.doc_ids for r in plain.rankings]
    for a, b in zip(streamed.rankings, plain.rankings, strict=True):
        assert [d.score for d in a.docs] == pytest.approx([d.score for d in b.docs], abs=1e-5)
    assert set(streamed.trace.stages) == set(plain.trace.stages)
    for name, st in plain.trace.stages.items():
        assert streamed.trace.stages[name].queries == st.queries
        assert streamed.trace.stages[name].counters == st.counters


def test_index_documents_read_from_many_threads_at_once(cranfield_index):
    """Streamed stages read documents concurrently (positional reads, no shared seek)."""
    ids = cranfield_index.ids
    wrong: list[str] = []

    def read(k: int) -> None:
        for i in range(1500):
            doc_id = ids[(i * 7 + k * 13) % len(ids)]
            try:
                if cranfield_index.doc(doc_id).id != doc_id:
                    wrong.append(doc_id)
            except Exception as exc:  # noqa: BLE001 - the old race raised IndexCorruptError
                wrong.append(f"{doc_id}: {exc}")

    threads = [threading.Thread(target=read, args=(k,)) for k in range(6)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []
    last = ids[-1]
    assert cranfield_index.doc(last).id == last  # the last line ends at the file's end
