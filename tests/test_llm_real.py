"""The real embedded Qwen2.5-Coder-0.5B on a handful of prompts (loaded once per module).

One thread: on shared CPUs llama.cpp's two-thread barriers stall when a thread is preempted.
"""

from __future__ import annotations

import pytest

from intentrank.llm.base import ChatParams, user
from intentrank.llm.client import LLMClient
from intentrank.llm.embedded import LlamaCppLLM
from intentrank.llm.parsing import parse_json_array, parse_numbered_list
from intentrank.rerank.judge import LLMJudge
from intentrank.types import Query, Ranking, ScoredDoc, Trace

pytestmark = pytest.mark.slow

PASSAGES = {
    "c1": "heat transfer in the hypersonic laminar boundary layer. measurements of surface heat "
          "transfer rates on a flat plate at mach 7 are compared with boundary layer theory.",
    "c2": "fatigue strength of riveted aluminium alloy joints under repeated loading in "
          "aircraft wing structures.",
    "c3": "a recipe for baking sourdough bread with a long cold fermentation.",
}


class Texts:
    def doc_text(self, doc_id: str) -> str:
        return PASSAGES[doc_id]


@pytest.fixture(scope="module")
def llm() -> LlamaCppLLM:
    model = LlamaCppLLM(n_threads=1)
    model.load()
    return model


@pytest.fixture()
def client(llm, tmp_path) -> LLMClient:
    return LLMClient(llm, cache=tmp_path / "llm.sqlite")


def test_follow_up_questions_parse_into_a_list(client):
    prompt = ("A user searched for: boundary layer transition on a flat plate.\n"
              "Write 3 short follow-up questions the user might ask next.\n"
              "Answer only with a numbered list, one question per line.")
    trace = Trace()
    reply = client.chat(user(prompt), max_tokens=80, trace=trace)
    parsed = parse_numbered_list(reply.text)
    assert parsed.ok and len(parsed.value) >= 1, reply.text
    assert reply.prompt_tokens > 20 and 0 < reply.completion_tokens <= 80
    c = trace.stage("llm").counters
    assert c["llm_calls"] == 1 and c["completion_tokens"] == reply.completion_tokens
    again = client.chat(user(prompt), max_tokens=80, trace=trace)  # cache hit: no model call
    assert again.cached and again.text == reply.text and c["llm_calls"] == 1
    assert c["llm_cache_hits"] == 1


def test_json_array_prompt(client):
    prompt = ("Give three search keywords for the query 'heat transfer in hypersonic flow'.\n"
              'Answer only with a JSON array of strings, like ["a", "b", "c"].')
    reply = client.chat(user(prompt), max_tokens=40)
    parsed = parse_json_array(reply.text)
    assert parsed.ok and parsed.value and all(isinstance(x, str) for x in parsed.value), reply.text


def test_logprobs_of_the_first_token(llm):
    reply = llm.chat(user("Is water wet? Answer yes or no."), ChatParams(max_tokens=1, logprobs=5))
    assert 1 <= len(reply.top_logprobs) <= 5
    assert {t.strip().lower() for t in reply.top_logprobs} & {"yes", "no"}
    assert all(lp <= 0 for lp in reply.top_logprobs.values())


def test_judge_prefers_the_relevant_passage(llm):
    judge = LLMJudge(Texts(), LLMClient(llm, cache=None), top_k=3)
    prev = Ranking(Query("q", "hypersonic boundary layer heat transfer"),
                   [ScoredDoc(d, 1.0) for d in ("c3", "c2", "c1")])
    trace = Trace()
    out = judge([prev], trace)[0]
    scores = {d.doc_id: d.stage_scores["llm_judge"] for d in out.docs}
    assert all(0.0 <= s <= 1.0 for s in scores.values())
    assert scores["c1"] > scores["c3"], scores  # 0.5B separates weakly: ~0.39 vs ~0.34
    assert out.doc_ids == sorted(scores, key=lambda d: -scores[d])
    c = trace.stage("llm_judge").counters
    assert c["llm_calls"] == 3 and "fallbacks" not in c and "parsed_yes_no" not in c


def test_followup_predictor_with_the_paper_prompt(client):
    """The CoT + few-shot follow-up prompt on the real model parses into M clean questions."""
    from intentrank.query.followups import FollowUpPredictor, parse_followups

    query = Query("q1", "boundary layer transition on a flat plate at high mach number")
    trace = Trace()
    stage = FollowUpPredictor(client, m=2)
    out = stage([Ranking(query)], trace)[0]
    followups = out.query.derived_of("followup")
    assert 1 <= len(followups) <= 2, followups
    assert all(f.strip() and f.lower() != query.text for f in followups)
    assert len(set(followups)) == len(followups)
    assert trace.stage("followups").counters.get("fallbacks", 0) == 0
    # the reasoning above the answer header is never taken for a question
    reply = client.chat(stage.messages(query.text), max_tokens=stage.max_tokens)
    assert parse_followups(reply.text, query.text, 2)[0] == followups
    assert not any(f.lower().startswith(("breakdown", "missing perspectives")) for f in followups)


def test_json_schema_constrains_the_embedded_model(client):
    """With the contract's schema, llama.cpp's grammar forces the shape: one JSON object with
    exactly the three numeric weights (their sum is not part of a JSON schema)."""
    from intentrank.llm.parsing import read_json_object
    from intentrank.llm.step import run_step

    trace = Trace()
    items = [{"query": "ALDH1 expression is associated with poorer prognosis in breast cancer."}]
    [free] = run_step(client, "modality_weights", items, fallback=lambda v: None, trace=trace,
                      stage="free")
    [constrained] = run_step(client, "modality_weights", items, fallback=lambda v: None,
                             trace=trace, stage="schema", structured=True)
    assert constrained.ok, constrained.reply.text
    obj = constrained.value
    assert set(obj) == {"dense", "sparse", "graph"}, constrained.reply.text
    assert all(isinstance(w, int | float) and 0 <= w <= 1 for w in obj.values())
    text = constrained.reply.text.strip()
    assert text.startswith("{") and text.endswith("}")  # no fence, no prose
    assert read_json_object(text) == obj
    # the same messages, another request: the schema is part of the reply-cache key
    assert trace.stage("free").counters["llm_calls"] == 1
    assert trace.stage("schema").counters["llm_calls"] == 1


def test_answer_cites_the_given_passages_and_the_judge_scores_on_scale(llm):
    from intentrank.answer.generate import AnswerGenerator
    from intentrank.eval.answer_judge import JudgeItem, judge_answers

    client = LLMClient(llm, cache=None)
    ranking = Ranking(Query("q", "how are hypersonic heat transfer rates measured"),
                      [ScoredDoc(d, 1.0) for d in ("c1", "c2", "c3")])
    trace = Trace()
    answer = AnswerGenerator(client, Texts(), top_k=3, max_words=40)([ranking], trace)[0] \
        .query.answer
    assert answer.sources == ("c1", "c2", "c3") and answer.text
    assert set(answer.citations) <= {1, 2, 3}  # checked against the three given
    reference = "Surface heat transfer rates are measured on a flat plate at Mach 7."
    judged = judge_answers(client, [
        JudgeItem("q", ranking.query.text, reference, (PASSAGES["c1"],), a)
        for a in (reference, answer.text, "")], trace)
    assert judged[2].relevance == 0 and judged[2].fallback == "empty_answer"
    for j in judged[:2]:  # on the scales, or a counted fallback
        assert j.relevance in (-1, 0, 1, 2) or j.fallback
        assert j.faithfulness in (-1, 0, 1) or j.fallback
    assert trace.stage("answer_judge").counters.get("fallbacks", 0) == \
        sum(j.relevance is None for j in judged)
