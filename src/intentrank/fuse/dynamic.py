"""Per-query modality weights assigned by an LLM (cascaded hybrid retrieval, method 3).

The LLM answers ``{"dense": w_d, "sparse": w_s, "graph": w_g}`` for each query. A reply that
does not parse, has a weight outside [0, 1], lacks a modality or does not sum to 1 (within
``tolerance``) falls back to the rule table: a finance/numeric pattern gives 0.30 / 0.55 /
0.15, anything else 0.55 / 0.30 / 0.15. Every fallback is counted and logged with the query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from intentrank.core.params import check_int, check_number
from intentrank.core.registry import BuildContext, register_fuser
from intentrank.core.stage import Stage
from intentrank.fuse.weighted import WeightedFusion, weighted_minmax
from intentrank.llm.base import user
from intentrank.llm.parsing import parse_json_object
from intentrank.llm.prompts import load_prompt, render
from intentrank.types import Ranking, Trace

MODALITIES = ("dense", "sparse", "graph")
NUMERIC_WEIGHTS = (0.30, 0.55, 0.15)
DEFAULT_WEIGHTS = (0.55, 0.30, 0.15)
_FINANCE = re.compile(
    r"\d|%|\$|€|£|\b(revenue|profit|earnings|stock|shares?|dividend|price|tax|interest|"
    r"loan|mortgage|invest\w*|fund|bond|inflation|rate|cost|budget|financ\w*|fiscal|quarter|"
    r"q[1-4]|eps|roi|ratio|percent\w*)\b", re.I)


def rule_weights(query: str) -> tuple[float, float, float]:
    """The fallback table: sparse-heavy for finance/numeric queries, dense-heavy otherwise."""
    return NUMERIC_WEIGHTS if _FINANCE.search(query) else DEFAULT_WEIGHTS


def validate_weights(obj: dict[str, Any], tolerance: float = 0.01) -> tuple[float, ...]:
    """Weights in ``MODALITIES`` order, or ``ValueError`` / ``KeyError`` saying what is wrong."""
    ws = []
    for m in MODALITIES:
        if m not in obj:
            raise KeyError(f"missing {m!r}")
        w = obj[m]
        if isinstance(w, bool) or not isinstance(w, int | float):
            raise ValueError(f"{m} is not a number: {w!r}")
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"{m}={w} is outside [0, 1]")
        ws.append(float(w))
    if abs(sum(ws) - 1.0) > tolerance:
        raise ValueError(f"weights sum to {sum(ws):.3f}, not 1")
    return tuple(ws)


@register_fuser
class DynamicWeightedFusion(WeightedFusion):
    """Weighted min-max fusion of the dense, sparse and graph branches with LLM weights."""

    method = "dynamic"

    def __init__(self, branches: Sequence[Stage], llm: Any, tolerance: float = 0.01,
                 max_tokens: int = 48) -> None:
        super().__init__(branches)
        if len(self.branches) != len(MODALITIES):
            raise ValueError(f"dynamic weights need {len(MODALITIES)} branches "
                             f"({', '.join(MODALITIES)}), got {len(self.branches)}")
        tolerance = check_number("tolerance", tolerance, minimum=0, maximum=1)
        max_tokens = check_int("max_tokens", max_tokens)
        self.llm, self.tolerance, self.max_tokens = llm, tolerance, max_tokens
        self.template = load_prompt("modality_weights")

    @classmethod
    def from_config(cls, branches: Sequence[Stage], ctx: BuildContext,
                    **params: Any) -> DynamicWeightedFusion:
        return cls(branches, ctx.llm(), **params)

    def weights_for(self, query: str, query_id: str, trace: Trace) -> tuple[float, ...]:
        reply = self.llm.complete_or_none(user(render(self.template, query=query.strip())),
                                          max_tokens=self.max_tokens, trace=trace,
                                          stage=self.name)
        fallback = rule_weights(query)
        parsed = parse_json_object(reply.text if reply else "", fallback,
                                   lambda o: validate_weights(o, self.tolerance))
        if not parsed.ok:
            trace.count(self.name, "fallbacks")
            trace.log(self.name, "fallback", query_id=query_id, query=query,
                      reason=parsed.reason if reply else "llm call failed",
                      reply=(reply.text[:200] if reply else ""), weights=list(fallback))
        trace.log(self.name, "weights", query_id=query_id, weights=list(parsed.value),
                  source="llm" if parsed.ok else "rule")
        return tuple(parsed.value)

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        q = rankings[0].query
        weights = self.weights_for(q.text, q.id, trace)
        return weighted_minmax([{d.doc_id: d.score for d in r.docs} for r in rankings], weights)
