"""Sub-aspect exploration (RichRAG's explorer, method 4): an LLM lists up to ``n`` distinct
sub-aspects of a broad query; they go onto the query's derived-text stack as kind
``aspect``, tagged with the stage's path id, for ``multi_faceted`` and ``coverage``.

A reply with no usable aspect (nothing after dropping blanks, duplicates and echoes of the
query) leaves the query with no aspects (a counted fallback); the later stages then use the
query alone. One aspect is a valid answer (a question with one part).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from intentrank.core.params import ParameterError, check_bool, check_int
from intentrank.core.protocols import LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.parsing import (
    ParseError,
    normalise,
    parse_numbered_list,
    read_json_object,
)
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.types import Query, Ranking, Trace

KIND = "aspect"


def parse_aspects(reply: str, query: str, n: int) -> list[str]:
    """Distinct aspects from a reply: ``{"aspects": [...]}`` (structured output) or a
    numbered list; blank, duplicate (case and punctuation ignored) and echoed (the query
    itself) items are dropped and at most ``n`` kept. ParseError when none is left."""
    items: list[str] = []
    if reply.lstrip().startswith("{"):
        try:
            obj = read_json_object(reply)
        except ParseError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("aspects"), list):
            items = [a for a in obj["aspects"] if isinstance(a, str)]
    out = distinct(items or parse_numbered_list(reply).value, n, exclude=(query,))
    if not out:
        raise ParseError("no usable aspect (blank, duplicate or the query itself)")
    return out


def distinct(items: Iterable[Any], limit: int, exclude: Iterable[str] = ()) -> list[str]:
    """The first ``limit`` distinct strings of ``items`` (case and punctuation ignored, quotes
    stripped), leaving out non-strings, blanks and ``exclude``."""
    seen, out = {normalise(e) for e in exclude}, []
    for item in items:
        key = normalise(item) if isinstance(item, str) else ""
        if len(key) >= 3 and key not in seen:
            seen.add(key)
            out.append(item.strip().strip("\"'").strip())
    return out[:limit]


def aspects_of(query: Query) -> list[str]:
    """The query's aspects, or the query alone when it has none (the fallback)."""
    return query.derived_of(KIND) or [query.text]


class AspectExplorer(Stage):
    """List up to ``n`` sub-aspects of each query with the LLM (one batched step).

    ``structured`` sends the contract's JSON schema (``{"aspects": [...]}``) for constrained
    decoding; ``max_tokens`` defaults to the contract's. Counters: ``aspects`` (how many
    were pushed), ``fallbacks``."""

    def __init__(self, llm: LLMLike, n: int = 4, max_tokens: int | None = None,
                 structured: bool = False, prompt: str = "aspects",
                 name: str = "aspects") -> None:
        self.n = check_int("n (aspects per query)", n)
        check_bool("structured", structured)
        self.contract = load_contract(prompt)
        if structured and self.contract.schema is None:
            raise ParameterError(f"structured output needs a schema in prompt {prompt!r}")
        self.max_tokens = check_int("max_tokens", self.contract.max_tokens
                                    if max_tokens is None else max_tokens)
        self.llm, self.structured, self.name = llm, structured, name

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        queries, path_id = [r.query for r in rankings], trace.path_of(self)
        results = run_step(
            self.llm, self.contract, [{"n": self.n, "query": q.text.strip()} for q in queries],
            parse=lambda reply, item: parse_aspects(reply.text, item["query"], self.n),
            fallback=lambda item: [], trace=trace, stage=path_id,
            query_ids=[q.id for q in queries], structured=self.structured,
            max_tokens=self.max_tokens)
        out = []
        for ranking, result in zip(rankings, results, strict=True):
            trace.count(path_id, "aspects", len(result.value))
            out.append(Ranking(ranking.query.with_derived(KIND, result.value, path_id),
                               ranking.docs))
        return out

    def describe(self) -> str:
        return self.described(self.llm.name, n=self.n, max_tokens=self.max_tokens,
                              prompt=self.contract.name, structured=self.structured or None)


@register_stage("aspects")
def _aspects(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``aspects: {n: 4, max_tokens: 96, structured: false}``: LLM-listed sub-aspects."""
    return AspectExplorer(ctx.step_llm("aspects", params), **params)
