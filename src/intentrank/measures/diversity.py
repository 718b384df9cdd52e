"""TREC diversity measures of rankings for multi-aspect questions (method 4), from TREC's
ndeval through ir-measures (provider ``pyndeval``): ``alpha_nDCG@10`` (alpha 0.5),
``ERR_IA@10``, ``StRecall@10`` (S-recall), over subtopic qrels in which every aspect of a
question is one subtopic (the qrels ``iteration`` field). The questions are aspect sets
(:mod:`intentrank.data.aspects`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ir_measures

from intentrank.data.aspects import AspectQuestion
from intentrank.measures.metrics import EvalResult, MetricError, score_queries

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
    return score_queries(measures, subtopic_qrels(questions), run, [q.id for q in questions],
                         " (they need ir-measures' pyndeval provider)")
