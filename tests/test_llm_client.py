"""LLMClient with a fake backend: cache, retries, failures, concurrency and trace counts."""

from __future__ import annotations

import threading
import time

import pytest

from intentrank.errors import ModelError
from intentrank.llm.base import (
    ChatParams,
    LLMParameterError,
    LLMReply,
    Message,
    TransientError,
    user,
)
from intentrank.llm.cache import ReplyCache, cache_key
from intentrank.llm.client import LLMClient, load_llm, make_backend
from intentrank.rerank.judge import LLMJudge, p_yes
from intentrank.types import Query, Ranking, ScoredDoc, Trace


class FakeLLM:
    """Echoes the last message; fails the first ``fail`` calls with ``error`` (tests only)."""

    name = "fake:echo"
    model = "echo"

    def __init__(self, fail: int = 0, error: Exception | None = None, delay: float = 0.0,
                 reply: str | None = None, logprobs: dict[str, float] | None = None) -> None:
        self.fail, self.error, self.delay = fail, error or TransientError("overloaded"), delay
        self.reply, self.logprobs = reply, logprobs or {}
        self.calls = 0
        self.active = self.peak = 0
        self._lock = threading.Lock()

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        with self._lock:
            self.calls += 1
            self.active += 1
            self.peak = max(self.peak, self.active)
            failing = self.calls <= self.fail
        try:
            time.sleep(self.delay)
            if failing:
                raise self.error
            text = self.reply if self.reply is not None else messages[-1]["content"].upper()
            return LLMReply(text, prompt_tokens=7, completion_tokens=3,
                            top_logprobs=dict(self.logprobs) if params.logprobs else {})
        finally:
            with self._lock:
                self.active -= 1


@pytest.fixture()
def cache(tmp_path) -> ReplyCache:
    return ReplyCache(tmp_path / "llm.sqlite")


def test_cache_hit_makes_no_call_and_persists(cache, tmp_path):
    llm, trace = FakeLLM(), Trace()
    client = LLMClient(llm, cache=cache)
    first = client.chat(user("hello"), trace=trace, stage="s")
    again = client.chat(user("hello"), trace=trace, stage="s")
    assert llm.calls == 1 and first.text == again.text == "HELLO"
    assert not first.cached and again.cached and again.seconds == 0.0
    assert (again.prompt_tokens, again.completion_tokens) == (7, 3)
    client.chat(user("hello"), max_tokens=5, trace=trace, stage="s")  # other params: a miss
    assert llm.calls == 2
    counters = trace.stage("s").counters
    assert counters["llm_calls"] == 2 and counters["llm_cache_hits"] == 1
    assert counters["prompt_tokens"] == 14 and counters["completion_tokens"] == 6
    assert counters["llm_seconds"] >= 0
    reopened = LLMClient(FakeLLM(), cache=tmp_path / "llm.sqlite")  # persisted on disk
    assert reopened.chat(user("hello")).cached and reopened.llm.calls == 0


def test_cache_key_covers_backend_model_messages_and_params():
    base = dict(max_tokens=8, temperature=0.0, stop=None, logprobs=0)
    k = cache_key("b", "m", user("q"), **base)
    assert k == cache_key("b", "m", [{"content": "q", "role": "user"}], **base)
    assert k != cache_key("b2", "m", user("q"), **base)
    assert k != cache_key("b", "m2", user("q"), **base)
    assert k != cache_key("b", "m", user("q", system="s"), **base)
    assert k != cache_key("b", "m", user("q"), **{**base, "stop": ["\n"]})
    assert k != cache_key("b", "m", user("q"), **{**base, "logprobs": 5})


def test_chat_params_are_checked_before_any_call(cache):
    assert ChatParams(temperature=0, stop=["\n"]).as_dict() == {
        "max_tokens": 256, "temperature": 0.0, "stop": ("\n",), "logprobs": 0}
    assert ChatParams(stop=[]).stop is None and "json_schema" in ChatParams(
        json_schema={"type": "object"}).as_dict()
    llm = FakeLLM()
    client = LLMClient(llm, cache=cache)
    bad = [{"max_tokens": 0}, {"max_tokens": 2.5}, {"temperature": -1.0},
           {"temperature": float("nan")}, {"logprobs": -1}, {"logprobs": True}, {"stop": "\n"},
           {"stop": [1]}, {"json_schema": "object"}]
    for params in bad:
        with pytest.raises(LLMParameterError):
            client.chat(user("x"), **params)
        with pytest.raises(LLMParameterError):  # not a None from a failed call
            client.complete_or_none(user("x"), **params)
        with pytest.raises(LLMParameterError):
            client.chat_many([user("x"), user("y")], on_error="none", **params)
    assert llm.calls == 0


def test_retries_with_exponential_backoff_then_success(cache):
    llm, waits, trace = FakeLLM(fail=2), [], Trace()
    client = LLMClient(llm, cache=cache, retries=2, backoff=0.5, sleep=waits.append)
    assert client.chat(user("x"), trace=trace).text == "X"
    assert llm.calls == 3 and waits == [0.5, 1.0]
    c = trace.stage("llm").counters
    assert c["llm_calls"] == 3 and c["llm_errors"] == 2 and c["llm_retries"] == 2
    assert [e.kind for e in trace.events] == ["llm_retryable_error"] * 2


def test_all_attempts_fail_raises_and_complete_or_none_logs(cache):
    llm, trace = FakeLLM(fail=99), Trace()
    client = LLMClient(llm, cache=cache, retries=1, sleep=lambda s: None)
    with pytest.raises(ModelError, match="failed after 2 attempt"):
        client.chat(user("x"))
    assert client.complete_or_none(user("y"), trace=trace, stage="rw") is None
    assert trace.stage("rw").counters["llm_failed"] == 1
    assert trace.events[-1].kind == "llm_failed"
    assert "overloaded" in trace.events[-1].details["reason"]
    assert len(cache) == 0  # failures are not cached


def test_final_errors_are_not_retried(cache):
    llm, trace = FakeLLM(fail=99, error=ModelError("bad key")), Trace()
    client = LLMClient(llm, cache=cache, retries=3, sleep=lambda s: None)
    with pytest.raises(ModelError, match="bad key"):
        client.chat(user("x"), trace=trace)
    assert llm.calls == 1 and trace.stage("llm").counters["llm_errors"] == 1
    bug = LLMClient(FakeLLM(fail=99, error=KeyError("choices")), cache=None, retries=3)
    with pytest.raises(ModelError, match="KeyError"):
        bug.chat(user("x"))
    assert bug.llm.calls == 1


def test_chat_many_preserves_order_and_respects_concurrency(cache):
    llm, trace = FakeLLM(delay=0.05), Trace()
    client = LLMClient(llm, cache=cache, max_concurrency=2)
    batch = [user(f"q{i}") for i in range(8)]
    replies = client.chat_many(batch, trace=trace)
    assert [r.text for r in replies] == [f"Q{i}" for i in range(8)]
    assert llm.peak == 2
    assert trace.stage("llm").counters["llm_calls"] == 8
    assert trace.stage("llm").counters["prompt_tokens"] == 56


def test_chat_many_on_error(cache):
    client = LLMClient(FakeLLM(fail=99), cache=cache, retries=0, max_concurrency=3)
    trace = Trace()
    assert client.chat_many([user("a"), user("b")], on_error="none", trace=trace) == [None, None]
    assert trace.stage("llm").counters["llm_failed"] == 2
    with pytest.raises(ModelError):
        client.chat_many([user("a"), user("b")])


def test_timeout_is_handed_to_backends_that_have_one():
    llm = FakeLLM()
    llm.timeout = 60.0
    LLMClient(llm, cache=None, timeout=2.5)
    assert llm.timeout == 2.5


def test_specs(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    http = make_backend("openai:qwen2.5:0.5b@http://127.0.0.1:11434/v1")
    assert http.name == "openai:qwen2.5:0.5b@http://127.0.0.1:11434/v1"
    assert http.model == "qwen2.5:0.5b"
    with pytest.raises(ModelError, match=r"set \$OPENAI_API_KEY"):
        make_backend("openai:gpt-4o-mini@https://api.example.com/v1")
    with pytest.raises(ModelError, match="unknown LLM model 'nope'"):
        load_llm("llamacpp:nope", cache=None)
    embedded = make_backend("embedded")  # loads lazily: nothing assembled or loaded yet
    assert embedded.name == "llamacpp:qwen2.5-coder-0.5b"


class FakeIndex:
    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts

    def doc_text(self, doc_id: str) -> str:
        return self.texts[doc_id]


def test_p_yes_softmax_over_variants():
    assert p_yes({"Yes": 0.0, "No": 0.0}) == pytest.approx(0.5)
    assert p_yes({"Yes": -0.1, " yes": -3.0, "No": -2.0, "I": -0.5}) == pytest.approx(
        (0.904837 + 0.049787) / (0.904837 + 0.049787 + 0.135335), rel=1e-4)
    assert p_yes({"The": -0.1}) is None


def test_judge_scores_top_k_and_falls_back(cache):
    index = FakeIndex({"a": "alpha", "b": "beta", "c": "gamma", "d": "delta"})
    prev = Ranking(Query("q1", "greek"), [ScoredDoc(d, 4 - i, {"bm25": 4 - i})
                                          for i, d in enumerate("abcd")])

    class Answers(FakeLLM):
        def chat(self, messages, params):
            passage = messages[-1]["content"]
            if "gamma" in passage:
                return LLMReply("Yes", top_logprobs={"Yes": -0.05, "No": -3.0})
            if "beta" in passage:
                return LLMReply("Yes, it is.")  # no logprobs: parsed
            return LLMReply("Perhaps")  # neither: 0.5 fallback

    trace = Trace()
    judge = LLMJudge(FakeIndex(index.texts), LLMClient(Answers(), cache=cache), top_k=3)
    out = judge([prev], trace)[0]
    assert out.doc_ids == ["b", "c", "a", "d"]
    scores = {d.doc_id: d.stage_scores for d in out.docs}
    assert scores["c"]["llm_judge"] == pytest.approx(0.9503, abs=1e-3)
    assert scores["b"]["llm_judge"] == pytest.approx(1.0)
    assert scores["a"]["llm_judge"] == pytest.approx(0.5)
    assert "llm_judge" not in scores["d"] and out.docs[-1].score < out.docs[-2].score  # unjudged
    assert scores["a"]["bm25"] == 4  # earlier stage scores kept
    c = trace.stage("llm_judge").counters
    assert c["fallbacks"] == 1 and c["parsed_yes_no"] == 1 and c["llm_calls"] == 3


def test_cache_hit_counts_the_seconds_the_reply_took_when_generated(cache):
    llm, trace = FakeLLM(delay=0.05), Trace()
    client = LLMClient(llm, cache=cache)
    first = client.chat(user("slow"), trace=Trace(), stage="s")
    client.chat(user("slow"), trace=trace, stage="s")
    counters = trace.stage("s").counters
    assert counters["llm_cache_hits"] == 1
    assert counters["llm_cached_seconds"] == pytest.approx(first.seconds) and first.seconds >= 0.05
