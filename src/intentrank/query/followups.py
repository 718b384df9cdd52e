"""Follow-up question prediction (FUQ, step 1): an LLM writes the M questions a user is
likely to ask next; they go onto the query's derived-text stack as kind ``followup``."""

from __future__ import annotations

import re
from typing import Any

from intentrank.core.params import check_int
from intentrank.core.protocols import LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.base import Message
from intentrank.llm.parsing import ParseError, parse_numbered_list
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.types import Ranking, Trace

_ANSWER = re.compile(r"follow[- ]?up questions?\s*:?", re.I)


def parse_followups(reply: str, query: str, m: int) -> tuple[list[str], str]:
    """Clean follow-up questions from a reply, and the reason when there are none.

    Only the part after the last "Follow-up questions:" header is read (the reasoning above
    it may be numbered too); blank, duplicate and echoed lines (the query itself) are dropped.
    """
    parts = _ANSWER.split(reply)
    answer = parts[-1] if len(parts) > 1 else reply
    parsed = parse_numbered_list(answer, exclude=(query,))
    items = [q for q in parsed.value if not _ANSWER.fullmatch(q.strip())]
    if parsed.reason == "no numbered lines":  # free text: only lines that are questions
        items = [q for q in items if q.rstrip().endswith("?")]
    items = items[:m]
    return items, ("" if items else parsed.reason or "no usable question")


class FollowUpPredictor(Stage):
    """Predict ``m`` follow-up questions per query with the paper's CoT + few-shot prompt.

    A reply with no usable question leaves the query alone (the reranker then uses the
    query in place of follow-ups); it is counted as ``fallbacks`` (by kind) and logged with
    the reason. ``prompt``: a shipped contract name or a .yaml contract file with the slots
    ``{m}`` and ``{query}``; ``max_tokens`` defaults to the contract's.
    """

    def __init__(self, llm: LLMLike, m: int = 2, max_tokens: int | None = None,
                 prompt: str = "followups", name: str = "followups") -> None:
        m = check_int("m (follow-ups per query)", m)
        self.contract = load_contract(prompt)
        max_tokens = check_int("max_tokens", self.contract.max_tokens if max_tokens is None
                               else max_tokens)
        self.llm, self.m, self.max_tokens, self.name = llm, m, max_tokens, name

    def messages(self, query: str) -> list[Message]:
        return self.contract.messages(m=self.m, query=query.strip())

    def _parse(self, text: str, query: str) -> list[str]:
        items, reason = parse_followups(text, query, self.m)
        if not items:
            raise ParseError(reason)
        return items

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        queries, path_id = [r.query for r in rankings], trace.path_of(self)
        results = run_step(
            self.llm, self.contract, [{"m": self.m, "query": q.text.strip()} for q in queries],
            parse=lambda reply, item: self._parse(reply.text, item["query"]),
            fallback=lambda item: [], trace=trace, stage=path_id,
            query_ids=[q.id for q in queries], max_tokens=self.max_tokens)
        out = []
        for ranking, result in zip(rankings, results, strict=True):
            trace.count(path_id, "followups", len(result.value))
            out.append(Ranking(ranking.query.with_derived("followup", result.value, path_id),
                               ranking.docs))
        return out

    def describe(self) -> str:
        return self.described(self.llm.name, m=self.m, max_tokens=self.max_tokens,
                              prompt=self.contract.name)


@register_stage("followups")
def _followups(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``followups: {m: 2, max_tokens: 160}``: LLM-predicted follow-up questions."""
    return FollowUpPredictor(ctx.step_llm("followups", params), **params)
