"""LLM listwise reranking (RankGPT style): the LLM orders numbered passages and answers with a
JSON array of their numbers, best first.

By default only the top ``top_k`` = 5 candidates are shown, in one window (the cascaded hybrid
paper's setting). With ``window`` < ``top_k`` the list is reranked by a sliding window from the
bottom up (RankGPT: each window moves its best passages up into the next one). An invalid or
partial ordering is repaired: valid, unique numbers keep the LLM's order, missing passages
follow in their previous order; each repair and each unusable reply is counted (the
``listwise`` prompt contract, :func:`intentrank.llm.step.run_step`). The windows of all
queries at the same position go to the LLM as one batch.

``structured`` asks for JSON-schema constrained output, ``{"ranking": [3, 1, 2]}`` (off by
default).

``mode="first"`` is single-token listwise reranking (FIRST, Reddy et al. 2024): the LLM is
asked for the best passage's number only (``listwise_first`` contract, one output token), and
the window is ordered by the first token's log-probabilities over the numbers 1..n. One
forward pass over the prompt per window instead of decoding a whole permutation.
"""

from __future__ import annotations

from typing import Any

from intentrank.core.params import (
    ParameterError,
    check_bool,
    check_choice,
    check_int,
    check_optional_int,
)
from intentrank.core.protocols import IndexLike, LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.base import LLMReply
from intentrank.llm.parsing import Repaired, repair_order
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.rerank.base import rerank_head
from intentrank.types import Ranking, Trace

__all__ = ["ListwiseReranker", "first_token_order", "repair_order"]
MODES = {"permutation": "listwise", "first": "listwise_first"}  # mode -> prompt contract


def first_token_order(reply: LLMReply, n: int) -> list[int] | Repaired[list[int]]:
    """Passages 0..n-1 by the log-probability of their number (1..n) as the first output
    token, best first; numbers absent from the reply's top alternatives follow in their
    previous order (a :class:`Repaired` order). ValueError when none is there."""
    best: dict[int, float] = {}
    for token, logprob in reply.top_logprobs.items():
        label = token.strip()
        if label.isdecimal() and 1 <= int(label) <= n:  # not isdigit: int('²') fails
            i = int(label) - 1
            best[i] = max(logprob, best.get(i, float("-inf")))
    if not best:
        raise ValueError("no passage number among the first token's alternatives "
                         f"({', '.join(map(repr, list(reply.top_logprobs)[:5])) or 'none'})")
    order = sorted(best, key=lambda i: (-best[i], i))
    missing = [i for i in range(n) if i not in best]
    if missing:
        return Repaired(order + missing, f"passages {[i + 1 for i in missing]} not among the "
                                         f"first token's alternatives")
    return order


class ListwiseReranker(Stage):
    """Reorder the top ``top_k`` candidates with an LLM (single or sliding window)."""

    def __init__(self, index: IndexLike, llm: LLMLike, top_k: int = 5, window: int | None = None,
                 step: int | None = None, max_passage_chars: int = 600,
                 max_tokens: int | None = None, structured: bool = False,
                 mode: str = "permutation", name: str = "listwise") -> None:
        top_k = check_int("top_k", top_k, minimum=2)
        window = check_optional_int("window", window, minimum=2)
        step = check_optional_int("step", step)
        max_passage_chars = check_int("max_passage_chars", max_passage_chars)
        self.mode = check_choice("mode", mode, tuple(MODES))
        self.contract = load_contract(MODES[self.mode])
        max_tokens = check_int("max_tokens", self.contract.max_tokens if max_tokens is None
                               else max_tokens)
        check_bool("structured", structured)
        if structured and self.mode == "first":
            raise ParameterError("structured output is for listwise mode 'permutation'; mode "
                                 "'first' reads one token's probabilities")
        self.index, self.llm, self.top_k, self.name = index, llm, top_k, name
        self.window = min(window or top_k, top_k)
        self.step = step or max(1, self.window // 2)
        self.max_passage_chars, self.max_tokens = max_passage_chars, max_tokens
        self.structured = structured

    def _vars(self, query: str, passages: list[str]) -> dict[str, Any]:
        numbered = "\n".join(f"[{i}] {p[: self.max_passage_chars].strip()}"
                             for i, p in enumerate(passages, 1))
        return {"n": len(passages), "query": query.strip(), "passages": numbered}

    def _rank_windows(self, windows: list[tuple[str, str, list[str]]],
                      trace: Trace) -> list[list[str]]:
        """Each (query id, query, ids) window reordered; one batched LLM step."""
        results = run_step(
            self.llm, self.contract,
            [self._vars(query, [self.index.doc_text(d) for d in ids])
             for _, query, ids in windows],
            parse=self._parse,
            fallback=lambda item: list(range(item["n"])), trace=trace,
            stage=trace.path_of(self),
            query_ids=[qid for qid, _, _ in windows], structured=self.structured,
            max_tokens=self.max_tokens)
        return [[ids[i] for i in r.value] for (_, _, ids), r in zip(windows, results,
                                                                     strict=True)]

    def _parse(self, reply: LLMReply, item: dict[str, Any]) -> Any:
        if self.mode == "first":
            return first_token_order(reply, item["n"])
        return self.contract.parse(reply.text, n=item["n"])

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        heads = {i: r.doc_ids[: self.top_k] for i, r in enumerate(rankings)
                 if len(r.doc_ids[: self.top_k]) >= 2}
        starts = {i: max(0, len(ids) - self.window) for i, ids in heads.items()}
        while starts:  # every query's next window in one batch, bottom up
            order = list(starts)
            windows = [(rankings[i].query.id, rankings[i].query.text,
                        heads[i][starts[i]: starts[i] + self.window]) for i in order]
            for i, ranked in zip(order, self._rank_windows(windows, trace), strict=True):
                heads[i][starts[i]: starts[i] + self.window] = ranked
                if starts[i] == 0:
                    del starts[i]
                else:
                    starts[i] = max(0, starts[i] - self.step)
        out = []
        for i, r in enumerate(rankings):
            if i not in heads:
                out.append(r)
                continue
            ids = heads[i]
            scores = {d: float(len(ids) - rank) for rank, d in enumerate(ids)}
            out.append(rerank_head(r, scores, trace.path_of(self)))
        return out

    def describe(self) -> str:
        return self.described(self.llm.name, top_k=self.top_k, window=self.window,
                              step=self.step, max_passage_chars=self.max_passage_chars,
                              max_tokens=self.max_tokens, structured=self.structured or None,
                              mode=self.mode if self.mode != "permutation" else None)


@register_stage("listwise", renamed={"depth": "top_k"})
def _listwise(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``listwise``: ListwiseReranker over the index with the shared LLM."""
    llm = ctx.step_llm("listwise", params)
    return ListwiseReranker(ctx.require_index("listwise"), llm, **params)
