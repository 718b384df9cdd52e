"""TREC diversity measures of rankings for multi-aspect questions (method 4), from TREC's
ndeval through ir-measures (provider ``pyndeval``): ``alpha_nDCG@10`` (alpha 0.5),
``ERR_IA@10``, ``StRecall@10`` (S-recall), over subtopic qrels in which every aspect of a
question is one subtopic (the qrels ``iteration`` field). The questions are aspect sets
(:mod:`intentrank.data.aspects`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ir_measures

from intentrank.data.aspects import AspectQuestion
from intentrank.measures.metrics import EvalResult, MetricError

DIVERSITY_METRICS = ("alpha_nDCG@10", "ERR_IA@10", "StRecall@10")


def subtopic_qrels(questions: Sequence[AspectQuestion]) -> list[ir_measures.Qrel]:
    """One qrel per (question, aspect, document), the aspect's id as the subtopic
    (``iteration``)."""
    return [ir_measures.Qrel(q.id, d, g, a.id) for q in questions for a in q.aspects
            for d, g in a.docs.items()]


def evaluate_diversity(run: Mapping[str, Mapping[str, float]],
                       questions: Sequence[AspectQuestion],
                       metrics: Sequence[str] = DIVERSITY_METRICS) -> EvalResult:
    """ndeval's measures (alpha-nDCG, ERR-IA, S-recall, ...) per question; a question with
    no retrieved document counts 0."""
    try:
        measures = {name: ir_measures.parse_measure(name) for name in metrics}
    except (ValueError, NameError, SyntaxError, TypeError, AttributeError) as exc:
        raise MetricError(f"unknown diversity metric in {list(metrics)}: {exc}") from exc
    by_str = {str(m): name for name, m in measures.items()}
    per_query = {q.id: {name: 0.0 for name in metrics} for q in questions}
    clean = {q: dict(docs) for q, docs in run.items() if q in per_query and docs}
    if clean:
        try:
            for m in ir_measures.iter_calc(list(measures.values()), subtopic_qrels(questions),
                                           clean):
                per_query[m.query_id][by_str[str(m.measure)]] = float(m.value)
        except Exception as exc:  # noqa: BLE001 (a missing provider raises ValueError etc.)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise MetricError(f"cannot compute {', '.join(metrics)} (they need ir-measures' "
                              f"pyndeval provider): {first}") from exc
    n = max(len(per_query), 1)
    return EvalResult(list(metrics), {name: sum(s[name] for s in per_query.values()) / n
                                      for name in metrics}, per_query)
