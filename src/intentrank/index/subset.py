"""Filtered lexical search as a search of an index of the matching documents only (and BM25
of an index of several segments or with deleted rows: its live rows are the "filter").

A filter (a leg search's ``allow`` mask) restricts a search to some documents. Dense scores
do not depend on the other documents, so the dense leg only masks. The lexical legs' scores
do: BM25's idf and average length, TF-IDF's idf and norms, the graph's PageRank are
statistics of the collection. Here they are the matching documents' statistics, so a filtered
search returns exactly what an index built from the matching documents returns (the same
ids, ranks and scores), and a filter's documents are scored as if the others did not exist:
no term statistic of a document outside it reaches a result (a scope's view, service
keys, depends on that).

- BM25 is scored at query time from each term's postings with raw term frequencies (the
  generation's kept term rows, ``terms/bm25.npz``), with the document frequency, count and
  average length of the allowed rows, by the index's one BM25 formula
  (:class:`intentrank.index.bm25_scorer.Postings`): no per-filter precomputation.
- TF-IDF combines each segment's kept counts over the allowed rows
  (:func:`~intentrank.index.tfidf_segments.combine`) and the graph recomputes its edges and
  PageRank over them (:func:`~intentrank.index.terms.graph_of`), the first time a filter is
  seen, kept for the next :data:`SUBSETS_KEPT` filters.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from intentrank.index.bm25_scorer import Postings
from intentrank.index.hits import NO_HITS, Hits, top_k

SUBSETS_KEPT = 8
BM25Postings = Postings  # the name bench/bench_updates.py imports (the scorer's Postings)


class SubsetCache:
    """What a filter's allowed rows give (e.g. a TF-IDF leg over them), for the last
    :data:`SUBSETS_KEPT` filters, computed once per filter even from many threads."""

    def __init__(self, make: Callable[[np.ndarray], Any]) -> None:
        self._make = make
        self._kept: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, allow: np.ndarray) -> Any:
        key = hashlib.sha1(np.packbits(allow).tobytes()).digest() + len(allow).to_bytes(8,
                                                                                       "big")
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
            value = self._make(np.flatnonzero(allow))
            self._kept[key] = value
            if len(self._kept) > SUBSETS_KEPT:
                self._kept.popitem(last=False)
            return value


class SubsetLegs:
    """An index's lexical legs searched with a filter's own statistics; each returns None
    where the index kept no term rows (built before they were kept): the caller then masks
    the whole index's scores."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self._tfidf = SubsetCache(self._tfidf_of)
        self._graph = SubsetCache(self._graph_of)

    def bm25(self, tokens: list[list[str]], k: int, allow: np.ndarray) -> list[Hits] | None:
        postings = self.index.bm25_postings
        return None if postings is None else postings.search(tokens, k, allow)

    def tfidf(self, texts: list[str], k: int, allow: np.ndarray) -> list[Hits] | None:
        subset = self._tfidf.get(allow)
        if subset is None:
            return None
        rows, leg = subset
        if leg is None:
            return [NO_HITS for _ in texts]
        scores = leg.scores(texts)
        return [Hits(rows[h.rows], h.scores) for h in (top_k(scores[j], k)
                                                       for j in range(len(texts)))]

    def graph(self, texts: list[str], k: int, allow: np.ndarray) -> list[Hits]:
        if not allow.any():
            return [NO_HITS for _ in texts]
        rows, inverted_rows, pr = self._graph.get(allow)
        return [Hits(rows[h.rows], h.scores) for h in graph_hits(texts, k, inverted_rows, pr)]

    def _tfidf_of(self, rows: np.ndarray) -> Any:
        from intentrank.index.tfidf_segments import combine, split

        parts = split(self.index, rows)
        if parts is None:
            return None
        return rows, combine(parts, self.index.settings.tfidf)  # None: no term (stop words)

    def _graph_of(self, rows: np.ndarray) -> Any:
        from intentrank.index.terms import graph_of

        ents = self.index.entities()
        kept = [ents[r] for r in rows.tolist()]
        return rows, inverted(kept), graph_of(kept, self.index.settings.graph)[1]


def inverted(entities: list[list[str]]) -> dict[str, list[int]]:
    """Entity -> the rows that mention it."""
    out: dict[str, list[int]] = {}
    for row, ents in enumerate(entities):
        for e in ents:
            out.setdefault(e, []).append(row)
    return out


def graph_hits(texts: list[str], k: int, inverted_rows: dict[str, list[int]], pr: np.ndarray
               ) -> list[Hits]:
    """The graph leg's score: shared entities * (1 + PageRank)."""
    from intentrank.index.entities import extract_entities

    out: list[Hits] = []
    for text in texts:
        rows = [row for e in extract_entities(text) for row in inverted_rows.get(e, ())]
        shared = np.bincount(np.asarray(rows, dtype=np.int64), minlength=len(pr))
        out.append(top_k(shared * (1.0 + pr), k))
    return out
