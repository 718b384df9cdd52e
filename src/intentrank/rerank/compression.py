"""Contextual Compression (the LangChain LLMChainExtractor baseline): for each of the top
``top_k`` candidates the LLM copies out the relevant sentences or answers NO_OUTPUT;
candidates with nothing relevant are dropped, the others keep their order. Candidates below
``top_k`` are cut, as the baseline hands only the compressed top ``top_k`` on.

The ``compress`` prompt contract runs as one batched LLM step for all candidates of a run;
a failed call keeps its candidate (a counted fallback)."""

from __future__ import annotations

from typing import Any

from intentrank.core.params import check_int
from intentrank.core.protocols import IndexLike, LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.types import Ranking, Trace

NO_OUTPUT = "NO_OUTPUT"


class ContextualCompression(Stage):
    """Keep the top ``top_k`` candidates the LLM finds a relevant part in; drop the rest."""

    def __init__(self, index: IndexLike, llm: LLMLike, top_k: int = 5,
                 max_passage_chars: int = 800, max_tokens: int | None = None,
                 name: str = "compression") -> None:
        top_k = check_int("top_k", top_k)
        max_passage_chars = check_int("max_passage_chars", max_passage_chars)
        self.contract = load_contract("compress")
        max_tokens = check_int("max_tokens", self.contract.max_tokens if max_tokens is None
                               else max_tokens)
        self.index, self.llm, self.top_k, self.name = index, llm, top_k, name
        self.max_passage_chars, self.max_tokens = max_passage_chars, max_tokens

    @staticmethod
    def relevant(reply_text: str) -> bool:
        """Whether a reply keeps its candidate: some text, and not NO_OUTPUT."""
        text = reply_text.strip()
        return bool(text) and NO_OUTPUT not in text.upper().replace(" ", "_")

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        pairs = [(r.query, d.doc_id) for r in rankings for d in r.docs[: self.top_k]]
        path_id = trace.path_of(self)
        results = run_step(
            self.llm, self.contract,
            [{"query": q.text.strip(),
              "passage": self.index.doc_text(doc_id)[: self.max_passage_chars]}
             for q, doc_id in pairs],
            parse=lambda reply, item: self.relevant(reply.text),
            fallback=lambda item: True,  # no answer: keep the candidate rather than lose it
            trace=trace, stage=path_id, query_ids=[q.id for q, _ in pairs],
            max_tokens=self.max_tokens)
        keep = iter(r.value for r in results)
        out = []
        for r in rankings:
            kept = [d for d in r.docs[: self.top_k] if next(keep)]
            trace.count(path_id, "dropped", min(len(r.docs), self.top_k) - len(kept))
            out.append(Ranking(r.query, kept))
        return out

    def describe(self) -> str:
        return self.described(self.llm.name, top_k=self.top_k,
                              max_passage_chars=self.max_passage_chars, max_tokens=self.max_tokens)


@register_stage("compression", renamed={"k": "top_k"})
def _compression(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``compression``: ContextualCompression over the index with the shared LLM."""
    llm = ctx.step_llm("compression", params)
    return ContextualCompression(ctx.require_index("compression"), llm, **params)
