"""The one BM25 formula of the index, for every bm25s method it offers (robertson, lucene,
atire, bm25l, bm25+), given statistics and an allow mask.

bm25s precomputes, per posting, ``float32(idf * tfc - nonoccurrence)`` with the corpus's
document frequency, count and average length (``BM25.index``), and at query time sums a
query's postings in query order (repeats included) and adds, for bm25l and bm25+, the
non-occurrence score of each query term (``idf * tfc(tf=0)``: a document without the term
still scores for it). :class:`BM25Formula` is that computation, element for element (the
same bm25s idf and tf functions, the same float32/float64 steps); everything that scores
BM25 uses it:

- :func:`bm25_from_rows`: a bm25s index (precomputed impacts) of term rows, with their own
  statistics (a build, a full merge) or given global ones (a shard of a sharded build): the
  fast path, searched by bm25s's numpy or numba backend;
- :class:`Postings`: scores at query time from term rows, with the statistics of the
  allowed rows (a filter, the live rows of several segments or with deleted rows) or given
  global ones (the cluster's shards, :mod:`intentrank.index.shard_api`).

Either way, the scores are those of a fresh bm25s build of the documents the statistics
describe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from intentrank.index.hits import NO_HITS, Hits, top_k
from intentrank.index.settings import BM25Settings
from intentrank.index.terms import TermRows

NONOCCURRENCE_METHODS = ("bm25l", "bm25+")


@dataclass(frozen=True)
class BM25Stats:
    """Collection statistics BM25 scores with: the document count, their mean length (as
    ``np.mean`` of the lengths gives it) and each term's document frequency."""

    n: int
    avg_len: float
    df: Mapping[str, int]


class BM25Formula:
    """bm25s's idf, term-frequency and non-occurrence components for one method's settings."""

    def __init__(self, s: BM25Settings) -> None:
        import bm25s
        from bm25s import scoring

        ref = bm25s.BM25(method=s.method, k1=s.k1, b=s.b)
        self.s, self.dtype, self.delta = s, np.dtype(ref.dtype), ref.delta
        self.int_dtype = ref.int_dtype
        self._idf = scoring._select_idf_scorer(ref.idf_method)
        self._tfc = scoring._select_tfc_scorer(s.method)
        self.nonoccurring = s.method in NONOCCURRENCE_METHODS

    def idf(self, df: np.ndarray, n: int) -> np.ndarray:
        """float32 idf of each document frequency (0 where it is 0), as bm25s's idf array."""
        out = np.zeros(len(df), dtype=self.dtype)
        for i, d in enumerate(np.asarray(df).tolist()):
            if d:
                out[i] = self._idf(d, N=n)
        return out

    def nonoccurrence(self, df: np.ndarray, n: int) -> np.ndarray:
        """float32 score a document without the term gets for it (bm25l, bm25+; zeros for
        the other methods), as bm25s's non-occurrence array: the float64 idf times the
        term-frequency component at tf 0 (which does not depend on the lengths)."""
        out = np.zeros(len(df), dtype=self.dtype)
        if self.nonoccurring:
            one = np.float64(1.0)  # numpy division, as bm25s's (l_d = l_avg = avg_len)
            tfc = self._tfc(tf_array=0, l_d=one, l_avg=one, k1=self.s.k1, b=self.s.b,
                            delta=self.delta)
            for i, d in enumerate(np.asarray(df).tolist()):
                if d:
                    out[i] = self._idf(d, N=n) * tfc
        return out

    def impacts(self, tf: np.ndarray, l_d: np.ndarray, avg_len: float, idf: np.ndarray,
                nonocc: np.ndarray) -> np.ndarray:
        """float32 per-posting scores: ``idf * tfc(tf, l_d) - nonocc`` (arrays aligned per
        posting; ``tf`` float32, ``l_d`` int64, ``avg_len`` float64), as bm25s computes them."""
        s = self.s
        tfc = self._tfc(tf_array=np.asarray(tf, dtype=np.float32), l_d=l_d,
                        l_avg=np.float64(avg_len), k1=s.k1, b=s.b, delta=self.delta)
        out = idf * tfc
        if self.nonoccurring:
            out = out - nonocc
        return out.astype(self.dtype)


def bm25_from_rows(rows: TermRows, s: BM25Settings, stats: BM25Stats | None = None) -> Any:
    """A bm25s.BM25 index of ``rows`` (term frequencies) whose precomputed impacts are
    :class:`BM25Formula`'s: with the rows' own statistics, array for array what
    ``bm25s.BM25.index`` makes of the same documents, or with ``stats`` (global ones: a
    shard's, scored as the whole collection). With given statistics and a method with
    non-occurrence scores, the vocabulary is every term of ``stats.df`` (a query term
    absent from this shard still adds its non-occurrence score, as in the whole index)."""
    import bm25s
    import scipy.sparse as sp

    f = BM25Formula(s)
    vocab = list(rows.vocab)
    counts = rows.counts
    if stats is not None and f.nonoccurring:
        held = set(vocab)
        extra = [t for t in stats.df if t not in held]
        if extra:
            vocab += extra
            counts = sp.hstack([counts, sp.csr_matrix((counts.shape[0], len(extra)),
                                                      dtype=np.float32)]).tocsr()
    csc = counts.tocsc()
    csc.sort_indices()
    doc_len = np.asarray(rows.counts.sum(axis=1)).ravel().astype(np.int64)
    if stats is None:
        df = np.diff(csc.indptr)
        n, avg_len = csc.shape[0], doc_len.mean()  # np.mean of the lengths, as bm25s
    else:
        df = np.array([stats.df.get(t, 0) for t in vocab], dtype=np.int64)
        n, avg_len = stats.n, stats.avg_len
    idf, nonocc = f.idf(df, n), f.nonoccurrence(df, n)
    term_of = np.repeat(np.arange(len(vocab)), np.diff(csc.indptr))
    data = f.impacts(csc.data, doc_len[csc.indices], avg_len, idf[term_of], nonocc[term_of])
    retriever = bm25s.BM25(method=s.method, k1=s.k1, b=s.b)
    retriever.scores = {"data": data, "indices": csc.indices.astype(retriever.int_dtype),
                        "indptr": csc.indptr.astype(np.int64), "num_docs": csc.shape[0]}
    retriever.vocab_dict = {t: i for i, t in enumerate(vocab)}
    retriever.nonoccurrence_array = nonocc if f.nonoccurring else None
    return retriever


class Postings:
    """Each term's postings (rows ascending) with raw term frequencies, and row lengths:
    BM25 scored at query time with the allowed rows' statistics or given ones."""

    def __init__(self, rows: TermRows, s: BM25Settings) -> None:
        csc = rows.counts.tocsc()
        csc.sort_indices()
        self.indptr, self.rows, self.tf = csc.indptr, csc.indices.astype(np.int64), csc.data
        self.term = {t: i for i, t in enumerate(rows.vocab)}
        self.doc_len = np.asarray(rows.counts.sum(axis=1)).ravel().astype(np.int64)
        self.formula = BM25Formula(s)

    def __len__(self) -> int:
        return len(self.doc_len)

    def df(self, terms: list[str], allow: np.ndarray) -> dict[str, int]:
        """Each of ``terms``' document frequency among the allowed rows (terms they do not
        hold left out)."""
        out: dict[str, int] = {}
        for term in dict.fromkeys(terms):
            t = self.term.get(term)
            if t is not None and (d := int(allow[self.rows[self.indptr[t]:
                                                           self.indptr[t + 1]]].sum())):
                out[term] = d
        return out

    def stats(self, terms: list[str], allow: np.ndarray) -> BM25Stats:
        """The allowed rows' count, mean length and ``terms``' document frequencies."""
        n = int(allow.sum())
        avg = self.doc_len[allow].mean() if n else 0.0  # np.mean of the lengths, as bm25s
        return BM25Stats(n, float(avg), self.df(terms, allow))

    def total_len(self, allow: np.ndarray) -> int:
        return int(self.doc_len[allow].sum())

    def scores(self, tokens: list[str], allow: np.ndarray, stats: BM25Stats) -> np.ndarray:
        """float32 BM25 scores of every row for one tokenised query: the allowed rows scored
        as documents of the collection ``stats`` describes (the others 0). A query term
        counts where ``stats`` gives it a document frequency, repeats included, in query
        order, as bm25s sums them."""
        f = self.formula
        out = np.zeros(len(allow), dtype=f.dtype)
        known = [t for t in tokens if stats.df.get(t)]
        if not known or not stats.n:
            return out
        df = np.array([stats.df[t] for t in known], dtype=np.int64)
        idf, nonocc = f.idf(df, stats.n), f.nonoccurrence(df, stats.n)
        for j, token in enumerate(known):
            term = self.term.get(token)
            if term is None:
                continue  # a term of the collection, not of these rows
            lo, hi = self.indptr[term], self.indptr[term + 1]
            rows = self.rows[lo:hi]
            keep = allow[rows]
            rows = rows[keep]
            if len(rows):  # rows are distinct: np.add.at's sum
                out[rows] += f.impacts(self.tf[lo:hi][keep], self.doc_len[rows],
                                       stats.avg_len, idf[j], nonocc[j])
        if f.nonoccurring:
            out += nonocc.sum()  # bm25s: the query's non-occurrence scores, then the mask
            out[~allow] = 0
        return out

    def search(self, tokens: list[list[str]], k: int, allow: np.ndarray,
               stats: BM25Stats | None = None) -> list[Hits]:
        """Each query's positive top ``k`` among the allowed rows, ties by row, scored with
        ``stats`` (default: the allowed rows' own)."""
        if not allow.any() or (stats is not None and not stats.n):
            return [NO_HITS for _ in tokens]
        own = self.stats([], allow) if stats is None else stats
        out = []
        for toks in tokens:
            st = stats if stats is not None else BM25Stats(own.n, own.avg_len,
                                                           self.df(toks, allow))
            out.append(top_k(self.scores(toks, allow, st), k) if toks else NO_HITS)
        return out


def postings_of(rows: TermRows | None, s: BM25Settings) -> Postings | None:
    return None if rows is None else Postings(rows, s)
