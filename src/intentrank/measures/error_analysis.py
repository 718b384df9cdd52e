"""Which queries a stage made worse, and what they have in common."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_NUMBER = re.compile(r"\d")


@dataclass
class Degradation:
    """Queries whose score dropped from ``before`` to ``after`` on one metric."""

    metric: str
    count: int
    share: float
    share_with_numbers: float
    overall_share_with_numbers: float
    mean_length: float
    overall_mean_length: float
    worst: list[dict[str, object]] = field(default_factory=list)


def degraded_queries(
    before: Mapping[str, float], after: Mapping[str, float], texts: Mapping[str, str],
    metric: str = "nDCG@10", worst: int = 5,
) -> Degradation:
    """Count, share with numbers and mean length (words) of degraded queries vs all queries,
    with the ``worst`` largest drops."""
    qids = [q for q in before if q in after]
    drops = {q: before[q] - after[q] for q in qids if after[q] < before[q] - 1e-12}

    def numeric(qs: list[str]) -> float:
        return sum(1 for q in qs if _NUMBER.search(texts.get(q, ""))) / len(qs) if qs else 0.0

    def mean_len(qs: list[str]) -> float:
        return sum(len(texts.get(q, "").split()) for q in qs) / len(qs) if qs else 0.0

    bad = sorted(drops, key=lambda q: (-drops[q], q))
    return Degradation(
        metric=metric, count=len(bad), share=len(bad) / len(qids) if qids else 0.0,
        share_with_numbers=numeric(bad), overall_share_with_numbers=numeric(qids),
        mean_length=mean_len(bad), overall_mean_length=mean_len(qids),
        worst=[{"query_id": q, "query": texts.get(q, ""), "before": before[q],
                "after": after[q]} for q in bad[:worst]],
    )
