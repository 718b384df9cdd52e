"""LLM listwise reranking (RankGPT style): the LLM orders numbered passages and answers with a
JSON array of their numbers, best first.

By default only the top ``depth`` = 5 candidates are shown, in one window (the cascaded hybrid
paper's setting). With ``window`` < ``depth`` the list is reranked by a sliding window from the
bottom up (RankGPT: each window moves its best passages up into the next one). An invalid or
partial ordering is repaired: valid, unique numbers keep the LLM's order, missing passages
follow in their previous order; each repair and each unusable reply is counted.
"""

from __future__ import annotations

from typing import Any

from intentrank.core.params import check_int, check_optional_int
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.index.store import Index
from intentrank.llm.base import user
from intentrank.llm.parsing import parse_json_array
from intentrank.llm.prompts import load_prompt, render
from intentrank.rerank.base import rerank_head
from intentrank.types import Ranking, Trace


def repair_order(answer: list[Any], n: int) -> tuple[list[int], bool]:
    """A permutation of ``range(n)`` from a 1-based answer; ``True`` if it needed repair."""
    seen: list[int] = []
    for item in answer:
        try:
            i = int(item) - 1
            exact = 0 <= i < n and float(item) == i + 1
        except (TypeError, ValueError, OverflowError):  # inf, nan, "two", [1], {...}
            continue
        if exact and i not in seen:
            seen.append(i)
    missing = [i for i in range(n) if i not in seen]
    return seen + missing, bool(missing) or len(answer) != n


class ListwiseReranker(Stage):
    """Reorder the top ``depth`` candidates with an LLM (single or sliding window)."""

    def __init__(self, index: Index, llm: Any, depth: int = 5, window: int | None = None,
                 step: int | None = None, max_passage_chars: int = 600, max_tokens: int = 96,
                 name: str = "listwise") -> None:
        depth = check_int("depth", depth, minimum=2)
        window = check_optional_int("window", window, minimum=2)
        step = check_optional_int("step", step)
        max_passage_chars = check_int("max_passage_chars", max_passage_chars)
        max_tokens = check_int("max_tokens", max_tokens)
        self.index, self.llm, self.depth, self.name = index, llm, depth, name
        self.window = min(window or depth, depth)
        self.step = step or max(1, self.window // 2)
        self.max_passage_chars, self.max_tokens = max_passage_chars, max_tokens
        self.template = load_prompt("listwise")

    def messages(self, query: str, passages: list[str]) -> list[dict[str, str]]:
        numbered = "\n".join(f"[{i}] {p[: self.max_passage_chars].strip()}"
                             for i, p in enumerate(passages, 1))
        return user(render(self.template, n=len(passages), query=query.strip(),
                           passages=numbered))

    def _rank_window(self, query: str, ids: list[str], trace: Trace) -> list[str]:
        texts = [self.index.doc_text(d) for d in ids]
        reply = self.llm.complete_or_none(self.messages(query, texts),
                                          max_tokens=self.max_tokens, trace=trace,
                                          stage=self.name)
        parsed = parse_json_array(reply.text) if reply is not None else None
        if parsed is None or not parsed.ok:
            trace.count(self.name, "fallbacks")
            trace.log(self.name, "fallback", query=query,
                      reason=parsed.reason if parsed else "llm call failed")
            return ids
        order, repaired = repair_order(parsed.value, len(ids))
        if repaired:
            trace.count(self.name, "repairs")
            trace.log(self.name, "repair", query=query, answer=parsed.value[:20])
        return [ids[i] for i in order]

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        out = []
        for r in rankings:
            ids = r.doc_ids[: self.depth]
            if len(ids) < 2:
                out.append(r)
                continue
            start = max(0, len(ids) - self.window)
            while True:
                ids[start: start + self.window] = self._rank_window(
                    r.query.text, ids[start: start + self.window], trace)
                if start == 0:
                    break
                start = max(0, start - self.step)
            scores = {d: float(len(ids) - i) for i, d in enumerate(ids)}
            out.append(rerank_head(r, scores, self.name))
        return out

    def describe(self) -> str:
        return f"{self.name}(depth={self.depth}, window={self.window})"


@register_stage("listwise")
def _listwise(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``listwise``: ListwiseReranker over the index with the shared LLM."""
    return ListwiseReranker(ctx.require_index("listwise"), ctx.llm(), **params)
