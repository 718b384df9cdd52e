"""Contextual Compression (the LangChain LLMChainExtractor baseline): for each of the top
``k`` candidates the LLM copies out the relevant sentences or answers NO_OUTPUT; candidates
with nothing relevant are dropped, the others keep their order. Candidates below ``k`` are
cut, as the baseline hands only the compressed top ``k`` on."""

from __future__ import annotations

from typing import Any

from intentrank.core.params import check_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.index.store import Index
from intentrank.llm.base import user
from intentrank.llm.prompts import load_prompt, render
from intentrank.types import Ranking, Trace

NO_OUTPUT = "NO_OUTPUT"


class ContextualCompression(Stage):
    """Keep the top ``k`` candidates the LLM finds a relevant part in; drop the rest."""

    def __init__(self, index: Index, llm: Any, k: int = 5, max_passage_chars: int = 800,
                 max_tokens: int = 96, name: str = "compression") -> None:
        k = check_int("k", k)
        max_passage_chars = check_int("max_passage_chars", max_passage_chars)
        max_tokens = check_int("max_tokens", max_tokens)
        self.index, self.llm, self.k, self.name = index, llm, k, name
        self.max_passage_chars, self.max_tokens = max_passage_chars, max_tokens
        self.template = load_prompt("compress")

    def keep(self, query: str, doc_id: str, trace: Trace) -> bool:
        passage = self.index.doc_text(doc_id)[: self.max_passage_chars]
        reply = self.llm.complete_or_none(
            user(render(self.template, query=query.strip(), passage=passage)),
            max_tokens=self.max_tokens, trace=trace, stage=self.name)
        if reply is None:  # no answer: keep the candidate rather than lose it
            trace.count(self.name, "fallbacks")
            return True
        text = reply.text.strip()
        return bool(text) and NO_OUTPUT not in text.upper().replace(" ", "_")

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        out = []
        for r in rankings:
            kept = [d for d in r.docs[: self.k] if self.keep(r.query.text, d.doc_id, trace)]
            trace.count(self.name, "dropped", min(len(r.docs), self.k) - len(kept))
            out.append(Ranking(r.query, kept))
        return out

    def describe(self) -> str:
        return f"{self.name}(k={self.k})"


@register_stage("compression")
def _compression(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``compression``: ContextualCompression over the index with the shared LLM."""
    return ContextualCompression(ctx.require_index("compression"), ctx.llm(), **params)
