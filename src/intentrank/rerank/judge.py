"""An LLM relevance judge used as a pointwise reranker: score = P(yes | query, passage)."""

from __future__ import annotations

import math
from typing import Any

from intentrank.core.params import check_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.base import LLM, LLMReply, Message
from intentrank.llm.client import LLMClient, load_llm
from intentrank.llm.parsing import parse_yes_no
from intentrank.rerank.base import rerank_head
from intentrank.types import Ranking, Trace

SYSTEM = "You judge search results. Answer with one word: yes or no."
PROMPT = ("Query: {query}\n\nPassage: {passage}\n\n"
          "Is this passage relevant to the query? Answer yes or no.")
TOP_LOGPROBS = 10


def p_yes(top_logprobs: dict[str, float]) -> float | None:
    """Softmax over the yes/no variants (case and space insensitive); None if neither appears."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, lp in top_logprobs.items():
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(lp)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def judge_messages(query: str, passage: str) -> list[Message]:
    """Query first, so prompts for one query share a prefix llama.cpp can reuse."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT.format(query=query, passage=passage)}]


class LLMJudge(Stage):
    """Rescore the top ``k`` candidates by P(yes); the rest keep their order below them.

    P(yes) comes from the first generated token's top logprobs when the backend gives them,
    else 1.0/0.0 from the parsed yes/no, else 0.5 (counted as ``fallbacks``). Ties keep the
    incoming order. Candidates below ``k`` get scores -1, -2, ... in their incoming order.
    """

    def __init__(
        self,
        index: Any,
        llm: LLMClient | LLM | str = "embedded",
        k: int = 20,
        max_passage_chars: int = 1000,
        name: str = "llm_judge",
    ) -> None:
        k = check_int("k", k)
        max_passage_chars = check_int("max_passage_chars", max_passage_chars)
        self.index = index
        if isinstance(llm, str):
            llm = load_llm(llm)
        self.llm = llm if isinstance(llm, LLMClient) else LLMClient(llm)
        self.k = k
        self.max_passage_chars = max_passage_chars
        self.name = name

    def describe(self) -> str:
        return f"{self.name}({self.llm.name}, k={self.k})"

    def passage(self, doc_id: str) -> str:
        text = " ".join(self.index.doc_text(doc_id).split())
        return text[: self.max_passage_chars]

    def score(self, reply: LLMReply | None, trace: Trace) -> float:
        """P(yes) of one reply, with the fallbacks counted."""
        if reply is not None:
            if reply.top_logprobs and (p := p_yes(reply.top_logprobs)) is not None:
                return p
            parsed = parse_yes_no(reply.text)
            if parsed.ok:
                trace.count(self.name, "parsed_yes_no")
                return 1.0 if parsed.value else 0.0
            trace.log(self.name, "fallback", reason=parsed.reason, text=reply.text[:80])
        trace.count(self.name, "fallbacks")
        return 0.5

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        out = []
        for ranking in rankings:
            head = ranking.docs[: self.k]
            batch = [judge_messages(ranking.query.text, self.passage(d.doc_id)) for d in head]
            replies = self.llm.chat_many(batch, on_error="none", trace=trace, stage=self.name,
                                         max_tokens=2, logprobs=TOP_LOGPROBS)
            scores: dict[str, float] = {}
            for i, (doc, reply) in enumerate(zip(head, replies, strict=True)):
                scores[doc.doc_id] = self.score(reply, trace) - i * 1e-9  # ties: keep order
            out.append(rerank_head(ranking, scores, self.name))
        return out


@register_stage("llm_judge")
def _llm_judge(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``llm_judge``: LLMJudge over the index with the shared LLM."""
    return LLMJudge(ctx.require_index("llm_judge"), ctx.llm(), **params)
