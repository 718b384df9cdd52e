"""The LLM stages on run_step with fake LLMs: one batched step per run, typed fallbacks
counted by kind, structured output and the counted weight repair."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import FakeClock, Fixed, RecordingLLM

from intentrank.core.params import ParameterError
from intentrank.fuse.dynamic import (
    DEFAULT_WEIGHTS,
    NUMERIC_WEIGHTS,
    DynamicWeightedFusion,
    validate_weights,
)
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.llm.parsing import Repaired
from intentrank.query.followups import FollowUpPredictor
from intentrank.query.multi_query import MultiQueryRetriever
from intentrank.rerank.compression import ContextualCompression
from intentrank.rerank.judge import LLMJudge
from intentrank.rerank.listwise import ListwiseReranker
from intentrank.types import Query, Ranking, ScoredDoc, Trace


class ByQuery(RecordingLLM):
    """Answers with ``reply(last user message, params)``, 0.02 s per request."""

    name, model = "fake:stages", "fake"

    def __init__(self, reply) -> None:
        super().__init__(delay=0.02)
        self.reply = reply

    def answer(self, messages: list[Message], params: ChatParams) -> LLMReply:
        return LLMReply(self.reply(messages[-1]["content"], params.as_dict()))


class Texts:
    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts

    def doc_text(self, doc_id: str) -> str:
        return self.texts[doc_id]


def queries(*texts: str) -> list[Ranking]:
    return [Ranking(Query(f"q{i}", t)) for i, t in enumerate(texts)]


BRANCHES = [Fixed("dense", {"a": 1.0, "b": 0.0}), Fixed("sparse", {"a": 0.0, "b": 1.0}),
            Fixed("graph", {"a": 0.5, "b": 0.5})]


def weights_reply(text: str, params: dict[str, Any]) -> str:
    query = text.rsplit("Query: ", 1)[-1].strip()
    return {"sums to one": '{"dense": 0.2, "sparse": 0.7, "graph": 0.1}',
            "sums to 0.9": '{"dense": 0.5, "sparse": 0.3, "graph": 0.1}',
            "prose": "dense, mostly"}[query]


def test_dynamic_weights_one_batched_step_typed_fallbacks():
    llm = ByQuery(weights_reply)
    fusion = DynamicWeightedFusion(BRANCHES, LLMClient(llm, cache=False, max_concurrency=3))
    trace = Trace()
    out = fusion(queries("sums to one", "sums to 0.9", "prose"), trace)
    assert len(out) == 3 and llm.peak >= 2  # the three requests ran as one concurrent batch
    assert all("json_schema" not in r and r["max_tokens"] == 48 for r in llm.requests)
    c = trace.stage("dynamic").counters
    assert c["fallbacks"] == 2 and c["fallback.invalid"] == 1 and c["fallback.unparseable"] == 1
    assert "repairs" not in c
    weights = {e.query_id: e.details for e in trace.events if e.kind == "weights"}
    assert weights["q0"]["weights"] == [0.2, 0.7, 0.1] and weights["q0"]["source"] == "llm"
    assert weights["q1"]["weights"] == list(NUMERIC_WEIGHTS)  # "0.9": a numeric query
    assert weights["q2"]["weights"] == list(DEFAULT_WEIGHTS) and weights["q2"]["source"] == "rule"
    # min-max per list (graph's constant list normalises to 1): b = 0.7 + 0.1, a = 0.2 + 0.1
    assert out[0].docs[0].doc_id == "b" and out[0].docs[0].score == pytest.approx(0.8)
    assert out[0].docs[1].score == pytest.approx(0.3)


def test_dynamic_weights_structured_and_counted_sum_repair():
    llm = ByQuery(weights_reply)
    fusion = DynamicWeightedFusion(BRANCHES, LLMClient(llm, cache=False), structured=True,
                                   repair_range=[0.8, 1.2])
    trace = Trace()
    fusion(queries("sums to one", "sums to 0.9", "prose"), trace)
    assert all(r["json_schema"]["title"] == "modality_weights" for r in llm.requests)
    c = trace.stage("dynamic").counters
    assert c["fallbacks"] == 1 and c["repairs"] == 1
    weights = {e.query_id: e.details for e in trace.events if e.kind == "weights"}
    assert weights["q1"]["weights"] == pytest.approx([0.5 / 0.9, 0.3 / 0.9, 0.1 / 0.9])
    assert weights["q1"]["repaired"] is True and weights["q1"]["source"] == "llm"
    assert "structured" in fusion.describe() and "repair_range=[0.8, 1.2]" in fusion.describe()


def test_weight_validation_and_options():
    assert validate_weights({"dense": 0.5, "sparse": 0.3, "graph": 0.2}) == (0.5, 0.3, 0.2)
    with pytest.raises(ValueError, match="sum to 0.900"):
        validate_weights({"dense": 0.5, "sparse": 0.3, "graph": 0.1})
    fixed = validate_weights({"dense": 0.5, "sparse": 0.3, "graph": 0.1}, 0.01, (0.8, 1.2))
    assert isinstance(fixed, Repaired) and sum(fixed.value) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sum to 0.600"):
        validate_weights({"dense": 0.2, "sparse": 0.2, "graph": 0.2}, 0.01, (0.8, 1.2))
    for bad in ([1.2, 1.5], [0.5], "0.8,1.2", [0, 1]):
        with pytest.raises(ParameterError, match="repair_range"):
            DynamicWeightedFusion(BRANCHES, None, repair_range=bad)
    with pytest.raises(ParameterError, match="structured"):
        DynamicWeightedFusion(BRANCHES, None, structured="yes")


def test_followups_and_multi_query_fall_back_by_kind():
    def reply(text: str, params: dict[str, Any]) -> str:
        query = text.rsplit("Query: ", 1)[-1].strip()
        if "follow-up" in text:
            return {"tides": "Follow-up questions:\n1. Why are there two tides a day?",
                    "waves": "I cannot help."}[query]
        return {"tides": "1. ocean tide causes\n2. moon gravity and tides",
                "waves": ""}[query]

    llm = LLMClient(ByQuery(reply), cache=False)
    trace = Trace()
    out = FollowUpPredictor(llm, m=2)(queries("tides", "waves"), trace)
    assert out[0].query.derived_of("followup") == ["Why are there two tides a day?"]
    assert out[1].query.derived_of("followup") == []
    c = trace.stage("followups").counters
    assert c["fallbacks"] == 1 and c["fallback.unparseable"] == 1 and c["followups"] == 1
    mq = MultiQueryRetriever(llm, Fixed("dense", {"a": 1.0}), n=2)
    out = mq(queries("tides", "waves"), trace)
    assert out[0].query.derived_of("variant") == ["ocean tide causes", "moon gravity and tides"]
    assert out[1].query.derived_of("variant") == [] and out[1].doc_ids == ["a"]
    assert trace.stage("multi_query").counters["fallback.empty_reply"] == 1


def test_multi_query_seconds_leave_out_the_retriever(monkeypatch):
    # the retriever's time is its own trace entry, not also multi_query's (whose time is its
    # LLM step and its fusion), so the stages of a trace sum to the pipeline's time
    clock = FakeClock()
    monkeypatch.setattr("intentrank.types.time.perf_counter", clock)
    llm = LLMClient(ByQuery(lambda text, params: "1. moon gravity"), cache=False)
    trace = Trace()
    out = MultiQueryRetriever(llm, Fixed("dense", {"a": 1.0}, clock), n=1)(queries("tides"),
                                                                           trace)
    assert out[0].doc_ids == ["a"]
    assert trace.stage("multi_query/dense").seconds == 5.0
    assert trace.stage("multi_query").seconds == 0.0
    assert trace.stage("multi_query").calls == 1


def abc_rankings(*texts: str) -> list[Ranking]:
    """One ranking of documents a, b, c (in that order) per query text."""
    return [Ranking(Query(f"q{i}", t), [ScoredDoc(d, 3.0 - j) for j, d in enumerate("abc")])
            for i, t in enumerate(texts)]


def test_listwise_windows_batched_across_queries_with_repairs():
    texts = Texts({d: f"passage {d}" for d in "abcde"})

    def reply(text: str, params: dict[str, Any]) -> str:
        if "Query: reverse" in text:
            return "Passage 3 is best. [3, 2, 1]" if "[3]" in text else "[2, 1]"
        if "Query: partial" in text:
            return '{"ranking": [2]}' if params.get("json_schema") else "[2]"
        return "no idea"

    fake = ByQuery(reply)
    lw = ListwiseReranker(texts, LLMClient(fake, cache=False), top_k=3)
    ranked = abc_rankings("reverse", "partial", "unknown")
    trace = Trace()
    out = lw(ranked, trace)
    assert [r.doc_ids for r in out] == [["c", "b", "a"], ["b", "a", "c"], ["a", "b", "c"]]
    c = trace.stage("listwise").counters
    assert c["repairs"] == 1 and c["fallbacks"] == 1 and c["fallback.unparseable"] == 1
    assert len(fake.requests) == 3
    structured = ListwiseReranker(texts, LLMClient(fake, cache=False), top_k=3, structured=True)
    out = structured(ranked[1:2], Trace())
    assert out[0].doc_ids == ["b", "a", "c"]
    assert fake.requests[-1]["json_schema"]["properties"]["ranking"]["type"] == "array"


def test_listwise_first_orders_by_the_first_tokens_probabilities():
    texts = Texts({d: f"passage {d}" for d in "abcde"})
    logprobs = {"clear": {"2": -0.1, " 3": -2.0, "²": -3.0, "1": -4.0, "The": -5.0},
                "partial": {"3": -0.2, "x": -1.0},
                "none": {"Passage": -0.1, "The": -1.0}}

    class Logprobs(RecordingLLM):
        def answer(self, messages: list[Message], params: ChatParams) -> LLMReply:
            query = messages[-1]["content"].split("Query: ")[1].split("\n")[0]
            assert params.max_tokens == 1 and params.logprobs == 20
            return LLMReply("x", top_logprobs=logprobs[query])

    lw = ListwiseReranker(texts, LLMClient(Logprobs(), cache=False), top_k=3, mode="first")
    trace = Trace()
    out = lw(abc_rankings("clear", "partial", "none"), trace)
    assert [r.doc_ids for r in out] == [["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    c = trace.stage("listwise").counters
    assert c["repairs"] == 1 and c["fallbacks"] == 1 and c["fallback.unparseable"] == 1
    assert "mode=first" in lw.describe()
    with pytest.raises(ParameterError, match="unknown mode 'best'"):
        ListwiseReranker(texts, LLMClient(Logprobs(), cache=False), mode="best")
    with pytest.raises(ParameterError, match="structured output is for listwise mode"):
        ListwiseReranker(texts, LLMClient(Logprobs(), cache=False), mode="first",
                         structured=True)


def test_compression_keeps_on_failure_and_drops_no_output():
    texts = Texts({"a": "relevant text", "b": "nothing here", "c": "broken"})

    def reply(text: str, params: dict[str, Any]) -> str:
        if "broken" in text:
            raise RuntimeError("backend bug")
        return "NO_OUTPUT" if "nothing here" in text else "relevant text"

    comp = ContextualCompression(texts, LLMClient(ByQuery(reply), cache=False, retries=0),
                                 top_k=3)
    ranked = [Ranking(Query("q0", "what?"), [ScoredDoc(d, 3.0 - j) for j, d in enumerate("abc")])]
    trace = Trace()
    out = comp(ranked, trace)
    assert out[0].doc_ids == ["a", "c"]
    c = trace.stage("compression").counters
    assert c["dropped"] == 1 and c["fallbacks"] == 1 and c["fallback.llm_failed"] == 1


def test_judge_batches_all_queries_with_its_contract():
    texts = Texts({"a": "alpha", "b": "beta"})

    def reply(text: str, params: dict[str, Any]) -> str:
        assert params["max_tokens"] == 2 and params["logprobs"] == 10
        return "Yes" if "alpha" in text else "hmm"

    fake = ByQuery(reply)
    judge = LLMJudge(texts, LLMClient(fake, cache=False, max_concurrency=4), top_k=2)
    ranked = [Ranking(Query(f"q{i}", "greek"), [ScoredDoc("b", 2.0), ScoredDoc("a", 1.0)])
              for i in range(3)]
    trace = Trace()
    out = judge(ranked, trace)
    assert all(r.doc_ids == ["a", "b"] for r in out) and fake.peak >= 2
    assert fake.requests[0]["messages"][0]["role"] == "system"
    c = trace.stage("llm_judge").counters
    assert c["parsed_yes_no"] == 3 and c["fallbacks"] == 3 and c["fallback.unparseable"] == 3


@pytest.mark.slow
def test_real_listwise_first_puts_the_relevant_passage_first(data_dir):
    """The embedded 1.5B, single-token mode, on SciFact query 3 with its judged document
    last among three: every number is among the first token's alternatives, and the judged
    document moves to the top (measured: P("3") = 0.75; it also picks the judged document
    placed first or second; the 0.5B picks passage 1 whatever its order)."""
    from test_label_free import OTHER, PRION, RELEVANT, SCIFACT_CLAIM, scifact_docs

    from intentrank.llm.client import load_llm

    texts = Texts(scifact_docs(data_dir, {RELEVANT, OTHER, PRION}))
    lw = ListwiseReranker(texts, load_llm("qwen2.5-coder-1.5b"), top_k=3, mode="first",
                          max_passage_chars=300)
    ranked = [Ranking(Query("3", SCIFACT_CLAIM), [ScoredDoc(d, 3.0 - j) for j, d in
                                                   enumerate([OTHER, PRION, RELEVANT])])]
    trace = Trace()
    out = lw(ranked, trace)
    c = trace.stage("listwise").counters
    assert c.get("fallbacks", 0) == 0 and c.get("repairs", 0) == 0
    assert out[0].doc_ids[0] == RELEVANT


@pytest.mark.slow
def test_real_support_check_of_the_support_role_rejects_a_wrong_answer(data_dir):
    """The support role's model (the embedded 1.5B, `generate --llm-checks`) on a real
    Cranfield abstract: its own answer is supported, another document's is not (measured on
    17 generated questions: 1 of 34 wrong answers called supported; the 0.5B 31)."""
    import json

    from intentrank.llm.client import load_llm
    from intentrank.llm.roles import role_spec
    from intentrank.llm.step import run_step

    doc = json.loads((data_dir / "cranfield" / "corpus.jsonl").open().readline())["text"]
    question = "What was the experimental study of the wing in a propeller slipstream for?"
    answers = ["To determine the spanwise distribution of the lift increase due to slipstream.",
               "To measure the heat transfer to a blunt body in hypersonic flow."]
    llm = load_llm(role_spec("embedded", "support"))
    out = run_step(llm, "check_support", [{"documents": f"Document:\n{doc}", "question": question,
                                           "answer": a} for a in answers],
                   fallback=lambda v: None, stage="check_support", structured=True)
    assert [r.value.get("supported") if isinstance(r.value, dict) else None for r in out] == \
        [True, False]
