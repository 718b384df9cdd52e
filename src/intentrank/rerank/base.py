"""What every reranker shares: reorder the scored head, keep the unscored tail below."""

from __future__ import annotations

from collections.abc import Mapping

from intentrank.types import Ranking, ScoredDoc


def rerank_head(
    ranking: Ranking,
    scores: Mapping[str, float],
    stage: str,
    extra: Mapping[str, Mapping[str, float]] | None = None,
) -> Ranking:
    """Sort the documents in ``scores`` by score (ties by id) and keep the rest in order below.

    Earlier stage scores are kept; ``stage`` gets the new score and ``extra`` adds named
    per-document values (e.g. score components). Unscored documents get scores strictly
    below the lowest new score, so the ranking stays sorted by ``score``.
    """
    extra = extra or {}
    by_id = {d.doc_id: d for d in ranking.docs}
    head = []
    for doc_id, s in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])):
        prior = by_id[doc_id].stage_scores if doc_id in by_id else {}
        head.append(ScoredDoc(doc_id, float(s), {**prior, **extra.get(doc_id, {}),
                                                 stage: float(s)}))
    floor = min(scores.values(), default=0.0)
    tail = [d for d in ranking.docs if d.doc_id not in scores]
    head += [ScoredDoc(d.doc_id, floor - 1.0 - i, dict(d.stage_scores))
             for i, d in enumerate(tail)]
    return Ranking(ranking.query, head)
