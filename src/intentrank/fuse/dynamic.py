"""Per-query modality weights assigned by an LLM (cascaded hybrid retrieval, method 3).

The LLM answers ``{"dense": w_d, "sparse": w_s, "graph": w_g}`` for each query (the
``modality_weights`` prompt contract; one batched LLM step for all queries of a run). A reply
that does not parse, has a weight outside [0, 1], lacks a modality or does not sum to 1
(within ``tolerance``) falls back to the rule table (:func:`rule_weights`), counted by kind
and logged with the query (:func:`intentrank.llm.step.run_step`).

Options: ``structured`` asks for JSON-schema constrained output (the contract's schema: three
numbers in [0, 1], all required, no other keys); ``repair_range`` (e.g. ``[0.8, 1.2]``)
renormalises weights whose sum lies in that range instead of falling back, counted as
``repairs``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from intentrank.core.params import ParameterError, check_bool, check_int, check_number
from intentrank.core.protocols import LLMLike
from intentrank.core.registry import BuildContext, register_fuser
from intentrank.core.stage import Stage
from intentrank.fuse.weighted import WeightedFusion, weighted_minmax
from intentrank.llm.parsing import Repaired
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.types import Query, Ranking, Trace

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


def validate_weights(
    obj: dict[str, Any], tolerance: float = 0.01,
    repair_range: Sequence[float] | None = None,
) -> tuple[float, ...] | Repaired[tuple[float, ...]]:
    """Weights in ``MODALITIES`` order, or ``ValueError`` / ``KeyError`` saying what is wrong.

    With ``repair_range`` = (lo, hi), weights whose sum is off 1 by more than ``tolerance``
    but lies in [lo, hi] are divided by their sum and returned as :class:`Repaired`."""
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
    total = sum(ws)
    if abs(total - 1.0) > tolerance:
        if repair_range is not None and repair_range[0] <= total <= repair_range[1]:
            return Repaired(tuple(w / total for w in ws),
                            f"weights summed to {total:.3f}; renormalised to 1")
        raise ValueError(f"weights sum to {total:.3f}, not 1")
    return tuple(ws)


def check_repair_range(value: Any) -> tuple[float, float] | None:
    """None, or (lo, hi) with 0 < lo <= 1 <= hi: the sums the repair renormalises."""
    if value is None:
        return None
    if isinstance(value, str) or not hasattr(value, "__len__") or len(value) != 2:
        raise ParameterError(f"repair_range must be two numbers [lo, hi], got {value!r}")
    return (check_number("repair_range low", value[0], above=0, maximum=1),
            check_number("repair_range high", value[1], minimum=1))


@register_fuser
class DynamicWeightedFusion(WeightedFusion):
    """Weighted min-max fusion of the dense, sparse and graph branches with LLM weights."""

    method = "dynamic"

    def __init__(self, branches: Sequence[Stage], llm: LLMLike, tolerance: float = 0.01,
                 max_tokens: int | None = None, structured: bool = False,
                 repair_range: Sequence[float] | None = None,
                 prompt: str = "modality_weights") -> None:
        super().__init__(branches)
        if len(self.branches) != len(MODALITIES):
            raise ValueError(f"dynamic weights need {len(MODALITIES)} branches "
                             f"({', '.join(MODALITIES)}), got {len(self.branches)}")
        tolerance = check_number("tolerance", tolerance, minimum=0, maximum=1)
        self.contract = load_contract(prompt)
        max_tokens = check_int("max_tokens", self.contract.max_tokens if max_tokens is None
                               else max_tokens)
        check_bool("structured", structured)
        if structured and self.contract.schema is None:
            raise ParameterError(f"structured output needs a schema in prompt {prompt!r}")
        self.llm, self.tolerance, self.max_tokens = llm, tolerance, max_tokens
        self.structured, self.repair_range = structured, check_repair_range(repair_range)
        self._ready: dict[tuple[str, str], tuple[float, ...]] = {}

    @classmethod
    def from_config(cls, branches: Sequence[Stage], ctx: BuildContext,
                    **params: Any) -> DynamicWeightedFusion:
        return cls(branches, ctx.step_llm("modality_weights", params), **params)

    def weights_batch(self, queries: Sequence[Query], trace: Trace) -> list[tuple[float, ...]]:
        """Weights for each query: one batched LLM step, fallbacks counted and logged."""
        path_id = trace.path_of(self)
        results = run_step(
            self.llm, self.contract, [{"query": q.text.strip()} for q in queries],
            validate=lambda obj, item: validate_weights(obj, self.tolerance, self.repair_range),
            fallback=lambda item: rule_weights(item["query"]),
            trace=trace, stage=path_id, query_ids=[q.id for q in queries],
            structured=self.structured, max_tokens=self.max_tokens)
        for q, r in zip(queries, results, strict=True):
            trace.log(path_id, "weights", query_id=q.id, weights=list(r.value),
                      source="llm" if r.ok else "rule", repaired=r.repaired)
        return [tuple(r.value) for r in results]

    def prepare(self, queries: Sequence[Query], trace: Trace) -> None:
        """Ask for the weights of every query of the batch at once, before fusing."""
        for q, ws in zip(queries, self.weights_batch(queries, trace), strict=True):
            self._ready[(q.id, q.text)] = ws

    def fuse(self, rankings: Sequence[Ranking], trace: Trace) -> dict[str, float]:
        q = rankings[0].query
        weights = self._ready.pop((q.id, q.text), None)
        if weights is None:  # not prepared (fuse called on its own)
            weights = self.weights_batch([q], trace)[0]
        return weighted_minmax([{d.doc_id: d.score for d in r.docs} for r in rankings], weights)

    def describe(self) -> str:
        extra = (f", {self.llm.name}, tolerance={self.tolerance:g}, max_tokens="
                 f"{self.max_tokens}, prompt={self.contract.name}")
        extra += ", structured=True" if self.structured else ""
        if self.repair_range is not None:
            extra += f", repair_range={list(self.repair_range)}"
        return super().describe()[:-1] + extra + ")"
