"""Fault injection for the OpenAI-compatible HTTP backend: a stdlib http.server on 127.0.0.1
answers garbage, replies without choices, 500s, 429s (with and without Retry-After), slow
replies and dropped connections. A pipeline with an LLM stage over a real (BM25-only)
Cranfield index must complete with the stage's fallback, count it, show it in the health
line, and ``--strict`` must turn it into exit status 2."""

from __future__ import annotations

import functools
import json
import time
from email.utils import formatdate

import pytest
from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.llm.client import LLMClient
from intentrank.llm.health import check_strict, format_health, health_report, warnings_for
from intentrank.llm.openai_http import OpenAICompatibleLLM
from intentrank.query.followups import FollowUpPredictor
from intentrank.rerank.listwise import ListwiseReranker
from intentrank.retrieve.retrievers import BM25Retriever

runner = CliRunner()
LISTWISE_OK = "Passage 2 answers best. [2, 1, 3]"


@pytest.fixture()
def server(fake_openai):
    """Fake OpenAI-compatible servers (tests/fake_openai.py) answering a listwise ordering."""
    return functools.partial(fake_openai, reply=LISTWISE_OK)


@pytest.fixture(scope="module")
def bm25_index(cranfield, tmp_path_factory):
    """Cranfield with the BM25 leg only (built in about a second)."""
    from intentrank.index import IndexSettings, build_index

    return build_index(cranfield.corpus(), tmp_path_factory.mktemp("faults") / "cranfield",
                       IndexSettings(legs=("bm25",)))


@pytest.fixture(scope="module")
def queries(cranfield):
    return cranfield.split("test")[0][:3]


def _client(url: str, timeout: float = 0.4, retries: int = 1, **kw) -> LLMClient:
    return LLMClient(OpenAICompatibleLLM(url, "fake", timeout=timeout), cache=None,
                     retries=retries, backoff=0.01, **kw)


def _listwise(index, client):
    return BM25Retriever(index, 10) >> ListwiseReranker(index, client, top_k=3)


# (fault, retried?, words in the failure reason)
FAULTS = [
    ("garbage", False, "malformed JSON"),
    ("no_choices", False, "no choices"),
    ("bad_content", False, "not text"),
    ("500", True, "HTTP 500"),
    ("429", True, "HTTP 429"),
    ("slow", True, "timeout"),
    ("drop", True, "connection failed"),
    ("drop_mid", True, "connection failed"),
]


@pytest.mark.parametrize("fault, retried, reason", FAULTS, ids=[f[0] for f in FAULTS])
def test_every_fault_falls_back_counted_and_visible(server, bm25_index, queries, fault,
                                                    retried, reason):
    url, script = server(fault)
    bm25 = BM25Retriever(bm25_index, 10).run(queries)
    result = _listwise(bm25_index, _client(url)).run(queries)
    # the fallback keeps the previous order: the run completes with BM25's ranking
    assert [r.doc_ids for r in result.rankings] == [r.doc_ids for r in bm25.rankings]
    (h,) = health_report(result.trace)
    n = len(queries)
    assert (h.stage, h.queries, h.requests, h.failed, h.fallbacks) == ("listwise", n, n, n, n)
    assert h.calls == n * (2 if retried else 1) == script.requests
    assert h.all_failed and reason in h.last_failure
    line = format_health(h)
    assert line.startswith(f"LLM stage listwise: {n} queries, {n} requests ({h.calls} calls, "
                           f"0 cache hits)")
    assert f"{n} failed, {n} fallbacks (100.0%)" in line
    (warning,) = warnings_for([h])
    assert "every LLM request failed" in warning and reason in warning
    assert "listwise (3 failed LLM requests, 3 fallbacks of 3 requests)" in check_strict([h])


def test_followups_fall_back_to_the_query_alone(server, queries):
    url, _ = server("garbage")
    result = FollowUpPredictor(_client(url), m=2).run(queries)
    assert all(not r.query.derived_of("followup") for r in result.rankings)
    (h,) = health_report(result.trace)
    assert (h.stage, h.failed, h.fallbacks) == ("followups", 3, 3)


def test_a_retry_that_recovers_is_healthy(server, bm25_index, queries):
    url, _ = server("500", "429", "ok")  # the first request needs two retries
    result = _listwise(bm25_index, _client(url, retries=2)).run(queries)
    (h,) = health_report(result.trace)
    assert (h.requests, h.calls, h.retries, h.errors, h.failed, h.fallbacks) == (3, 5, 2, 2, 0, 0)
    assert not warnings_for([h]) and check_strict([h]) is None
    assert "2 retries, 0 failed, 0 fallbacks (0.0%)" in format_health(h)


def test_some_failures_warn_above_the_threshold(server, bm25_index, queries):
    url, _ = server("500", "ok")  # no retries: the first query falls back, two do not
    result = _listwise(bm25_index, _client(url, retries=0)).run(queries)
    (h,) = health_report(result.trace)
    assert (h.failed, h.fallbacks, h.all_failed) == (1, 1, False)
    (warning,) = warnings_for([h])
    assert "1 of 3 requests fell back (33.3% > 10%)" in warning
    assert check_strict([h]) is not None


def test_retry_after_is_honoured(server):
    from intentrank.llm.base import user
    from intentrank.types import Trace

    url, script = server("429:2", "ok")
    waits: list[float] = []
    client = _client(url, retries=2, sleep=waits.append)
    assert client.chat(user("q")).text == LISTWISE_OK
    assert waits == [2.0] and script.requests == 2  # the server's 2 s, not the 0.01 s backoff
    # as an HTTP date (about 3 s from now)
    url, _ = server(f"429:{formatdate(time.time() + 3, usegmt=True)}", "ok")
    waits.clear()
    _client(url, retries=1, sleep=waits.append).chat(user("q"))
    assert len(waits) == 1 and 1.0 <= waits[0] <= 3.5
    # a server that asks for an hour is not waited for
    url, script = server("429:3600")
    trace = Trace()
    assert _client(url, retries=3, sleep=waits.append).complete_or_none(
        user("q"), trace=trace, stage="s") is None
    assert script.requests == 1 and "more than max_retry_after=30 s" in \
        trace.events[-1].details["reason"]


def _cli_config(tmp_path, body: str = "[{bm25: {depth: 10}}, {listwise: {top_k: 3}}]"):
    cfg = tmp_path / "listwise.yaml"
    cfg.write_text(f"pipeline: {body}\n")
    return str(cfg)


def _cli(url: str, *args: str, strict: bool = False):
    options = ["--llm", f"openai:fake@{url}", "--no-llm-cache", "--llm-timeout", "0.5",
               "--llm-retries", "0"]
    return runner.invoke(app, [*options, *(["--strict"] if strict else []), *args])


@pytest.mark.parametrize("fault", ["garbage", "500", "drop"])
def test_cli_strict_exits_2_naming_the_stage(server, bm25_index, tmp_path, fault):
    url, _ = server(fault)
    args = ["search", str(bm25_index.path), "shock wave", "-p", _cli_config(tmp_path), "--json"]
    res = _cli(url, *args, strict=True)
    assert res.exit_code == 2, res.output
    assert json.loads(res.stdout)[0]["results"]  # the results are still printed
    assert "LLM stage listwise: 1 query, 1 request (1 call, 0 cache hits), 0 retries, " \
           "1 failed, 1 fallback (100.0%)" in res.output
    assert "error: strict mode: LLM stage(s) failed or fell back: listwise (1 failed LLM " \
           "request, 1 fallback of 1 request)" in res.output
    # without --strict: exit 0, with a visible warning
    res = _cli(url, *args)
    assert res.exit_code == 0, res.output
    assert "warning: LLM stage listwise: every LLM request failed" in res.output


def test_cli_healthy_llm_passes_strict(server, bm25_index, tmp_path):
    url, _ = server("ok")
    res = _cli(url, "search", str(bm25_index.path), "shock wave", "-p", _cli_config(tmp_path),
               strict=True)
    assert res.exit_code == 0, res.output
    assert "1 failed" not in res.output and "0 failed, 0 fallbacks (0.0%)" in res.output
    assert "warning" not in res.output


def test_cli_eval_reports_each_pipeline_and_strict_fails(server, small_cranfield, bm25_index,
                                                         tmp_path):
    url, _ = server("500")
    first = _cli_config(tmp_path)
    second = tmp_path / "followups.yaml"
    second.write_text("pipeline: [{bm25: {depth: 10}}, {followups: {m: 2}}]\n")
    res = _cli(url, "eval", str(small_cranfield), "--index", str(bm25_index.path),
               "-p", first, "-p", str(second), "--metrics", "nDCG@10", strict=True)
    assert res.exit_code == 2, res.output
    assert "| system | nDCG@10 |" in res.stdout  # the table is printed before the verdict
    assert f"LLM stage listwise [{first}]: 4 queries, 4 requests" in res.output
    assert f"LLM stage followups [{second}]: 4 queries, 4 requests" in res.output
    assert "listwise (4 failed LLM requests, 4 fallbacks of 4 requests); followups " \
           "(4 failed LLM requests, 4 fallbacks of 4 requests)" in res.output
    # an index of another corpus is refused before anything runs
    other = tmp_path / "other.jsonl"
    other.write_text('{"_id": "x", "text": "another corpus"}\n')
    res = runner.invoke(app, ["index", str(other), str(tmp_path / "oidx"), "--legs", "bm25"])
    assert res.exit_code == 0, res.output
    res = _cli(url, "eval", str(small_cranfield), "--index", str(tmp_path / "oidx"),
               "-p", first, "--metrics", "nDCG@10")
    assert res.exit_code == 2 and "was built from another corpus" in res.output
