"""The OpenAI-compatible HTTP backend against real servers on 127.0.0.1: llama.cpp's server
(serving the embedded 0.5B model) and tiny http.servers that stall, fail or answer garbage."""

from __future__ import annotations

import socket

import pytest

from intentrank.errors import ModelError
from intentrank.llm.base import user
from intentrank.llm.client import LLMClient
from intentrank.llm.openai_http import OpenAICompatibleLLM
from intentrank.types import Trace


def _client(url: str, **kw) -> LLMClient:
    llm = OpenAICompatibleLLM(url, "fake", timeout=kw.pop("timeout", 5.0))
    return LLMClient(llm, cache=None, backoff=0.01, **kw)


@pytest.mark.slow
def test_real_llamacpp_server_over_http(tmp_path):
    from intentrank.llm.embedded import LlamaCppLLM

    embedded = LlamaCppLLM(n_threads=1)  # same settings as test_llm_real: loaded once
    http = OpenAICompatibleLLM(embedded.base_url, "qwen2.5-coder-0.5b", timeout=60)
    client = LLMClient(http, cache=tmp_path / "c.sqlite")
    trace = Trace()
    reply = client.chat(user("Is Paris in France? Answer yes or no."), max_tokens=3, logprobs=5,
                        trace=trace)
    assert "yes" in reply.text.lower() and reply.prompt_tokens > 5
    assert 1 <= reply.completion_tokens <= 3
    assert {t.strip().lower() for t in reply.top_logprobs} & {"yes", "no"}
    again = client.chat(user("Is Paris in France? Answer yes or no."), max_tokens=3, logprobs=5,
                        trace=trace)
    assert again.cached and trace.stage("llm").counters["llm_calls"] == 1


def test_cache_hit_makes_no_request(fake_openai, tmp_path):
    url, script = fake_openai("ok")
    llm = OpenAICompatibleLLM(url, "fake")
    client = LLMClient(llm, cache=tmp_path / "c.sqlite")
    first = client.chat(user("q"))
    assert first.text == "Yes" and (first.prompt_tokens, first.completion_tokens) == (11, 1)
    assert client.chat(user("q")).cached and script.requests == 1


def test_stalling_server_times_out_retries_then_falls_back(fake_openai):
    url, script = fake_openai("stall")
    sleeps = []  # the backoff waits, recorded instead of slept
    client = _client(url, timeout=0.3, retries=2, sleep=sleeps.append)
    trace = Trace()
    assert client.complete_or_none(user("q"), trace=trace, stage="rewrite") is None
    assert client.llm.timeout == 0.3 and sleeps == [0.01, 0.02]  # stall replies after 1.5 s
    c = trace.stage("rewrite").counters
    assert c["llm_calls"] == 3 and c["llm_errors"] == 3 and c["llm_retries"] == 2
    assert c["llm_failed"] == 1 and script.requests == 3
    assert "timeout" in trace.events[-1].details["reason"] and trace.events[-1].kind == "llm_failed"


def test_stall_then_recover(fake_openai):
    url, _ = fake_openai("stall", "500", "ok")
    client = _client(url, timeout=0.3, retries=2)
    trace = Trace()
    assert client.chat(user("q"), trace=trace).text == "Yes"
    assert trace.stage("llm").counters["llm_retries"] == 2


def test_malformed_json_is_one_clear_error(fake_openai):
    url, script = fake_openai("garbage")
    client = _client(url, retries=2)
    with pytest.raises(ModelError, match="malformed JSON"):
        client.chat(user("q"))
    trace = Trace()
    assert client.complete_or_none(user("q"), trace=trace) is None
    assert script.requests == 2  # not retried
    assert "malformed JSON" in trace.events[-1].details["reason"]


def test_connection_refused_is_one_error_without_retries():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = _client(f"http://127.0.0.1:{port}/v1", retries=3)
    trace = Trace()
    with pytest.raises(ModelError, match="cannot connect to http://127.0.0.1") as err:
        client.chat(user("q"), trace=trace)
    assert "is the server running" in str(err.value)
    assert trace.stage("llm").counters["llm_calls"] == 1 and not trace.events


def test_bad_key_names_the_env_var(fake_openai, monkeypatch):
    url, script = fake_openai("401")
    monkeypatch.setenv("MY_LLM_KEY", "sk-wrong")
    llm = OpenAICompatibleLLM(url, "fake", api_key_env="MY_LLM_KEY")
    with pytest.raises(ModelError, match=r"rejected the API key \(HTTP 401\): set \$MY_LLM_KEY"):
        LLMClient(llm, cache=None, retries=3, backoff=0.01).chat(user("q"))
    assert script.requests == 1
