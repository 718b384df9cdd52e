"""The OpenAI-compatible HTTP backend against real servers on 127.0.0.1: llama.cpp's server
(serving the embedded 0.5B model) and tiny http.servers that stall, fail or answer garbage."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from intentrank.errors import ModelError
from intentrank.llm.base import user
from intentrank.llm.client import LLMClient
from intentrank.llm.openai_http import OpenAICompatibleLLM
from intentrank.types import Trace

OK_BODY = {
    "id": "c1", "object": "chat.completion", "created": 0, "model": "fake",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Yes"}}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12},
}


class Script:
    """What the fake server does for each request, in order; the last step repeats."""

    def __init__(self, *steps: str) -> None:
        self.steps, self.requests = list(steps), 0
        self.lock = threading.Lock()

    def next(self) -> str:
        with self.lock:
            self.requests += 1
            return self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            step = script.next()
            status, body = 200, json.dumps(OK_BODY).encode()
            if step == "stall":
                time.sleep(1.5)
            elif step == "garbage":
                body = b'{"choices": [{"message": '
            elif step == "401":
                status, body = 401, b'{"error": {"message": "Incorrect API key"}}'
            elif step == "500":
                status, body = 500, b'{"error": {"message": "overloaded"}}'
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout)

    return Handler


@pytest.fixture()
def fake_server() -> Iterator:
    servers = []

    def start(*steps: str) -> tuple[str, Script]:
        script = Script(*steps)
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1", script

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


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


def test_cache_hit_makes_no_request(fake_server, tmp_path):
    url, script = fake_server("ok")
    llm = OpenAICompatibleLLM(url, "fake")
    client = LLMClient(llm, cache=tmp_path / "c.sqlite")
    first = client.chat(user("q"))
    assert first.text == "Yes" and (first.prompt_tokens, first.completion_tokens) == (11, 1)
    assert client.chat(user("q")).cached and script.requests == 1


def test_stalling_server_times_out_retries_then_falls_back(fake_server):
    url, script = fake_server("stall")
    client = _client(url, timeout=0.3, retries=2)
    trace = Trace()
    start = time.perf_counter()
    assert client.complete_or_none(user("q"), trace=trace, stage="rewrite") is None
    assert time.perf_counter() - start < 1.5
    c = trace.stage("rewrite").counters
    assert c["llm_calls"] == 3 and c["llm_errors"] == 3 and c["llm_retries"] == 2
    assert c["llm_failed"] == 1 and script.requests == 3
    assert "timeout" in trace.events[-1].details["reason"] and trace.events[-1].kind == "llm_failed"


def test_stall_then_recover(fake_server):
    url, _ = fake_server("stall", "500", "ok")
    client = _client(url, timeout=0.3, retries=2)
    trace = Trace()
    assert client.chat(user("q"), trace=trace).text == "Yes"
    assert trace.stage("llm").counters["llm_retries"] == 2


def test_malformed_json_is_one_clear_error(fake_server):
    url, script = fake_server("garbage")
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


def test_bad_key_names_the_env_var(fake_server, monkeypatch):
    url, script = fake_server("401")
    monkeypatch.setenv("MY_LLM_KEY", "sk-wrong")
    llm = OpenAICompatibleLLM(url, "fake", api_key_env="MY_LLM_KEY")
    with pytest.raises(ModelError, match=r"rejected the API key \(HTTP 401\): set \$MY_LLM_KEY"):
        LLMClient(llm, cache=None, retries=3, backoff=0.01).chat(user("q"))
    assert script.requests == 1
