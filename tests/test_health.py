"""LLM health: per-stage counts from traces, the one-line summary, warnings, --strict, and
correct sums over runs that share stage outputs (eval pipelines, ablation configurations)."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest

from intentrank.core.cache import Cached
from intentrank.core.stage import Stage
from intentrank.errors import ModelError
from intentrank.index.store import Hits
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.llm.health import (
    StageHealth,
    check_strict,
    format_health,
    health_report,
    warnings_for,
)
from intentrank.query.followups import FollowUpPredictor
from intentrank.types import Query, Ranking, Trace


def _trace(**counters: float) -> Trace:
    trace = Trace()
    st = trace.stage("listwise")
    st.queries = int(counters.pop("queries", 10))
    st.counters.update(counters)
    return trace


def test_counts_and_the_line():
    trace = _trace(queries=10, llm_calls=7, llm_retries=1, llm_errors=2, llm_cache_hits=4,
                   llm_failed=1, fallbacks=2)
    trace.stage("bm25").counters["empty_results"] = 3  # not an LLM stage: no line
    trace.log("listwise", "llm_failed", reason="HTTP 500: boom")
    (h,) = health_report(trace)
    assert (h.requests, h.calls, h.cache_hits, h.failed, h.fallbacks) == (10, 7, 4, 1, 2)
    assert h.fallback_share == pytest.approx(0.2) and not h.all_failed
    assert format_health(h) == ("LLM stage listwise: 10 queries, 10 requests (7 calls, 4 cache "
                                "hits), 1 retry, 1 failed, 2 fallbacks (20.0%)")
    (warning,) = warnings_for([h])
    assert warning == ("LLM stage listwise: 2 of 10 requests fell back (20.0% > 10%); results "
                       "are degraded (last error: HTTP 500: boom)")
    assert check_strict([h]) == ("strict mode: LLM stage(s) failed or fell back: listwise "
                                 "(1 failed LLM request, 2 fallbacks of 10 requests)")


def test_threshold_and_all_failed():
    at_threshold = health_report(_trace(queries=10, llm_calls=10, fallbacks=1))[0]
    assert not warnings_for([at_threshold])  # 10% is not more than 10%
    assert check_strict([at_threshold]) is not None  # but --strict allows no fallback
    assert warnings_for([at_threshold], threshold=0.05)
    failed = health_report(_trace(queries=2, llm_calls=6, llm_retries=4, llm_failed=2,
                                  fallbacks=2))[0]
    assert failed.all_failed and "every LLM request failed (2 of 2)" in warnings_for([failed])[0]
    # cache hits alone never count as "all failed"
    cached = health_report(_trace(queries=3, llm_cache_hits=3))[0]
    assert not cached.all_failed and not warnings_for([cached]) and check_strict([cached]) is None
    assert health_report(Trace()) == [] and check_strict([]) is None


class FakeLLM:
    """Numbered follow-ups for most queries, a useless reply or a failure for some."""

    name = "fake:health"

    def __init__(self, bad: tuple[str, ...] = (), failing: tuple[str, ...] = ()) -> None:
        self.bad, self.failing, self.calls = bad, failing, 0
        self.lock = threading.Lock()

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        text = messages[-1]["content"]
        with self.lock:
            self.calls += 1
        if any(w in text for w in self.failing):
            raise ModelError("the model is down")
        if any(w in text for w in self.bad):
            return LLMReply("I cannot help with that.")
        return LLMReply("Follow-up questions:\n1. What is the first?\n2. Why the second?")


QUERIES = [Query(f"q{i}", f"query number {i} about topic {w}")
           for i, w in enumerate(("alpha", "beta", "gamma", "delta"))]


class Tag(Stage):
    """A non-LLM stage after the shared one (the two pipelines differ only here)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        return rankings


def test_shared_cached_stage_is_counted_once_over_runs():
    backend = FakeLLM(bad=("beta",), failing=("gamma",))
    shared = Cached(FollowUpPredictor(LLMClient(backend, cache=None, retries=0), m=2))
    first = (shared >> Tag("a")).run(QUERIES)
    second = (shared >> Tag("b")).run(QUERIES)  # replays every query
    assert backend.calls == 4
    # each run alone reads "as if run alone" ...
    for run in (first, second):
        (h,) = health_report(run.trace, fresh=False)
        assert (h.queries, h.requests, h.failed, h.fallbacks) == (4, 4, 1, 2)
    assert health_report(second.trace) == []  # it did no LLM work of its own
    # ... and over both runs the shared work is counted once
    (h,) = health_report([first.trace, second.trace])
    assert (h.queries, h.requests, h.calls, h.failed, h.fallbacks) == (4, 4, 4, 1, 2)
    assert h.last_failure.endswith("the model is down")
    # the merged trace of both runs says the same
    merged = Trace()
    merged.merge(first.trace)
    merged.merge(second.trace)
    assert health_report(merged)[0].requests == 4
    # independent pipelines (eval): one entry per pipeline with separate=True
    third = FollowUpPredictor(LLMClient(FakeLLM(), cache=None), m=2).run(QUERIES[:2])
    per = health_report({"a.yaml": first.trace, "b.yaml": third.trace}, separate=True)
    assert [(h.labels, h.requests, h.fallbacks) for h in per] == [
        (("a.yaml",), 4, 2), (("b.yaml",), 2, 0)]
    assert format_health(per[1]).startswith("LLM stage followups [b.yaml]: 2 queries")
    summed = health_report({"a.yaml": first.trace, "b.yaml": third.trace})
    assert [(h.labels, h.requests) for h in summed] == [(("a.yaml", "b.yaml"), 6)]


class FakeIndex:
    """Every leg answers from a hash of the text: enough for the ablation's pipelines."""

    path = "fake-index"

    def __init__(self, n: int = 40) -> None:
        self.ids = [f"d{i}" for i in range(n)]
        self.id_array = np.array(self.ids, dtype=object)

    def has(self, leg: str) -> bool:
        return True

    def doc_text(self, doc_id: str) -> str:
        return f"passage {doc_id}"

    def _search(self, texts: list[str], k: int, leg: str) -> list[Hits]:
        out = []
        for text in texts:
            seed = int(hashlib.sha256(f"{leg}:{text}".encode()).hexdigest()[:8], 16)
            rows = np.random.default_rng(seed).permutation(len(self.ids))[:k]
            out.append(Hits(rows, np.linspace(1.0, 0.1, len(rows))))
        return out

    def search_bm25(self, texts: list[str], k: int) -> list[Hits]:
        return self._search(texts, k, "bm25")

    def search_dense(self, texts: list[str], k: int) -> list[Hits]:
        return self._search(texts, k, "dense")

    def search_tfidf(self, texts: list[str], k: int) -> list[Hits]:
        return self._search(texts, k, "tfidf")

    def search_graph(self, texts: list[str], k: int) -> list[Hits]:
        return self._search(texts, k, "graph")


class ReversingScorer:
    """A cross-encoder stand-in that reverses each query's candidates."""

    name = "fake:reversing"

    def predict(self, pairs, batch_size: int = 8) -> np.ndarray:
        return np.arange(len(pairs), dtype=np.float32)


class AblationLLM:
    """Valid weights for most queries, a failure for one; listwise: swap the first two."""

    name = "fake:ablation-health"

    def __init__(self) -> None:
        self.calls = {"weights": 0, "listwise": 0}
        self.lock = threading.Lock()

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        text = messages[-1]["content"]
        kind = "listwise" if text.startswith("Rank the") else "weights"
        with self.lock:
            self.calls[kind] += 1
        if "topic gamma" in text:
            raise ModelError("the model is down")
        if kind == "listwise":
            return LLMReply("[2, 1, 3, 4, 5]")
        return LLMReply('{"dense": 0.5, "sparse": 0.3, "graph": 0.2}')


def test_ablation_health_counts_each_llm_request_once(monkeypatch):
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment

    monkeypatch.setattr("intentrank.rerank.cross_encoder.load_cross_encoder",
                        lambda *args, **kwargs: ReversingScorer())
    index = FakeIndex()
    qrels = {q.id: {"d1": 1, "d2": 2} for q in QUERIES}
    backend = AblationLLM()
    report = run_experiment(load_experiment("cascade-ablation").replace(permutations=50),
                            index=index, queries=QUERIES, qrels=qrels,
                            llm=LLMClient(backend, cache=None, retries=0))
    by_stage = {h.stage: h for h in health_report([r.trace for r in report.pipelines])}
    assert set(by_stage) == {"dynamic", "listwise"}
    # three configurations run the dynamic fusion, but it is computed once per query
    dyn = by_stage["dynamic"]
    assert (dyn.requests, dyn.calls, dyn.failed, dyn.fallbacks) == (
        4, backend.calls["weights"], 1, 1)
    lw = by_stage["listwise"]
    assert lw.requests == lw.calls == backend.calls["listwise"]
    assert lw.failed == lw.fallbacks == backend.calls["listwise"] // 4
    # each configuration's own trace still reads as if run alone
    full_dynamic = report.result("Full pipeline (dynamic)")
    alone = {h.stage: h for h in health_report(full_dynamic.trace, fresh=False)}
    assert alone["dynamic"].requests == 4 and alone["listwise"].requests == 4


def test_stage_health_defaults():
    h = StageHealth("x")
    assert h.requests == 0 and h.fallback_share == 0.0 and not warnings_for([h])
