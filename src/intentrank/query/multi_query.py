"""Multi-Query retrieval (the LangChain MultiQueryRetriever baseline): an LLM writes ``n``
variants of the query, the retriever runs for the query and each variant, and the lists are
fused by RRF (rrf_k=60)."""

from __future__ import annotations

from typing import Any

from intentrank.core.params import ParameterError, check_int
from intentrank.core.protocols import LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.fuse.rrf import check_rrf_k, rrf
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.types import Query, Ranking, Trace


class MultiQueryRetriever(Stage):
    """Retrieve with the query and ``n`` LLM-written variants, fused by RRF.

    A reply with no usable variant retrieves with the query alone (a counted fallback)."""

    def __init__(self, llm: LLMLike, retriever: Stage, n: int = 3, rrf_k: float = 60,
                 max_tokens: int | None = None, name: str = "multi_query") -> None:
        if not isinstance(retriever, Stage):
            raise ParameterError(f"retriever must be a stage, got {retriever!r}")
        n, rrf_k = check_int("n (variants per query)", n), check_rrf_k(rrf_k)
        self.contract = load_contract("multi_query")
        max_tokens = check_int("max_tokens", self.contract.max_tokens if max_tokens is None
                               else max_tokens)
        self.llm, self.retriever, self.n, self.rrf_k, self.name = llm, retriever, n, rrf_k, name
        self.max_tokens = max_tokens

    def variants(self, queries: list[Query], trace: Trace) -> list[list[str]]:
        """The LLM's variants of each query (one batched step; [] is the fallback)."""
        results = run_step(
            self.llm, self.contract, [{"n": self.n, "query": q.text.strip()} for q in queries],
            parse=lambda reply, item: self.contract.parse(reply.text, limit=self.n,
                                                          exclude=(item["query"],)),
            fallback=lambda item: [], trace=trace, stage=trace.path_of(self),
            query_ids=[q.id for q in queries], max_tokens=self.max_tokens)
        return [r.value for r in results]

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        found, path_id = self.variants([r.query for r in rankings], trace), trace.path_of(self)
        queries = [r.query.with_derived("variant", v, path_id)
                   for r, v in zip(rankings, found, strict=True)]
        expanded = [Ranking(Query(f"{q.id}\x1f{i}", t, filter=q.filter)) for q in queries
                    for i, t in enumerate([q.text, *q.derived_of("variant")])]
        lists: dict[str, list[list[str]]] = {}
        for r in self.retriever(expanded, trace):
            lists.setdefault(r.query.id.rsplit("\x1f", 1)[0], []).append(r.doc_ids)
        return [Ranking.from_scores(q, rrf(lists[q.id], rrf_k=self.rrf_k), path_id)
                for q in queries]

    def describe(self) -> str:
        return self.described(self.llm.name, self.retriever.describe(), n=self.n,
                              rrf_k=self.rrf_k, max_tokens=self.max_tokens)


@register_stage("multi_query", renamed={"k": "rrf_k"})
def _multi_query(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``multi_query: {retriever: <node>, n: 3, rrf_k: 60}``: LLM query variants, RRF-fused."""
    from intentrank.core.config import build_pipeline

    retriever = build_pipeline(params.pop("retriever", "dense"), ctx, "multi_query.retriever")
    return MultiQueryRetriever(ctx.step_llm("multi_query", params), retriever, **params)
