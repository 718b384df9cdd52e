"""What a shard of a distributed index answers (``scale/coordinator.py``), on an ordinary
:class:`~intentrank.index.store.Index`: BM25 in two phases with global statistics, dense
search, document lines and filter masks. One narrow module over the Index's existing
methods and the index's one BM25 scorer (:class:`~intentrank.index.bm25_scorer.Postings`,
the same as filters and segments use), so the index internals can change underneath by
re-pointing these functions only.

BM25 across shards (the same idea as a filter's own statistics in :mod:`index.subset`): phase
one asks each shard for the statistics of the query terms among its live, allowed rows
(:func:`bm25_term_stats`: document frequency per term, document count, total length); the
coordinator adds them up; phase two scores each shard's rows with the summed statistics
(:func:`bm25_search_global`), element for element what one index of every shard's documents
computes (its idf from the global document frequency and count, its average length the
global total over the global count). Results are local rows, best first, ties by row."""

from __future__ import annotations

from typing import Any

import numpy as np

from intentrank.index.bm25_scorer import BM25Stats, Postings
from intentrank.index.hits import Hits, bm25_tokenize


def tokenize(index: Any, texts: list[str]) -> list[list[str]]:
    """``texts`` as the index's BM25 leg tokenises queries."""
    s = index.settings.bm25
    return bm25_tokenize(texts, s.stopwords, s.stemmer, tokens=s.tokens)


def _postings(index: Any) -> Postings:
    """The index's BM25 postings with raw term frequencies (built once per open Index)."""
    found = index.bm25_postings
    if found is None:
        raise ValueError(f"{index.path} kept no BM25 term rows (built before they were "
                         f"kept): rebuild it to serve it as a shard")
    return found


def _allowed(index: Any, allow: np.ndarray | None) -> np.ndarray:
    return np.ones(len(index), dtype=bool) if allow is None else np.asarray(allow, dtype=bool)


def bm25_term_stats(index: Any, terms: list[str], allow: np.ndarray | None = None
                    ) -> dict[str, Any]:
    """Phase one: among the allowed live rows, ``n`` (how many), ``total_len`` (their
    summed BM25 lengths) and ``df`` (per term of ``terms``, the rows holding it)."""
    post = _postings(index)
    allow = _allowed(index, allow)
    return {"n": int(allow.sum()), "total_len": post.total_len(allow),
            "df": post.df(terms, allow)}


def combine_stats(stats: list[dict[str, Any]]) -> tuple[int, float, dict[str, int]]:
    """The global ``n``, average length and ``df`` of several shards' phase-one statistics
    (:func:`bm25_term_stats`); the average is 0.0 where no row is allowed."""
    n = sum(st["n"] for st in stats)
    df: dict[str, int] = {}
    for st in stats:
        for term, d in st["df"].items():
            df[term] = df.get(term, 0) + d
    return n, (sum(st["total_len"] for st in stats) / n if n else 0.0), df


def bm25_search_global(index: Any, tokens: list[list[str]], k: int, n: int, avg_len: float,
                       df: dict[str, int], allow: np.ndarray | None = None) -> list[Hits]:
    """Phase two: each tokenised query's positive top ``k`` among the allowed rows, scored
    with the global statistics ``n``, ``avg_len`` and ``df``; local rows, ties by row."""
    return _postings(index).search(tokens, k, _allowed(index, allow),
                                   BM25Stats(n, avg_len, df))


def dense_search(index: Any, vectors: np.ndarray, k: int, allow: np.ndarray | None = None
                 ) -> list[Hits]:
    """Each query vector's top ``k`` local rows of the dense leg (exact or ANN, as the
    index searches), among the allowed rows."""
    return index.search_dense([""] * len(vectors), k, query_vectors=vectors, allow=allow)


def doc_records(index: Any, ids: list[str]) -> list[bytes | None]:
    """Each id's docs.jsonl line as stored (None where the shard does not hold it)."""
    out: list[bytes | None] = []
    for doc_id in ids:
        row = index.row_of.get(doc_id)
        out.append(None if row is None else index.doc_line(row))
    return out


def allowed_mask(index: Any, filter_text: str) -> np.ndarray:
    """The rows a filter's text matches (bool mask over the shard's rows)."""
    return np.asarray(index.allowed_rows(filter_text), dtype=bool)
