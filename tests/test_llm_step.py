"""run_step with a fake LLM (every FallbackReason counted and logged, repairs, batching through
chat_many) and the structured-output request fields of both backends and the reply cache."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import RecordingLLM

from intentrank.errors import ModelError
from intentrank.llm import embedded
from intentrank.llm.base import ChatParams, LLMReply, Message, user
from intentrank.llm.cache import ReplyCache, cache_key
from intentrank.llm.client import LLMClient
from intentrank.llm.parsing import Repaired
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import FallbackReason, run_step
from intentrank.types import Trace


class ScriptedLLM(RecordingLLM):
    """Answers by the query in the last user message (``Query: <q>``); ``"FAIL"`` raises."""

    name, model = "fake:scripted", "scripted"

    def __init__(self, answers: dict[str, str | tuple[str, str]], delay: float = 0.0) -> None:
        super().__init__(delay)
        self.answers = answers

    def answer(self, messages: list[Message], params: ChatParams) -> LLMReply:
        query = messages[-1]["content"].rsplit("Query: ", 1)[-1].strip()
        answer = self.answers[query]
        text, finish = answer if isinstance(answer, tuple) else (answer, "stop")
        if text == "FAIL":
            raise ModelError(f"{self.name}: broken")
        return LLMReply(text, 100, 10, raw={"finish_reason": finish})


def validate(obj: dict[str, Any], item: Any) -> tuple[float, ...]:
    ws = tuple(float(obj[m]) for m in ("dense", "sparse", "graph"))
    if any(not 0 <= w <= 1 for w in ws):
        raise ValueError(f"a weight outside [0, 1]: {ws}")
    total = sum(ws)
    if abs(total - 1) > 0.01:
        if 0.8 <= total <= 1.2:
            return Repaired(tuple(w / total for w in ws), f"sum {total:.2f} renormalised")
        raise ValueError(f"weights sum to {total:.3f}, not 1")
    return ws


ANSWERS = {
    "ok": '{"dense": 0.5, "sparse": 0.3, "graph": 0.2}',
    "prose": "I think dense search is best here.",
    "outside": '{"dense": 1.5, "sparse": 0.3, "graph": 0.2}',
    "missing": '{"dense": 0.5, "sparse": 0.5}',
    "repair": '{"dense": 0.5, "sparse": 0.3, "graph": 0.1}',
    "blank": "  \n",
    "cut": ('{"dense": 0.5, "spa', "length"),
    "down": "FAIL",
}


def test_run_step_counts_every_fallback_reason_and_repair():
    llm = ScriptedLLM(ANSWERS)
    client, trace = LLMClient(llm, cache=False, retries=0), Trace()
    items = [{"query": q} for q in ANSWERS]
    results = run_step(client, "modality_weights", items, validate=validate,
                       fallback=lambda item: ("rule", item["query"]), trace=trace,
                       stage="dyn", query_ids=[f"q-{q}" for q in ANSWERS])
    by = dict(zip(ANSWERS, results, strict=True))
    assert by["ok"].ok and by["ok"].value == (0.5, 0.3, 0.2) and by["ok"].reason is None
    assert by["repair"].ok and by["repair"].repaired and "renormalised" in by["repair"].detail
    assert by["repair"].value == pytest.approx((0.5 / 0.9, 0.3 / 0.9, 0.1 / 0.9))
    expected = {"prose": FallbackReason.UNPARSEABLE, "outside": FallbackReason.INVALID,
                "missing": FallbackReason.INVALID, "blank": FallbackReason.EMPTY_REPLY,
                "cut": FallbackReason.TRUNCATED, "down": FallbackReason.LLM_FAILED}
    for query, reason in expected.items():
        r = by[query]
        assert not r.ok and r.reason is reason and r.value == ("rule", query), query
    assert by["missing"].detail == "missing 'graph'"
    assert by["down"].reply is None and by["prose"].reply.text == ANSWERS["prose"]
    counters = trace.stage("dyn").counters
    assert counters["fallbacks"] == 6 and counters["repairs"] == 1
    assert {k: v for k, v in counters.items() if k.startswith("fallback.")} == {
        "fallback.unparseable": 1, "fallback.invalid": 2, "fallback.empty_reply": 1,
        "fallback.truncated": 1, "fallback.llm_failed": 1}
    assert counters["llm_failed"] == 1  # the client's own count of the failed request
    events = [e.to_dict() for e in trace.events if e.kind == "fallback"]
    assert len(events) == 6
    outside = next(e for e in events if e["query_id"] == "q-outside")
    assert outside == {"stage": "dyn", "event": "fallback", "query_id": "q-outside",
                       "reason": "invalid", "detail": "a weight outside [0, 1]: "
                                                      "(1.5, 0.3, 0.2)",
                       "reply": ANSWERS["outside"], "value": ["rule", "outside"]}
    json.dumps([e.to_dict() for e in trace.events])  # events stay serialisable
    [repair] = [e.to_dict() for e in trace.events if e.kind == "repair"]
    assert repair["query_id"] == "q-repair" and "renormalised" in repair["detail"]
    # one request per item, with the contract's decoding parameters and no schema
    assert len(llm.requests) == len(ANSWERS)
    assert all(r["max_tokens"] == 48 and "json_schema" not in r for r in llm.requests)


def test_run_step_batches_through_the_client_concurrency_limit():
    llm = ScriptedLLM({f"q{i}": "1. a question here" for i in range(8)}, delay=0.05)
    client = LLMClient(llm, cache=False, max_concurrency=3)
    results = run_step(client, "multi_query", [{"n": 2, "query": f"q{i}"} for i in range(8)],
                       fallback=lambda item: [], stage="mq")
    assert [r.value for r in results] == [["a question here"]] * 8
    assert llm.peak == 3


def test_run_step_parse_override_overrides_and_structured_flag(tmp_path):
    llm = ScriptedLLM({"a": '{"dense": 0.2, "sparse": 0.3, "graph": 0.5}'})
    client, trace = LLMClient(llm, cache=tmp_path / "c.sqlite"), Trace()
    seen = []

    def parse(reply: LLMReply, item: Any) -> str:
        seen.append(item["query"])
        return reply.text.upper()

    [r] = run_step(client, "modality_weights", [{"query": "a"}], parse=parse,
                   fallback=lambda item: None, trace=trace, stage="s", structured=True,
                   max_tokens=20)
    assert r.ok and r.value.startswith('{"DENSE"') and seen == ["a"]
    assert llm.requests[0]["max_tokens"] == 20
    assert llm.requests[0]["json_schema"]["title"] == "modality_weights"
    # a second run is answered from the cache, under a key that includes the schema
    run_step(client, "modality_weights", [{"query": "a"}], parse=parse,
             fallback=lambda item: None, trace=trace, stage="s", structured=True,
             max_tokens=20)
    assert len(llm.requests) == 1 and trace.stage("s").counters["llm_cache_hits"] == 1
    run_step(client, "modality_weights", [{"query": "a"}], parse=parse,
             fallback=lambda item: None, stage="s", max_tokens=20)
    assert len(llm.requests) == 2  # without the schema: another request


def test_run_step_checks_before_calling():
    llm = ScriptedLLM({})
    client = LLMClient(llm, cache=False)
    with pytest.raises(KeyError, match=r"\{query\}"):
        run_step(client, "modality_weights", [{"text": "x"}], fallback=lambda i: 0, stage="s")
    with pytest.raises(ValueError, match="2 query ids for 1 items"):
        run_step(client, "modality_weights", [{"query": "x"}], fallback=lambda i: 0,
                 stage="s", query_ids=["a", "b"])
    assert run_step(client, "modality_weights", [], fallback=lambda i: 0, stage="s") == []
    assert llm.requests == []


def test_cache_key_changes_only_with_a_schema():
    args = ("b", "m", user("hi"))
    kw = {"max_tokens": 5, "temperature": 0.0, "stop": None, "logprobs": 0}
    # the key of a schema-less call is what it was before json_schema existed
    assert cache_key(*args, **kw) == cache_key(*args, **kw, json_schema=None) == (
        "1778b210a39d814efc1687239a781d6c58ad05da95f98a4ff41cf09cfd4077eb")
    schema = {"type": "object"}
    assert cache_key(*args, **kw, json_schema=schema) != cache_key(*args, **kw)
    assert cache_key(*args, **kw, json_schema=schema) != cache_key(
        *args, **kw, json_schema={"type": "array"})


class FakeServer:
    """Stands in for ``xllamacpp.Server``: records the request dict."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        return {"choices": [{"message": {"content": '{"dense": 1}'},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def test_embedded_backend_sends_json_schema(monkeypatch, tmp_path):
    server = FakeServer()
    monkeypatch.setattr(embedded, "_server", lambda *a: server)
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 16)
    llm = embedded.LlamaCppLLM(str(gguf))
    schema = load_contract("modality_weights").params(structured=True)["json_schema"]
    reply = llm.chat(user("weights?"), ChatParams(max_tokens=8, json_schema=schema))
    assert reply.text == '{"dense": 1}'
    assert server.requests[0]["json_schema"] == schema
    llm.chat(user("weights?"), ChatParams(max_tokens=8))
    assert "json_schema" not in server.requests[1] and "response_format" not in \
        server.requests[1]


def test_openai_backend_sends_response_format(fake_openai, tmp_path):
    from intentrank.llm.openai_http import OpenAICompatibleLLM

    url, script = fake_openai(reply='{"ranking": [2, 1]}')
    bodies = script.bodies
    client = LLMClient(OpenAICompatibleLLM(url, "fake"), cache=ReplyCache(tmp_path / "c.sqlite"))
    contract = load_contract("listwise")
    items = [{"n": 2, "query": "lift", "passages": "[1] a\n[2] b"}]
    [r] = run_step(client, contract, items, parse=lambda reply, v: contract.parse(
        reply.text, n=v["n"]), fallback=lambda v: list(range(v["n"])), stage="lw",
        structured=True)
    assert r.ok and r.value == [1, 0]
    schema = dict(contract.schema or {})
    assert bodies[0]["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "listwise", "schema": schema}}
    assert bodies[0]["max_tokens"] == 96
    run_step(client, contract, items, fallback=lambda v: None, stage="lw")
    assert "response_format" not in bodies[1]
