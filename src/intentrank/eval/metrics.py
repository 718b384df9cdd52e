"""IR metrics through ir-measures (trec_eval semantics), aggregate and per query.

Metric names accept the common spellings: ``nDCG@10``, ``MRR@10`` (= ``RR@10``),
``MAP@100`` / ``MAP`` (= ``AP``), ``Recall@100`` (= ``R@100``), ``P@10`` and
``HitRate@5`` (= ``Success@5``). Queries that have judgments but no retrieved documents
count 0, so systems are always averaged over the same queries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import ir_measures

from intentrank.data.trec import Qrels, Run

DEFAULT_METRICS = ("nDCG@10", "MRR@10", "MAP@100", "Recall@100", "P@10", "HitRate@10")
_ALIASES = {"MRR": "RR", "MAP": "AP", "Recall": "R", "HitRate": "Success", "Hit": "Success",
            "NDCG": "nDCG", "ndcg": "nDCG"}


def to_measure(name: str) -> ir_measures.Measure:
    """Parse a metric name (aliases allowed) into an ir-measures measure."""
    m = re.fullmatch(r"([A-Za-z_]+)(@\d+)?", name.strip())
    if not m:
        raise ValueError(f"cannot parse metric {name!r}")
    base = _ALIASES.get(m.group(1), m.group(1))
    try:
        return ir_measures.parse_measure(base + (m.group(2) or ""))
    except (ValueError, NameError, SyntaxError) as exc:
        raise ValueError(f"unknown metric {name!r} (e.g. {', '.join(DEFAULT_METRICS)})") from exc


@dataclass
class EvalResult:
    """Mean scores over all judged queries, and the score of every query."""

    metrics: list[str]
    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)

    def column(self, metric: str) -> dict[str, float]:
        return {qid: scores[metric] for qid, scores in self.per_query.items()}


def evaluate(
    run: Mapping[str, Mapping[str, float]], qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS
) -> EvalResult:
    """Score ``run`` against ``qrels``; averaged over every query in ``qrels``."""
    metrics = list(dict.fromkeys(metrics))
    measures = {name: to_measure(name) for name in metrics}
    by_measure: dict[str, list[str]] = {}  # aliases (R@3, Recall@3) share one measure
    for name, m in measures.items():
        by_measure.setdefault(str(m), []).append(name)
    judged = {q: j for q, j in qrels.items() if j}
    per_query = {qid: {name: 0.0 for name in metrics} for qid in judged}
    clean_run: Run = {q: dict(docs) for q, docs in run.items() if q in judged and docs}
    if clean_run:
        unique = list({str(m): m for m in measures.values()}.values())
        for metric in ir_measures.iter_calc(unique, judged, clean_run):
            for name in by_measure[str(metric.measure)]:
                per_query[metric.query_id][name] = float(metric.value)
    n = max(len(per_query), 1)
    aggregate = {name: sum(s[name] for s in per_query.values()) / n for name in metrics}
    return EvalResult(list(metrics), aggregate, per_query)
