"""The results of a search as JSON-ready rows: the one shape the command line's
``intentrank search --json`` and the service's ``/search`` and ``/rerank`` share."""

from __future__ import annotations

from typing import Any

from intentrank.data.ingest.labels import source_label
from intentrank.rerank.coverage import aspect_labels
from intentrank.types import Ranking


def stage_ranks(ranking: Ranking) -> dict[str, dict[str, int]]:
    """doc id -> {stage-score name: the document's rank by that score}, 1-based."""
    columns: dict[str, list[tuple[float, str]]] = {}
    for d in ranking.docs:
        for name, value in d.stage_scores.items():
            columns.setdefault(name, []).append((-value, d.doc_id))
    ranks: dict[str, dict[str, int]] = {}
    for name, column in columns.items():
        for rank, (_, doc_id) in enumerate(sorted(column), 1):
            ranks.setdefault(doc_id, {})[name] = rank
    return ranks


def result_rows(ranking: Ranking, index: Any, top_k: int, include_text: bool = False
                ) -> list[dict[str, Any]]:
    """The top ``top_k`` documents of ``ranking``, each as ``rank``, ``doc_id``, ``score``,
    ``title``, ``source`` (``file › section (page N)`` for a passage read from a folder,
    :func:`~intentrank.data.ingest.source_label`; empty otherwise), ``text`` (only with
    ``include_text``), ``stage_scores`` (every stage's score, by path id), ``stage_ranks``
    (its rank by each of them) and, when an aspects stage ran, ``aspect`` (the aspect it
    covers, see :func:`~intentrank.rerank.coverage.aspect_labels`). ``index`` gives the
    documents (``doc(doc_id)``)."""
    ranks = stage_ranks(ranking)
    labels = aspect_labels(ranking) if ranking.query.derived_of("aspect") else None
    rows = []
    for rank, d in enumerate(ranking.docs[:top_k], 1):
        doc = index.doc(d.doc_id)
        rows.append({"rank": rank, "doc_id": d.doc_id, "score": d.score, "title": doc.title,
                     "source": source_label(doc.metadata),
                     **({"text": doc.text} if include_text else {}),
                     "stage_scores": d.stage_scores, "stage_ranks": ranks.get(d.doc_id, {}),
                     **({"aspect": labels[rank - 1]} if labels is not None else {})})
    return rows


__all__ = ["result_rows", "stage_ranks"]
