"""The answer judge: scales, fallbacks, empty answers, known-quality answers and agreement."""

from __future__ import annotations

import math

import pytest

from intentrank.eval.answer_judge import (
    JudgeItem,
    Judgement,
    contradict,
    judge_agreement,
    judge_answers,
    known_quality_answers,
    parse_judgement,
    summarize,
)
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.types import Trace


class ByAnswer:
    """Judges by the system answer in the prompt."""

    name = "fake:judge"

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies, self.prompts = replies, []

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        text = messages[-1]["content"]
        self.prompts.append(text)
        answer = text.split("System answer: ", 1)[1].split("\n", 1)[0]
        return LLMReply(self.replies[answer])


def test_scores_must_be_on_their_scales():
    assert parse_judgement('{"relevance": 2, "faithfulness": -1}') == Judgement(2, -1)
    assert parse_judgement('ok {"relevance": 1.0, "faithfulness": 0}') == Judgement(1, 0)
    for bad in ('{"relevance": 3, "faithfulness": 1}', '{"relevance": 2, "faithfulness": 2}',
                '{"relevance": "high", "faithfulness": 1}', '{"relevance": true, '
                '"faithfulness": 1}', '{"relevance": 2}', "two"):
        with pytest.raises(ValueError):
            parse_judgement(bad)


def test_judge_answers_counts_fallbacks_and_skips_empty_answers():
    fake = ByAnswer({"good": '{"relevance": 2, "faithfulness": 1}',
                     "off": '{"relevance": 5, "faithfulness": 1}',
                     "bad": '{"relevance": -1, "faithfulness": -1}'})
    items = [JudgeItem(str(i), "q?", "ref", ("doc one", "doc two"), a)
             for i, a in enumerate(["good", "off", "  ", "bad"])]
    trace = Trace()
    out = judge_answers(LLMClient(fake, cache=None), items, trace)
    assert out[0] == Judgement(2, 1) and out[3] == Judgement(-1, -1)
    assert out[1] == Judgement(None, None, "unparseable")
    assert out[2] == Judgement(0, None, "empty_answer")
    assert len(fake.prompts) == 3 and "[2] doc two" in fake.prompts[0]
    c = trace.stage("answer_judge").counters
    assert c["fallbacks"] == 1 and c["judged"] == 3 and c["empty_answers"] == 1
    s = summarize(out)
    assert (s.relevance, s.n_relevance) == (pytest.approx(1 / 3), 3)
    assert (s.faithfulness, s.n_faithfulness) == (0.0, 2)
    assert s.fallbacks == {"unparseable": 1, "empty_answer": 1}


def test_contradiction_by_rule():
    assert contradict("The flow is laminar.") == "The flow is not laminar."
    assert contradict("It does not converge.") == "It does converge."
    assert contradict("It can't fly.") == "It can fly."
    assert contradict("Heat rises.") == "It is not true that heat rises."
    known = known_quality_answers("Drag is low.", "Other.")
    assert known["contradicted"] == "Drag is not low." and known["empty"] == ""


def test_agreement_counts_ordered_pairs_and_ties():
    perfect = {"reference": Judgement(2, 1), "wrong_document": Judgement(-1, -1),
               "contradicted": Judgement(-1, 0), "abstention": Judgement(0, 0),
               "empty": Judgement(0, None)}
    a = judge_agreement({"q1": perfect})
    # pairs with different expected relevance: ref vs 4 others, 2 zeros x 2 minus-ones = 8
    assert a.pairs == 8 and a.agreement == 1.0
    flat = {k: Judgement(1, 1) for k in perfect}
    assert judge_agreement({"q1": flat}).agreement == 0.5  # all ties
    inverted = {**perfect, "reference": Judgement(-1, -1), "wrong_document": Judgement(2, 1)}
    b = judge_agreement({"q1": perfect, "q2": inverted})
    assert b.pairs == 16 and b.mean_relevance["reference"] == 0.5
    none = judge_agreement({"q": {"reference": Judgement(None, None, "x")}})
    assert none.pairs == 0 and math.isnan(none.agreement) and none.fallbacks == 1
