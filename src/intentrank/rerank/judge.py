"""An LLM relevance judge used as a pointwise reranker: score = P(yes | query, passage).

The prompt is the ``judge`` contract (system message, query first so prompts for one query
share a prefix llama.cpp can reuse, 2 tokens, top-10 logprobs); all candidates of a run go
through one batched LLM step (:func:`intentrank.llm.step.run_step`)."""

from __future__ import annotations

import math
from typing import Any

from intentrank.core.params import check_int
from intentrank.core.protocols import IndexLike, LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.base import LLMReply
from intentrank.llm.parsing import read_yes_no
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.rerank.base import rerank_head
from intentrank.types import Ranking, Trace

FALLBACK_SCORE = 0.5


def p_yes(top_logprobs: dict[str, float]) -> float | None:
    """Softmax over the yes/no variants (case and space insensitive); None if neither appears."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, lp in top_logprobs.items():
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(lp)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


class LLMJudge(Stage):
    """Rescore the top ``top_k`` candidates by P(yes); the rest keep their order below them.

    P(yes) comes from the first generated token's top logprobs when the backend gives them,
    else 1.0/0.0 from the parsed yes/no (counted as ``parsed_yes_no``), else 0.5 (a counted
    fallback, by kind). Ties keep the incoming order.
    """

    def __init__(
        self,
        index: IndexLike,
        llm: LLMLike,
        top_k: int = 20,
        max_passage_chars: int = 1000,
        name: str = "llm_judge",
    ) -> None:
        self.index, self.llm, self.name = index, llm, name
        self.top_k = check_int("top_k", top_k)
        self.max_passage_chars = check_int("max_passage_chars", max_passage_chars)
        self.contract = load_contract("judge")

    def describe(self) -> str:
        return self.described(self.llm.name, top_k=self.top_k,
                              max_passage_chars=self.max_passage_chars)

    def passage(self, doc_id: str) -> str:
        text = " ".join(self.index.doc_text(doc_id).split())
        return text[: self.max_passage_chars]

    def score(self, reply: LLMReply, trace: Trace) -> float:
        """P(yes) of one reply; ValueError (the step's fallback) when it has neither."""
        if reply.top_logprobs and (p := p_yes(reply.top_logprobs)) is not None:
            return p
        answer = read_yes_no(reply.text)  # ParseError: neither yes nor no
        trace.count(trace.path_of(self), "parsed_yes_no")
        return 1.0 if answer else 0.0

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        heads = [ranking.docs[: self.top_k] for ranking in rankings]
        pairs = [(ranking.query, doc.doc_id) for ranking, head in zip(rankings, heads,
                                                                      strict=True)
                 for doc in head]
        results = run_step(
            self.llm, self.contract,
            [{"query": q.text, "passage": self.passage(doc_id)} for q, doc_id in pairs],
            parse=lambda reply, item: self.score(reply, trace),
            fallback=lambda item: FALLBACK_SCORE, trace=trace, stage=trace.path_of(self),
            query_ids=[q.id for q, _ in pairs])
        scores = iter(r.value for r in results)
        out = []
        for ranking, head in zip(rankings, heads, strict=True):
            # ties keep the incoming order
            by_doc = {doc.doc_id: next(scores) - i * 1e-9 for i, doc in enumerate(head)}
            out.append(rerank_head(ranking, by_doc, trace.path_of(self)))
        return out


@register_stage("llm_judge", renamed={"k": "top_k"})
def _llm_judge(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``llm_judge``: LLMJudge over the index with the shared LLM."""
    llm = ctx.step_llm("relevance_judge", params)
    return LLMJudge(ctx.require_index("llm_judge"), llm, **params)
